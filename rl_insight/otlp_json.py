"""OTLP/JSON trace exports read into the protobuf message: the server's intake
(``Content-Type: application/json``) and the trace-file importer (ROLL's collector
writes one export a line) read them alike."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_b64(node: Any) -> None:
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping wants base64."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _ID_FIELDS and isinstance(v, str):
                try:
                    node[k] = base64.b64encode(bytes.fromhex(v)).decode()
                except ValueError:
                    raise ValueError(f"{k} {v!r} is not hex") from None
            else:
                _hex_ids_to_b64(v)
    elif isinstance(node, list):
        for v in node:
            _hex_ids_to_b64(v)


def parse(body: bytes | str) -> ExportTraceServiceRequest:
    """The export an OTLP/JSON body holds; ValueError saying what is wrong with it."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("the JSON body must be an object with resourceSpans")
    _hex_ids_to_b64(data)
    req = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(data, req, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"the JSON is not an OTLP trace request: {exc}") from None
    return req
