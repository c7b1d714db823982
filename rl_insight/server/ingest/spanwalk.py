"""One walk over a decoded OTLP export: every span visited once, its attributes decoded
once (its resource's once a resource), its text attributes put to the server's text
policy where it has any, handed on with its resource's and its scope's. What the intake
makes of a span (its state row, its lane's figures, a framework's meaning, an engine's
request) reads these, never the export again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rl_insight.server.ingest import textpolicy
from rl_insight.server.ingest.otlp import value_of
from rl_insight.wire.attributes import LANE_ATTR, PROCESS_ATTR, STATE_ATTR
from rl_insight.wire.rank_evidence import EVIDENCE_KEYS

LANE_KEYS = ("project", "experiment_name", LANE_ATTR, STATE_ATTR)


class SpanAt(NamedTuple):
    """A span with where it came from: its own attributes and its resource's (decoded,
    by key), its instrumentation scope's name."""

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


def walk(req: Any, policy: str = "full", limit: int = textpolicy.NO_LIMIT) -> Walk:
    """Every span of ``req`` once, the text policy applied (in place) to a span that
    holds a text attribute or events."""
    spans: list[SpanAt] = []
    texts = 0
    enforced = textpolicy.enforced(policy, limit)
    is_text = textpolicy.is_text_key
    for rs in req.resource_spans:
        resource = {kv.key: value_of(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for span in ss.spans:
                attrs = {kv.key: value_of(kv.value) for kv in span.attributes}
                if enforced and (len(span.events) or any(map(is_text, attrs))):
                    changed = textpolicy.apply_span(span, policy, limit)
                    if changed:
                        texts += changed
                        attrs = {kv.key: value_of(kv.value) for kv in span.attributes}
                spans.append(SpanAt(span, attrs, resource, scope))
    return Walk(spans, texts)


def state_row(s: SpanAt) -> StateRow | None:
    """The span's state row, when the span itself names its lane (``state_lane_id``)."""
    a = s.attrs
    lane = a.get(LANE_ATTR)
    if lane is None:
        return None
    evidence = {k: a[k] for k in EVIDENCE_KEYS if k in a} or None
    return StateRow(str(a.get("project", "")), str(a.get("experiment_name", "")), str(lane),
                    str(a.get(STATE_ATTR) or s.span.name),
                    s.span.start_time_unix_nano, s.span.end_time_unix_nano,
                    str(a.get(PROCESS_ATTR, "")), a.get("step"), evidence)


def lane_at(s: SpanAt) -> tuple[str, str, str | None, str, int, bytes]:
    """(project, experiment_name, state_lane_id, state_name, end ns, span id) of a span,
    the span's own attribute first, else its resource's: the lanes' statistics."""
    found = {}
    for key in LANE_KEYS:
        v = s.attrs.get(key)
        if v is None:
            v = s.resource.get(key)
        if v is not None:
            found[key] = str(v)
    return (found.get("project", ""), found.get("experiment_name", ""),
            found.get(LANE_ATTR), found.get(STATE_ATTR) or s.span.name,
            s.span.end_time_unix_nano, s.span.span_id)

