"""Python values as OTLP ``AnyValue``s: the package's one encoder, for the lane actors'
spans, the trace files it imports and the spans the server annotates. Scalars as their
kind, sequences as arrays (an agent framework's tool list), a mapping as its JSON text,
anything else as its text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue


def any_value(v: Any) -> AnyValue:
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
