"""What a rank's GPU did in each range it marked, from its kernels: busy, communicating,
communication hidden under computation, idle; and which rank's kernels ran longest.
Pure functions over :class:`~rl_insight.profiler.model.RankTrace` (HTA's temporal and
overlap breakdowns, per range rather than per trace).

Per rank and range, clipped to the range (a kernel launched in a range that runs past its
end counts up to the end):

- busy: the union of every KERNEL and COLLECTIVE (any stream);
- comm: the union of the COLLECTIVEs;
- overlap: comm ∩ compute (compute: the union of the KERNELs), communication that ran
  while the GPU also computed; comm − overlap is communication nothing hid;
- idle: the range − busy.

busy = compute ∪ comm, so busy = compute + comm − overlap and busy + idle = the range.
The figures travel as attributes of the rank's phase spans (:func:`span_attributes`, the
keys in :mod:`rl_insight.wire.rank_evidence`); the step anatomy reads them back
(:mod:`rl_insight.anatomy.gpu`).
"""

from __future__ import annotations

import bisect
import statistics
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rl_insight.profiler.model import COLLECTIVE, KERNEL, Event, RankTrace
from rl_insight.wire import rank_evidence as evidence

NS = 1e9
# Communication kernels and ops by their names: NCCL's device kernels are named
# ncclKernel_<Op>_... (NCCL <= 2.18) and ncclDevKernel_<Op>_... (2.19 on), as Nsight and
# torch's profiler show them; Ascend's HCCL ops hcom_<op>_... (the CANN profiling
# guide's HCCL layer, e.g. hcom_allReduce__...); gloo's as torch records them.
# torch's calls of a collective, not its work: they return before the ranks meet (its
# c10d:: operators and record_param_comms enqueue the work on the backend's own thread)
C10D_CALL, PARAM_COMMS = "c10d::", "record_param_comms"
CALLS = (C10D_CALL, PARAM_COMMS)
COLLECTIVE_PREFIXES = ("nccl", "hcom_", "hccl", "gloo:", C10D_CALL)


def is_collective(name: str) -> bool:
    """Whether a device kernel or op is communication, by the name its library gives it."""
    return name.lower().startswith(COLLECTIVE_PREFIXES)


@dataclass(frozen=True)
class GpuFigures:
    """One rank's GPU in one window, in seconds."""

    window_s: float
    busy_s: float
    comm_s: float
    overlap_s: float

    @property
    def idle_s(self) -> float:
        return max(0.0, self.window_s - self.busy_s)

    @property
    def compute_s(self) -> float:
        return self.busy_s - self.comm_s + self.overlap_s


class DeviceWork:
    """A rank's device work as two sorted, disjoint interval lists (compute, comm) in
    arrays of 8-byte ints (a million kernels: 16 MB, not the hundreds of a list of
    tuples), so a window's figures take a bisection and one sweep, building no list."""

    def __init__(self, events: Iterable[Event]) -> None:
        events = list(events)
        self.compute = _merged(e for e in events if e.kind == KERNEL)
        self.comm = _merged(e for e in events if e.kind == COLLECTIVE)

    def figures(self, start_ns: int, end_ns: int) -> GpuFigures:
        compute = _length(self.compute, start_ns, end_ns)
        comm = _length(self.comm, start_ns, end_ns)
        overlap = _overlap(self.compute, self.comm, start_ns, end_ns)
        return GpuFigures((end_ns - start_ns) / NS, (compute + comm - overlap) / NS,
                          comm / NS, overlap / NS)


Merged = tuple[array, array]  # (starts, ends), sorted and disjoint


def _merged(events: Iterable[Event]) -> Merged:
    starts, ends = array("q"), array("q")
    for e in sorted(events, key=lambda e: e.start_ns):
        if e.end_ns <= e.start_ns:
            continue
        if ends and e.start_ns <= ends[-1]:
            if e.end_ns > ends[-1]:
                ends[-1] = e.end_ns
        else:
            starts.append(e.start_ns)
            ends.append(e.end_ns)
    return starts, ends


def _length(ivs: Merged, lo: int, hi: int) -> int:
    starts, ends = ivs
    total, i = 0, bisect.bisect_right(ends, lo)
    while i < len(starts) and starts[i] < hi:
        total += min(ends[i], hi) - max(starts[i], lo)
        i += 1
    return total


def _overlap(a: Merged, b: Merged, lo: int, hi: int) -> int:
    """The time both cover inside [lo, hi): one sweep over the two."""
    (sa, ea), (sb, eb) = a, b
    i, j, total = bisect.bisect_right(ea, lo), bisect.bisect_right(eb, lo), 0
    while i < len(sa) and j < len(sb) and sa[i] < hi and sb[j] < hi:
        s, e = max(sa[i], sb[j], lo), min(ea[i], eb[j], hi)
        if s < e:
            total += e - s
        if ea[i] < eb[j]:
            i += 1
        else:
            j += 1
    return total


def figures(events: Iterable[Event], start_ns: int, end_ns: int) -> GpuFigures:
    """A rank's GPU in the window [start_ns, end_ns) from its device events."""
    return DeviceWork(events).figures(start_ns, end_ns)


def per_range(trace: RankTrace) -> list[tuple[Event, GpuFigures]]:
    """Each range the rank marked, with its GPU's figures inside it."""
    work = DeviceWork(trace.device_work())
    return [(r, work.figures(r.start_ns, r.end_ns)) for r in trace.ranges()]


def span_attributes(f: GpuFigures) -> dict[str, float]:
    """A range's figures as its phase span's attributes (idle: the span's length less
    busy, so it is not sent)."""
    return {evidence.GPU_BUSY: round(f.busy_s, 6), evidence.GPU_COMM: round(f.comm_s, 6),
            evidence.GPU_OVERLAP: round(f.overlap_s, 6)}


@dataclass(frozen=True)
class Longest:
    """The rank whose kernels ran longest, and by how much more than the median rank's."""

    rank: int
    busy_s: float
    median_busy_s: float

    @property
    def lead_s(self) -> float:
        return self.busy_s - self.median_busy_s


def longest(busy: Mapping[int, float]) -> Longest | None:
    """Of ranks' busy seconds (one window, one range), the longest; ties to the lowest
    rank. None without ranks."""
    if not busy:
        return None
    rank = max(busy, key=lambda r: (busy[r], -r))
    return Longest(rank, busy[rank], statistics.median(busy.values()))
