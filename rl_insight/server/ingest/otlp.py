"""OTLP/HTTP trace payloads: decoding protobuf and JSON (as the OTLP spec encodes them),
and reading span attributes. Relaying always re-encodes as protobuf."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from rl_insight.wire.otlp import parse_json

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpError(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo Content-Encoding gzip/deflate, refusing output larger than ``limit``."""
    encoding = (encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise OtlpError(415, f"Content-Encoding {encoding!r} is not supported; use gzip")
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the {encoding} body is corrupt: {exc}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise OtlpError(413, f"the decompressed body is larger than {limit} bytes "
                             "(traces.max_body_bytes); send smaller batches")
    return out


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    ctype = (content_type or "").split(";")[0].strip().lower()
    req = ExportTraceServiceRequest()
    if ctype == PROTOBUF:
        try:
            req.ParseFromString(body)
        except DecodeError as exc:
            raise OtlpError(400, f"the body is not an OTLP ExportTraceServiceRequest "
                                 f"protobuf: {exc}") from None
        return req
    if ctype == JSON:
        try:
            return parse_json(body)
        except ValueError as exc:
            raise OtlpError(400, str(exc)) from None
    raise OtlpError(415, f"Content-Type {content_type!r} is not supported; use "
                         f"{PROTOBUF} or {JSON}")


def response(content_type: str) -> tuple[bytes, str]:
    """An empty ExportTraceServiceResponse in the request's encoding."""
    if (content_type or "").split(";")[0].strip().lower() == JSON:
        return b"{}", JSON
    return ExportTraceServiceResponse().SerializeToString(), PROTOBUF


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        return json_format.MessageToDict(getattr(v, kind))
    return getattr(v, kind)


def iter_spans(req: ExportTraceServiceRequest) -> Iterator[tuple[dict[str, Any], Any]]:
    """(merged resource and span attributes, span) for every span."""
    for rs in req.resource_spans:
        resource = {kv.key: value_of(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for span in ss.spans:
                attrs = dict(resource)
                attrs.update({kv.key: value_of(kv.value) for kv in span.attributes})
                yield attrs, span

