"""One walk over a decoded OTLP export: every span visited once, its text attributes put
to the server's text policy, its attributes read once into a mapping of their raw values
(decoded by whoever wants one, never twice), handed on with its resource's and its
scope's. What the intake makes of a span (its state row, its lane's figures, a
framework's meaning, an engine's request) reads these, never the export again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rl_insight.anatomy.ranks import EVIDENCE_KEYS
from rl_insight.server.ingest import textpolicy
from rl_insight.server.ingest.otlp import value_of

LANE_KEYS = ("project", "experiment_name", "state_lane_id", "state_name")


class SpanAt(NamedTuple):
    """A span with where it came from: its resource's attributes and its own (raw
    ``AnyValue``s by key: ``value_of`` decodes one), its instrumentation scope's name."""

    span: Any  # opentelemetry.proto.trace.v1.trace_pb2.Span
    attrs: dict[str, Any]
    resource: Mapping[str, Any]
    scope: str


class StateRow(NamedTuple):
    """A span on a state lane, as the step anatomy and the recent-spans store take it."""

    project: str
    experiment: str
    lane: str
    state: str
    start_ns: int
    end_ns: int
    process: str
    step: object
    evidence: dict | None = None


class Walk(NamedTuple):
    spans: list[SpanAt]
    texts: int  # text attributes the policy changed (0: the payload is as it came)


def walk(req: Any, policy: str = "full", limit: int = 1 << 62) -> Walk:
    """Every span of ``req`` once, the text policy applied to it first (in place)."""
    spans: list[SpanAt] = []
    texts = 0
    for rs in req.resource_spans:
        resource = {kv.key: kv.value for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for span in ss.spans:
                texts += textpolicy.apply_span(span, policy, limit)
                spans.append(SpanAt(span, {kv.key: kv.value for kv in span.attributes},
                                    resource, scope))
    return Walk(spans, texts)


def text(value: Any) -> str:
    """An attribute's value as text (a string's own, without decoding others twice)."""
    return value.string_value if value.HasField("string_value") else str(value_of(value))


def state_row(s: SpanAt) -> StateRow | None:
    """The span's state row, when the span itself names its lane (``state_lane_id``)."""
    a = s.attrs
    lane = a.get("state_lane_id")
    if lane is None:
        return None
    evidence = {k: value_of(a[k]) for k in EVIDENCE_KEYS if k in a} or None
    step = a.get("step")
    return StateRow(str(value_of(a["project"])) if "project" in a else "",
                    str(value_of(a["experiment_name"])) if "experiment_name" in a else "",
                    str(value_of(lane)),
                    str(value_of(a["state_name"])) if "state_name" in a else s.span.name,
                    s.span.start_time_unix_nano, s.span.end_time_unix_nano,
                    str(value_of(a["process_id"])) if "process_id" in a else "",
                    None if step is None else value_of(step), evidence)


def lane_at(s: SpanAt) -> tuple[str, str, str | None, str, int, bytes]:
    """(project, experiment_name, state_lane_id, state_name, end ns, span id) of a span,
    the span's own attribute first, else its resource's: the lanes' statistics."""
    found = {}
    for key in LANE_KEYS:
        v = s.attrs.get(key)
        if v is None:
            v = s.resource.get(key)
        if v is not None:
            found[key] = text(v)
    return (found.get("project", ""), found.get("experiment_name", ""),
            found.get("state_lane_id"), found.get("state_name") or s.span.name,
            s.span.end_time_unix_nano, s.span.span_id)


def decoded(values: Mapping[str, Any]) -> dict[str, Any]:
    """A mapping of raw attribute values, decoded (a span that needs all of them)."""
    return {k: value_of(v) for k, v in values.items()}
