"""What a change would buy: each step made again on paper with one change, from its path
(:mod:`rl_insight.anatomy.bound`: what its wall time waited on).

The model is the step's critical path as the lanes tell it, not a rule of thumb: a side
made faster saves at most the time the other side waited for it (the rollout alone is
the trainer waiting for samples; training alone is the rollout waiting for the trainer),
and a side made slower costs what the other side did not already wait (in a run whose
sides overlap; in one that takes turns, all of it). Per change:

- the slowest replica as fast as the median: the rollout ends when the next slowest
  replica did;
- N more (or fewer) rollout replicas: the batch spread over more; where the engines'
  request spans tell it, the busiest replica's requests' work (their time in the engine
  over the most that ran at once) scales by N/(N+n), never below the longest request
  (which no split shortens), and the rest of its generation stays; without them the
  whole generation scales;
- the trainer k times as fast (k times its GPUs, if it scaled linearly): its phases
  take 1/k as long;
- the weight sync free: the time both sides waited for it goes;
- the longest 1 % of responses cut at the length of the longest of the rest (needs the
  engines' request spans): each replica's generating time scaled by its requests' bound.

Each step is predicted on its own and the window's prediction is the median of them, as
its measured step time is. Every kind was checked against the simulated run made again
with the change (docs/anatomy.md, "Which side bounds the run").
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

from rl_insight.anatomy import bound as b

OVERLAPS = 0.05  # a run whose sides ran at once this share of its wall time overlaps

AS_IS, STRAGGLER, REPLICAS, TRAINER, SYNC, TAIL = (
    "as_is", "straggler", "replicas", "trainer", "weight_sync", "tail")


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def overlaps(rows: Sequence[Mapping]) -> bool:
    """Whether the run's rollout and training ran at once (a slower side can hide in the
    other's time only where they do)."""
    wall = sum(r["duration_s"] for r in rows)
    return bool(wall) and sum(r["bound"]["path"][b.OVERLAP] for r in rows) / wall > OVERLAPS


def _rollout_alone(p: Mapping[str, float]) -> float:
    return p[b.ROLLOUT] + p[b.TAIL]


def _faster_rollout(p: Mapping[str, float], gain: float) -> float:
    """What a rollout that ends ``gain`` seconds sooner saves the step."""
    return min(max(gain, 0.0), _rollout_alone(p))


def _replicas(row: Mapping, add: int, overlap: bool) -> float | None:
    """The step's saving with ``add`` more rollout replicas (negative: fewer)."""
    i, p = row["bound"]["inputs"], row["bound"]["path"]
    n = i["replicas"]
    if n <= 0 or n + add <= 0:
        return None
    g = i["gen_s"]
    longest, work = i.get("longest_s"), i.get("work_s")
    if longest is not None and work:
        # the busiest replica's requests' work spreads over more (never below the
        # longest request); what its generation holds beside them (dispatch, the
        # engine's scheduling between requests) does not shrink with its share
        delta = max(longest, work) - max(longest, work * n / (n + add))
    else:
        delta = g * (1.0 - n / (n + add))
    if delta >= 0:
        return _faster_rollout(p, delta)
    cost = -delta - (p[b.TRAINING] if overlap else 0.0)  # a slower rollout hides in
    return -max(0.0, cost)  # the time it waited for the trainer, where the sides overlap


def _trainer(row: Mapping, k: float) -> float:
    p = row["bound"]["path"]
    faster = (p[b.TRAINING] + p[b.OVERLAP]) * (1.0 - 1.0 / k)
    return min(faster, p[b.TRAINING])


def predict(rows: Sequence[Mapping], add_replicas: int = 1, trainer_speedup: float = 2.0
            ) -> list[dict]:
    """``{change, kind, step_s, samples_per_s, tokens_per_s, saving_s, speedup}`` for the
    run as it is and each change, over the rows that carry an accounting; a change the
    data cannot price says ``known: false`` and why."""
    rows = [r for r in rows if r.get("bound")]
    if not rows:
        return []
    overlap = overlaps(rows)
    n = max((r["bound"]["inputs"]["replicas"] for r in rows), default=0)
    samples = _median([r["bound"]["inputs"]["samples"] for r in rows
                       if r["bound"]["inputs"].get("samples") is not None])
    tokens = _median([r["bound"]["inputs"]["tokens"] for r in rows
                      if r["bound"]["inputs"].get("tokens") is not None])
    as_is = _median([r["duration_s"] for r in rows])
    lanes = all(r["bound"].get("source") == "lanes" for r in rows)
    out = []

    def add(change: str, kind: str, saving: Callable[[Mapping], float | None],
            why_unknown: str = "", **extra) -> None:
        each = [saving(r) for r in rows]
        got = [s for s in each if s is not None]
        entry = {"change": change, "kind": kind, **extra}
        if not got:
            out.append({**entry, "known": False, "why": why_unknown, "step_s": None,
                        "samples_per_s": None, "tokens_per_s": None, "saving_s": None,
                        "speedup": None})
            return
        step = _median([r["duration_s"] - s for r, s in zip(rows, each, strict=True)
                        if s is not None])
        out.append({**entry, "known": True, "step_s": step,
                    "samples_per_s": samples / step if samples and step else None,
                    "tokens_per_s": tokens / step if tokens and step else None,
                    "saving_s": _median(got), "speedup": as_is / step if step else None})

    add("as it is", AS_IS, lambda r: 0.0)
    if n >= 2:
        add("the slowest replica as fast as the median", STRAGGLER,
            lambda r: _faster_rollout(r["bound"]["path"],
                                      r["bound"]["inputs"]["straggler_gain_s"]))
    no_lanes = "from timing keys: the rollout's replicas are not known"
    for more in sorted({add_replicas, n} - {0}):
        if n + more <= 0:
            continue
        word = f"{more} more" if more > 0 else f"{-more} fewer"
        add(f"{word} rollout replica{'s' if abs(more) != 1 else ''} ({n + more} in all)",
            REPLICAS, lambda r, m=more: _replicas(r, m, overlap), no_lanes, replicas=more)
    if n >= 2 and add_replicas > 0:
        add(f"1 fewer rollout replica ({n - 1} in all)", REPLICAS,
            lambda r: _replicas(r, -1, overlap), no_lanes, replicas=-1)
    add(f"the trainer {trainer_speedup:g}x as fast ({trainer_speedup:g}x its GPUs, if it "
        "scaled linearly)", TRAINER, lambda r: _trainer(r, trainer_speedup),
        speedup_of_trainer=trainer_speedup)
    add("the weight sync free", SYNC, lambda r: r["bound"]["path"][b.SYNC])
    add(f"the longest {100 * b.TAIL_CUT:g}% of responses cut at the length of the longest "
        "of the rest", TAIL,
        lambda r: None if r["bound"]["inputs"].get("tail_cut_s") is None else
        _faster_rollout(r["bound"]["path"], r["bound"]["inputs"]["tail_cut_s"]),
        "needs the engines' request spans (docs/requests.md)" if lanes else no_lanes)
    return out
