"""A step's ranks' GPUs from their kernels, as the profiler files told them: per rank its
busy, communication, overlap and idle seconds over the step's phases, the median rank's,
and the rank whose kernels ran longest. Plain data in and out.

Each phase span an imported profile marks carries what its GPU did in it
(:mod:`rl_insight.profiler.kernels`: ``rank.gpu_busy_s``, ``rank.gpu_comm_s``,
``rank.gpu_overlap_s``); idle is the phase's time less busy. A phase nested in another on
the same rank (verl's ``train_batch`` inside ``actor_update``) is counted once, in the
outer one, as the ranks' compute and wait are. Ranks without kernel figures (monitored
live, no profile) are not in these figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from rl_insight.anatomy import ranks as rank_figures
from rl_insight.wire import rank_evidence

KEEP = 8  # ranks a row keeps: those whose kernels ran longest, with the median
FIELDS = ("busy_s", "comm_s", "overlap_s", "idle_s")


@dataclass
class GpuStep:
    """The step's ranks' GPU figures: the ranks worth naming (kernels longest first, at
    most KEEP), the median rank's, the longest rank (``rank``, ``busy_s``, ``lead_s``
    over the median), and how many ranks had figures."""

    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    median: dict[str, float] = field(default_factory=dict)
    longest: dict | None = None
    count: int = 0


def step_gpu(phases: Mapping[str, Mapping[str, rank_figures.RankPhase]]) -> GpuStep:
    """A step's GPU figures from ``phases`` (phase -> rank -> its interval and evidence,
    :func:`rl_insight.anatomy.ranks.from_lanes`)."""
    per: dict[str, dict[str, float]] = {}
    for phase, ranks in phases.items():
        for r, p in ranks.items():
            busy = p.evidence.get(rank_evidence.GPU_BUSY)
            if busy is None or rank_figures.nested(phases, phase, r, p):
                continue
            got = per.setdefault(r, dict.fromkeys(FIELDS, 0.0))
            busy = min(float(busy), p.duration)
            got["busy_s"] += busy
            got["comm_s"] += float(p.evidence.get(rank_evidence.GPU_COMM) or 0.0)
            got["overlap_s"] += float(p.evidence.get(rank_evidence.GPU_OVERLAP) or 0.0)
            got["idle_s"] += p.duration - busy
    out = GpuStep(count=len(per))
    if not per:
        return out
    order = sorted(per, key=lambda r: (-per[r]["busy_s"], _order(r)))
    out.ranks = {r: per[r] for r in sorted(order[:KEEP], key=_order)}
    out.median = {k: statistics.median(v[k] for v in per.values()) for k in FIELDS}
    top = order[0]
    out.longest = {"rank": top, "busy_s": per[top]["busy_s"],
                   "lead_s": per[top]["busy_s"] - out.median["busy_s"], "ranks": len(per)}
    return out


def _order(rank: str) -> int:
    return int(rank) if rank.isdigit() else 1 << 30


def gpu_line(longest: Mapping, median: Mapping) -> str:
    """The step's GPUs in a line for the report: the longest rank and the median's
    split."""
    busy, comm = median.get("busy_s", 0.0), median.get("comm_s", 0.0)
    hidden = median.get("overlap_s", 0.0)
    share = f", {100 * hidden / comm:.0f}% of it under computation" if comm > 0 else ""
    return (f"GPUs (from the profiler's kernels, {longest.get('ranks', 0)} ranks): rank "
            f"{longest['rank']}'s kernels ran longest, {longest['busy_s']:.2f} s "
            f"({longest['lead_s']:+.2f} s on the median rank); the median rank busy "
            f"{busy:.2f} s, idle {median.get('idle_s', 0.0):.2f} s, communicating "
            f"{comm:.2f} s{share}")
