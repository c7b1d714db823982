"""How the public calls read their arguments: metric labels as Prometheus takes them,
span attributes as OpenTelemetry does, and upstream's keyword calls (``name=``,
``value=``) told from labels of the same name. Pure; no client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rl_insight.wire import naming


def labels_of(labels: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Label pairs, names made Prometheus-safe, sorted (one series per label set)."""
    if not labels:
        return ()
    return tuple(sorted((naming.label_name(k), str(v)) for k, v in labels.items()))


class _Default(float):
    """A default that reads as its value in signatures and can be told from a value
    the caller passed (``is``)."""


class _NoDoc(str):
    pass


class _Required:
    def __repr__(self) -> str:
        return "<required>"


_ONE, _NO_DOC, _REQUIRED = _Default(1.0), _NoDoc(""), _Required()


def split_params(name: Any, value: Any, documentation: Any, labels: dict, value_key: str
            ) -> tuple[Any, Any, str]:
    """Positional arguments win; a keyword equal to a parameter name (``name=``,
    ``value=``, ``amount=``, ``documentation=``: upstream's keyword calls) fills that
    parameter when it was not given positionally and is a label otherwise, so no label
    name makes a call raise."""
    if name is _REQUIRED:
        name = labels.pop("name", _REQUIRED)
    if value is _ONE or value is _REQUIRED:
        value = labels.pop(value_key, 1.0 if value is _ONE else value)
    if documentation is _NO_DOC:
        documentation = labels.pop("documentation", "")
        if not isinstance(documentation, str):
            labels["documentation"], documentation = documentation, ""
    return name, value, documentation


_SCALARS = (str, bool, int, float)


def attributes_of(labels: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Attributes as OpenTelemetry takes them: scalars, and sequences of scalars (kept as
    a tuple, sent as an OTLP array: agent frameworks put tool lists there); anything else
    as its text."""
    out = []
    for k, v in labels.items():
        if isinstance(v, (list, tuple)):
            v = tuple(x if isinstance(x, _SCALARS) else str(x) for x in v)
        elif not isinstance(v, _SCALARS):
            v = str(v)
        out.append((str(k), v))
    return tuple(out)
