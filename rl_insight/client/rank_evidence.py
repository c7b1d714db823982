"""What a trainer rank's process adds to its phase spans, so the server can tell which
rank a step waited for (rl_insight/anatomy/ranks.py): where it runs (node, GPU) and, when
torch's Flight Recorder is on (``TORCH_FR_BUFFER_SIZE``), when it arrived at each of the
phase's collectives, summarised against the phase's end.

It runs on the buffer's thread as a batch is exported, never in the caller's block: the
recorder's ring still holds the phase's collectives a moment later (its size is the
user's, thousands of entries). torch is read only where the process already imported
``torch.distributed`` and initialised a process group; nothing here imports torch.

torch stamps ``time_created_ns`` with the wall clock (``c10::getTime()``: measured on
torch 2.13 over gloo, the stamps fall between ``time.time_ns()`` read before and after
the call), the clock the phase spans are stamped with. A dump serves only spans that
ended before it was taken (one taken earlier holds none of their collectives), and a
ring that was overwritten since a span began summarises nothing for it (a partial
count would mislead); a span the recorder saw no collective in says so (0).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import sys
import time

from rl_insight.wire import laneid
from rl_insight.wire.events import Span
from rl_insight.wire.rank_evidence import COLLECTIVES, FIRST_TO_END, GPU, MEAN_TO_END, NODE

log = logging.getLogger(__name__)

FR_ENV = "TORCH_FR_BUFFER_SIZE"  # torch's own switch for its Flight Recorder
GPU_ENVS = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
# a dump older than this is read again (one dump serves every span of a batch that
# ended before it was taken)
DUMP_TTL_S = 0.05


def _gpu() -> str:
    """The first device this process sees, as the node numbers it ("" on a CPU)."""
    for name in GPU_ENVS:
        value = os.environ.get(name, "").split(",")[0].strip()
        if value:
            return value
    return ""


def _dump(c10d) -> dict:
    """The recorder's entries without their stack traces: torch's pickled dump (21 ms for
    2,000 entries here, against 35 ms for its JSON and a second with the stacks), its
    JSON where a torch has no such call."""
    try:
        return pickle.loads(c10d._dump_fr_trace(True, False, False))  # torch's own bytes
    except (AttributeError, TypeError):
        return json.loads(c10d._dump_fr_trace_json(True, False))


class Evidence:
    """The process's node and GPU, and its Flight Recorder's collectives, read at most
    once per batch; one per process (``enrich``'s, made again in a forked child)."""

    def __init__(self) -> None:
        self.node = socket.gethostname()
        self.gpu = _gpu()
        # the recorder's ring, read once per process (torch reads it once, when a
        # process group starts), not at every span of every batch
        self.ring = _ring_size()
        self._dump: list[int] | None = None
        self._covers_from = 0  # the oldest entry's time when the ring was full, else 0
        self._dumped_at = 0.0  # monotonic, for its age
        self._dumped_ns = 0  # wall clock, before it was read: what it can hold
        self.failed = False  # the recorder could not be read: tried no more

    def recorder_on(self) -> bool:
        if self.failed:
            return False
        return self.ring > 0 and _group_up()

    def arrivals(self, ended_ns: int | None = None) -> list[int]:
        """Every collective's enqueue time (ns, wall clock) the recorder holds, read
        again unless the last dump is fresh and was taken after ``ended_ns``."""
        now = time.monotonic()
        if self._dump is not None and now - self._dumped_at < DUMP_TTL_S and \
                (ended_ns is None or ended_ns <= self._dumped_ns):
            return self._dump
        self._dumped_ns = time.time_ns()
        try:
            entries = list(_dump(sys.modules["torch"]._C._distributed_c10d)
                           .get("entries", ()))
            self._dump = sorted(int(e["time_created_ns"]) for e in entries
                                if not e.get("is_p2p") and e.get("time_created_ns"))
            full = len(entries) >= self.ring
            self._covers_from = min((int(e.get("time_created_ns") or 0) for e in entries),
                                    default=0) if full else 0
        except Exception as e:  # an older torch, a recorder off after all
            self.failed = True
            log.warning("rl-insight: torch's Flight Recorder could not be read (%s); "
                        "ranks' phases are told from their boundaries only", e)
            self._dump, self._covers_from = [], 0
        self._dumped_at = now
        return self._dump

    def attributes(self, span: Span) -> tuple[tuple[str, object], ...]:
        out: list[tuple[str, object]] = [(NODE, self.node)]
        if self.gpu:
            out.append((GPU, self.gpu))
        if self.recorder_on():
            times = self.arrivals(span.end_ns)
            if self.failed or self._covers_from > span.start_ns:
                return tuple(out)  # nothing read, or the ring no longer holds its start
            mine = [t for t in times if span.start_ns <= t <= span.end_ns]
            if mine:
                end = span.end_ns
                out += [(COLLECTIVES, len(mine)),
                        (MEAN_TO_END, sum(end - t for t in mine) / len(mine) / 1e9),
                        (FIRST_TO_END, (end - mine[0]) / 1e9)]
            else:
                out.append((COLLECTIVES, 0))
        return tuple(out)


def _ring_size() -> int:
    """The recorder's ring (``TORCH_FR_BUFFER_SIZE``); 0 when it is off."""
    try:
        return int(os.environ.get(FR_ENV, "0") or 0)
    except ValueError:
        return 0


def _group_up() -> bool:
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


_evidence: Evidence | None = None


def enrich(items: list) -> list:
    """The batch with each rank lane's phase span carrying its evidence."""
    global _evidence
    out = None
    for i, item in enumerate(items):
        if type(item) is not Span or not item.ends_state or item.lane is None or \
                laneid.classify(item.lane).kind != laneid.RANK:
            continue
        if _evidence is None:
            _evidence = Evidence()
        if out is None:
            out = list(items)
        out[i] = item._replace(attributes=item.attributes + _evidence.attributes(item))
    return items if out is None else out


def _reset() -> None:
    global _evidence
    _evidence = None


os.register_at_fork(after_in_child=_reset)
