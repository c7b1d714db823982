"""Profiled ranks as the run's lanes and steps, in the server's terms: each rank's verl
stages as state spans of lane ``rank_<R>`` (:mod:`rl_insight.profiler.stages`), carrying
the evidence the culprit rank is read from (rl_insight/anatomy/ranks.py) as a live
rank's client sends it (rl_insight/client/rank_evidence.py: its collectives' arrivals
against the phase's end, its node and GPU) and, where the rank had device work, its
GPU's figures (rl_insight/profiler/kernels.py); one step mark (``train_step`` on lane
``trainer``) per step, over every rank's events of it; OTLP exports of them
(rl_insight/collector/otlp_encode.py, the lane actors' encoder).

Plain data in and out: the importer (CLI) and the server's upload route both use it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from rl_insight.collector.otlp_encode import encode
from rl_insight.profiler import kernels
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RankTrace
from rl_insight.profiler.stages import phase_of
from rl_insight.wire.attributes import (
    PROCESS_ATTR,
    SEGMENT_ATTR,
    STEP_ATTR,
    STEP_SEGMENT,
    STEP_STATE,
)
from rl_insight.wire.events import Identity, Span
from rl_insight.wire.frameworks import IMPORT_PROCESS, IMPORT_SCOPE
from rl_insight.wire.laneid import TRAINER as TRAINER_LANE
from rl_insight.wire.rank_evidence import (
    ARRIVALS,
    COLLECTIVES,
    FIRST_TO_END,
    GPU,
    MEAN_TO_END,
    NODE,
)

EXPORT_SPANS = 5000  # spans an export holds at most (well under traces.max_body_bytes)
Window = list[int]  # [first start, last end] (unix ns)


def arrivals(trace: RankTrace) -> list[tuple[int, int]]:
    """(start, end) of each of the rank's collectives, sorted: when it reached each one
    and when the ranks left it together (0 for a call, which returns before that)."""
    return sorted((e.start_ns, 0 if e.name.startswith(kernels.CALLS) else e.end_ns)
                  for e in trace.events if e.kind == COLLECTIVE)


def summary(times: list[tuple[int, int]], start: int, end: int) -> dict[str, object]:
    """A phase's collectives as rank_evidence summarises the Flight Recorder's: how many
    started in it, the mean and the first arrival's time to where the ranks met. A trace
    knows where they met at each collective (its end): each arrival is held to its own,
    so a stamp late on one rank (its thread scheduled 25 ms late on a loaded host) moves
    its lead by that once; held to one point for all, it moved it once per collective
    (four times: a quarter of a straggler's lead). Calls only: to the phase's end."""
    lo = bisect.bisect_left(times, (start,))
    hi = bisect.bisect_right(times, (end, 1 << 62))
    mine = times[lo:hi]
    if not mine:
        return {COLLECTIVES: 0}
    if all(e for _, e in mine):
        to_met = [(e - s) / 1e9 for s, e in mine]
    else:
        to_met = [(end - s) / 1e9 for s, _ in mine]
    return {COLLECTIVES: len(mine), MEAN_TO_END: sum(to_met) / len(to_met),
            FIRST_TO_END: to_met[0]}


def rank_spans(trace: RankTrace, profiler: str, process: str = "") -> list[Span]:
    """The rank's verl stages as its lane's state spans, each with its evidence (the
    arrivals named as ``profiler``'s); other ranges (an FSDP or user
    ``record_function``) stay out of the lane."""
    lane = f"rank_{trace.rank}"
    times = arrivals(trace)
    stages = [r for r in trace.ranges() if phase_of(r.name)]
    work = kernels.DeviceWork(trace.device_work()) \
        if any(e.kind == KERNEL for e in trace.events) else None
    base: list[tuple[str, object]] = [(NODE, trace.node)] if trace.node else []
    if trace.device:
        base.append((GPU, trace.device))
    if trace.step is not None:
        base.append((STEP_ATTR, trace.step))
    if process:
        base.append((PROCESS_ATTR, process))
    out = []
    if times:
        base.append((ARRIVALS, profiler))
    for r in stages:
        attrs = [*base, *summary(times, r.start_ns, r.end_ns).items()]
        if work is not None:
            attrs += kernels.span_attributes(work.figures(r.start_ns, r.end_ns)).items()
        out.append(Span(phase_of(r.name) or r.name, r.start_ns, r.end_ns, lane,
                        tuple(attrs)))
    return out


def window(trace: RankTrace) -> Window | None:
    """[first start, last end] of the rank's events (None without any)."""
    if not trace.events:
        return None
    return [min(e.start_ns for e in trace.events), max(e.end_ns for e in trace.events)]


def widen(windows: dict[int, Window], step: int, w: Window) -> None:
    have = windows.get(step)
    if have is None:
        windows[step] = list(w)
    else:
        have[0], have[1] = min(have[0], w[0]), max(have[1], w[1])


def mark(step: int, w: Window) -> Span:
    """A step mark over ``w``: the trainer lane's ``train_step``."""
    return Span(STEP_STATE, w[0], w[1], TRAINER_LANE,
                ((STEP_ATTR, step), (SEGMENT_ATTR, STEP_SEGMENT)))


def exports(spans: Iterable[Span], project: str, experiment: str, profiler: str,
            process: str = IMPORT_PROCESS, size: int = EXPORT_SPANS
            ) -> Iterator[tuple[bytes, int]]:
    """(OTLP export, spans in it), at most ``size`` spans each, under the import's
    instrumentation scope (the server makes an imported step's row as its mark comes)."""
    ident = Identity(project, experiment)
    batch: list[tuple[Identity, str, Span]] = []
    for s in spans:
        batch.append((ident, process, s))
        if len(batch) >= size:
            yield encode(batch, scope=IMPORT_SCOPE + profiler), len(batch)
            batch = []
    if batch:
        yield encode(batch, scope=IMPORT_SCOPE + profiler), len(batch)


def process_of(trace: RankTrace) -> str:
    """What a rank's spans name as their process: the file they came from."""
    return f"{IMPORT_PROCESS}: {Path(trace.source).name}"


def steps_of(traces: Iterable[RankTrace], into: dict[int, Window] | None = None
             ) -> dict[int, Window]:
    """step -> the window of every rank's events of it (traces without a step left out)."""
    out: dict[int, Window] = {} if into is None else into
    for t in traces:
        w = window(t)
        if t.step is not None and w is not None:
            widen(out, t.step, w)
    return out


def marks(windows: Mapping[int, Window]) -> list[Span]:
    return [mark(step, w) for step, w in sorted(windows.items())]
