"""Every imported rank's events on one Perfetto-openable timeline (``rl-insight import
--timeline FILE``): a process per rank (``rank 3 (actor, node n-0)``), a track per thread
or stream it ran on, its marked ranges, kernels and collectives as complete events in
wall time, written as each file is read (rl_insight/export/timeline.py's writer)."""

from __future__ import annotations

from rl_insight.export.timeline import StreamWriter
from rl_insight.profiler.model import RANGE, RankTrace
from rl_insight.profiler.stages import phase_of


class RankTimeline:
    """The merged timeline being written; ``close()`` ends the file."""

    def __init__(self, path: str, title: str = "") -> None:
        self.writer = StreamWriter(path, title)
        self.tracks: dict[int, dict[str, int]] = {}  # rank -> lane -> tid

    def add(self, trace: RankTrace) -> None:
        pid = trace.rank
        tracks = self.tracks.get(pid)
        if tracks is None:
            bits = [b for b in (trace.role, trace.node and f"node {trace.node}",
                                trace.device and f"GPU {trace.device}") if b]
            self.writer.process(pid, f"rank {pid}" + (f" ({', '.join(bits)})" if bits else ""))
            tracks = self.tracks[pid] = {}
        step = {"step": trace.step} if trace.step is not None else None
        for e in trace.events:
            tid = tracks.get(e.lane)
            if tid is None:
                tid = tracks[e.lane] = len(tracks) + 1
                self.writer.thread(pid, tid, e.lane or "events")
            args = step
            if e.kind == RANGE and phase_of(e.name):
                args = {**(step or {}), "phase": phase_of(e.name)}
            self.writer.complete(e.name, e.kind, pid, tid, e.start_ns, e.end_ns, args)

    @property
    def ranks(self) -> int:
        return len(self.tracks)

    def close(self) -> None:
        self.writer.close()
