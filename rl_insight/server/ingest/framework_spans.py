"""Spans with no state lane, read once for what the frameworks' tables make of them:

- step timings: this package's framework trackers send each step's timing keys as a
  span ``step_timing`` (attributes ``framework``, ``step``, ``timing.<key>``), from
  which the step anatomy makes its rows where no lane tells the step;
- a framework's own spans (ROLL's and NeMo-RL's OpenTelemetry tracers, AReaL's and
  NeMo-RL's Chrome traces through ``rl-insight import``): its table
  (rl_insight/frameworks/) puts them on the driver's lane, a rank's lane or
  the trainer's step marks. Those spans are annotated in place with the lane, the state
  and the run, so Tempo holds them as it holds this package's own.

A framework is known by the resource attribute ``rl_insight.framework`` (the importer
sets it) or its tracers' instrumentation scope. Its run is the resource's or the span's
``project`` and ``experiment_name`` (``OTEL_RESOURCE_ATTRIBUTES``). Spans a table does
not name, and spans of no run, are kept as they are and counted, never refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from rl_insight import frameworks
from rl_insight.frameworks.table import DRIVER, RANK, STEP, Framework
from rl_insight.server.ingest.spanwalk import SpanAt, StateRow
from rl_insight.wire.attributes import (
    LANE_ATTR,
    SEGMENT_ATTR,
    SERVICE_NAME_ATTR,
    STATE_ATTR,
    STATE_INTERVAL,
    STEP_ATTR,
    STEP_STATE,
)
from rl_insight.wire.frameworks import (
    FRAMEWORK_ATTR,
    IMPORT_SCOPE,
    RESOURCE_FRAMEWORK_ATTR,
    STEP_TIMING,
    TIMING_PREFIX,
)
from rl_insight.wire.laneid import TRAINER as TRAINER_LANE
from rl_insight.wire.otlp import any_value

RUN_KEYS = ("project", "experiment_name")

# outcomes counted per framework: mapped to a lane, no rule in its table, no run named
MAPPED, UNMATCHED, NO_RUN = "mapped", "unmatched", "no_run"


@dataclass
class Found:
    """What one export held beyond the state lanes' own spans."""

    # (project, experiment, framework, step, sent at ns, {key: seconds})
    timings: list[tuple] = field(default_factory=list)
    # the state rows its spans make
    rows: list[StateRow] = field(default_factory=list)
    # (project, experiment, bucket, start, end)
    buckets: list[tuple] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (framework, outcome) -> spans
    annotated: bool = False  # spans were given attributes: re-encode the export
    # each resource's attributes decoded once, with the framework it names
    resources: dict[int, tuple[dict, Framework | None]] = field(default_factory=dict)


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def imported(spans: list[SpanAt]) -> bool:
    """Whether an export comes from ``rl-insight import`` (a file, a step at a time)."""
    return any(s.scope.startswith(IMPORT_SCOPE) for s in spans)


def read(spans: list[SpanAt]) -> Found:
    """Every span without a ``state_lane_id``: step timings and framework spans."""
    found = Found()
    for s in spans:
        take(s, found)
    return found


def take(s: SpanAt, found: Found) -> None:
    """One span of an export, into ``found`` if it is a step timing or a framework's own
    span (annotated in place with its lane, state and run where its table maps it)."""
    if LANE_ATTR in s.attrs:
        return
    if s.span.name == STEP_TIMING:
        _timing(s, found)
        return
    known = found.resources.get(id(s.resource))
    if known is None:
        known = found.resources[id(s.resource)] = (
            s.resource, frameworks.get(s.resource.get(RESOURCE_FRAMEWORK_ATTR)))
    fw = known[1] or frameworks.by_scope(s.scope)
    if fw is not None:
        _framework_span(fw, known[0], s, found)


def _timing(s: SpanAt, found: Found) -> None:
    attrs, span = s.attrs, s.span
    step = _int(attrs.get(STEP_ATTR))
    fw = attrs.get(FRAMEWORK_ATTR)
    if step is None or not fw:
        return
    values = {}
    for k, v in attrs.items():
        if k.startswith(TIMING_PREFIX) and isinstance(v, (int, float)) and v == v:
            values[k[len(TIMING_PREFIX):]] = float(v)
    if values:
        found.timings.append((str(attrs.get("project", "")),
                              str(attrs.get("experiment_name", "")), str(fw), step,
                              span.end_time_unix_nano, values))


def _framework_span(fw: Framework, resource: Mapping, s: SpanAt, found: Found) -> None:
    attrs, span = s.attrs, s.span
    service = resource.get(SERVICE_NAME_ATTR)
    project = attrs.get("project", resource.get("project"))
    experiment = attrs.get("experiment_name", resource.get("experiment_name"))
    if not project or not experiment:
        found.counts[(fw.name, NO_RUN)] += 1
        return
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if fw.bucket_attr and attrs.get(fw.bucket_attr):  # a leaf's goodput, mapped or not
        found.buckets.append((str(project), str(experiment), str(attrs[fw.bucket_attr]),
                              start, end))
    rule = fw.rule(span.name, str(service) if service is not None else None)
    if rule is None:
        found.counts[(fw.name, UNMATCHED)] += 1
        return
    step = _int(attrs.get(rule.step_attr)) if rule.step_attr else None
    if step is not None:
        step += rule.step_offset
    if rule.lane == STEP:
        if step is None:
            found.counts[(fw.name, UNMATCHED)] += 1
            return
        lane, state = TRAINER_LANE, STEP_STATE
    elif rule.lane == RANK:
        rank = fw.rank({**resource, **attrs})
        if rank is None:
            found.counts[(fw.name, UNMATCHED)] += 1
            return
        lane, state = f"rank_{rank}", rule.state
    else:
        lane, state = DRIVER, rule.state
    process = str(resource.get("service.instance.id") or service or fw.name)
    found.rows.append(StateRow(str(project), str(experiment), lane, state, start, end,
                               process, step))
    found.counts[(fw.name, MAPPED)] += 1
    # Tempo holds it as this package's own state span: on its lane, in its run
    extra = {LANE_ATTR: lane, STATE_ATTR: state, SEGMENT_ATTR: STATE_INTERVAL,
             FRAMEWORK_ATTR: fw.name, "project": str(project),
             "experiment_name": str(experiment)}
    if step is not None:
        extra[STEP_ATTR] = step
    for k, v in extra.items():
        if k not in attrs or k in (LANE_ATTR, STATE_ATTR):
            span.attributes.append(KeyValue(key=k, value=any_value(v)))
            s.attrs[k] = v  # what reads the span after (its lane's figures) sees it
    found.annotated = True
