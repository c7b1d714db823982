"""OTLP as the package writes and reads it: Python values as ``AnyValue``s (the one
encoder, for the lane actors' spans, the trace files it imports and the spans the server
annotates: scalars as their kind, sequences as arrays, a mapping as its JSON text,
anything else as its text), and OTLP/JSON exports read into the protobuf message (the
server's intake and the trace-file importer read them alike)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue


def any_value(v: Any) -> AnyValue:
    """``v`` as an OTLP attribute value: every value has one, none raises."""
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, str):
        return AnyValue(string_value=v)
    if isinstance(v, (tuple, list)):
        return AnyValue(array_value=ArrayValue(values=[any_value(x) for x in v]))
    if isinstance(v, Mapping):
        return AnyValue(string_value=json.dumps(v, default=str))
    return AnyValue(string_value=str(v))


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


def parse_json(body: bytes | str) -> ExportTraceServiceRequest:
    """The export an OTLP/JSON body holds (``Content-Type: application/json``, or a line
    of ROLL's collector's file); ValueError saying what is wrong with it."""
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
