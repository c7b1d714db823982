"""One trace model for every profiler's files (torch's Chrome traces, Nsight Systems'
NVTX JSON lines, Ascend's MSTX trace views): what a rank did in a step, as the readers
(:mod:`rl_insight.profiler.torch`, ``nvtx``, ``mstx``) give it and the analyses
(:mod:`rl_insight.profiler.kernels`) and the exporter (:mod:`rl_insight.profiler.export`)
read it. Plain data, no I/O (HTA's one trace model, per-rank analyses as small functions
over it).

Times are wall-clock nanoseconds (each reader places its file's clock in wall time: torch's
``baseTimeNanoseconds``, Nsight's session start, MSTX's ``profiler_info`` start); a file
the reader cannot place says so and is skipped, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

# what an event is, whichever profiler wrote it
RANGE = "range"  # a region the framework marked: verl's stages (record_function, NVTX, MSTX)
KERNEL = "kernel"  # device work (a CUDA or Ascend kernel, a memory copy)
COLLECTIVE = "collective"  # a communication kernel or op (NCCL, HCCL, gloo)
KINDS = (RANGE, KERNEL, COLLECTIVE)


class Event(NamedTuple):
    """One interval of a rank's trace: ``kind`` (RANGE, KERNEL, COLLECTIVE), its name as
    the profiler wrote it, wall-clock start and end (ns), and the stream or thread it ran
    on (device work on different streams may overlap)."""

    kind: str
    name: str
    start_ns: int
    end_ns: int
    lane: str = ""  # the stream, device queue or thread


@dataclass
class RankTrace:
    """What one file (or one rank's part of a file) says of one rank: who it is (global
    rank, world size, verl's worker role, the RL step where the file names one) and its
    events. ``source`` is the file, for the messages."""

    rank: int
    source: str
    step: int | None = None  # the RL step the file holds (verl names it: step<N>)
    role: str = ""  # verl's save_file_prefix / profiling role (actor, ref, train ...)
    world_size: int | None = None
    node: str = ""
    device: str = ""
    events: list[Event] = field(default_factory=list)

    def ranges(self) -> list[Event]:
        return [e for e in self.events if e.kind == RANGE]

    def device_work(self) -> list[Event]:
        return [e for e in self.events if e.kind in (KERNEL, COLLECTIVE)]


class BadFile(ValueError):
    """A file that is no trace of this profiler's, or damaged: the message says which
    and why, and what to do (the importer names it and goes on with the others)."""
