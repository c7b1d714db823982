"""Spans to an OTLP ExportTraceServiceRequest (protobuf), as the lane actors send them."""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from rl_insight.wire.attributes import (
    LANE_ATTR,
    PROCESS_ATTR,
    SERVICE_NAME,
    SERVICE_NAME_ATTR,
    STATE_ATTR,
)
from rl_insight.wire.events import Identity, Span
from rl_insight.wire.otlp import any_value

RUN_KEYS = ("project", "experiment_name")
_rand = random.Random(int.from_bytes(os.urandom(8), "little"))


_KV: dict[tuple[str, Any], KeyValue] = {}  # attribute messages, built once each


def key_value(k: str, v: Any) -> KeyValue:
    """One attribute as a message; the run, lane, state and process repeat on every span
    of a tick, so each distinct pair is built once (bounded cache)."""
    key = (k, v) if isinstance(v, (str, int, float, bool)) else None
    kv = _KV.get(key) if key is not None else None
    if kv is None:
        kv = KeyValue(key=k, value=any_value(v))
        if key is not None:
            if len(_KV) > 50_000:
                _KV.clear()
            _KV[key] = kv
    return kv


def encode(spans: Iterable[tuple[Identity, str, Span]], scope: str = "rl_insight") -> bytes:
    """(identity, process id, span) triples as one request with one resource; ``scope``
    the instrumentation scope's name (an import's tells the server so)."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key=SERVICE_NAME_ATTR,
                                           value=AnyValue(string_value=SERVICE_NAME)))
    scoped = rs.scope_spans.add()
    scoped.scope.name = scope
    for ident, process, s in spans:
        span = scoped.spans.add()
        span.name = s.name
        span.trace_id = (s.trace_id or _rand.getrandbits(128) or 1).to_bytes(16, "big")
        span.span_id = (s.span_id or _rand.getrandbits(64) or 1).to_bytes(8, "big")
        if s.parent_id:
            span.parent_span_id = s.parent_id.to_bytes(8, "big")
        span.start_time_unix_nano = s.start_ns
        span.end_time_unix_nano = max(s.end_ns, s.start_ns)
        span.kind = 1  # SPAN_KIND_INTERNAL
        # the run's and the process's attributes first; the caller's own win (upstream),
        # but an empty project or experiment name (an agent loop's unnamed project) does
        # not take the span out of its run
        attrs = {"project": ident.project, "experiment_name": ident.experiment_name,
                 PROCESS_ATTR: process}
        if s.lane is not None:
            attrs[LANE_ATTR] = s.lane
            attrs[STATE_ATTR] = s.name
        attrs.update((k, v) for k, v in s.attributes if v != "" or k not in RUN_KEYS)
        span.attributes.extend([key_value(k, v) for k, v in attrs.items()])
        if "error" in attrs:  # the block raised: OTLP's error status, with the type
            span.status.code = 2  # STATUS_CODE_ERROR
            span.status.message = str(attrs["error"])
    return req.SerializeToString()
