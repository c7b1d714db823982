"""The records that cross process boundaries: from the client to the hub and the lane
actors, and from the lanes to the server. Plain tuples, cheap to build and to pickle,
imported by both sides so neither imports the other."""

from __future__ import annotations

from typing import Any, NamedTuple

Labels = tuple[tuple[str, str], ...]

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"


class Identity(NamedTuple):
    project: str
    experiment_name: str


class Metric(NamedTuple):
    """One observation. ``name`` is the exported family name (already prefixed and
    sanitised); counters carry the increment, gauges the value, histograms one sample."""

    kind: str
    name: str
    value: float
    labels: Labels
    doc: str = ""
    buckets: tuple[float, ...] | None = None  # histograms: upper bounds; None: defaults


class Span(NamedTuple):
    """A finished span. ``lane`` is None for spans that belong to no state lane."""

    name: str
    start_ns: int
    end_ns: int
    lane: str | None
    attributes: tuple[tuple[str, Any], ...]
    trace_id: int = 0  # 0: the lane picks one
    span_id: int = 0
    parent_id: int = 0
    ends_state: bool = False  # a trace_state block: also the lane leaving the state


class StateChange(NamedTuple):
    """A lane entering (``entering``) or leaving a state, so the lane knows its current
    state while a span is still open. A trace_state block sends only the entering one;
    its span (``ends_state``) marks the leaving."""

    lane: str
    state: str
    time_ns: int
    entering: bool
    token: int = 0  # pairs an exit with its enter (the span id)


class Exposition(NamedTuple):
    """The whole text exposition of a process's own Prometheus registry, relayed for an
    engine that serves no /metrics (OpenRLHF's in-process vLLM): the lane actor of
    ``lane`` pushes the newest one as the group ``job`` with ``labels``."""

    lane: str
    job: str
    labels: Labels
    text: str


class Batch(NamedTuple):
    """What one process hands over in one call. ``identity`` None: resolve by job."""

    identity: Identity | None
    job_id: str
    process: str
    items: list
    dropped: int = 0


# the kinds are Prometheus' own type names, which the exposition code spells in that
# sense: left out of tests/test_wire.py's scan
EVERYDAY = frozenset({"COUNTER", "GAUGE", "HISTOGRAM"})
