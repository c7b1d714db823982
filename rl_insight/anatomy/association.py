"""What moved with a regression: candidate series ranked by how they moved with it.

Plain data in (the regression, its signal per step, candidate series per step), plain
data out (ranked dicts). Candidates come from everything the server holds for the run:
trainer scalars, the steps' request statistics, engine metrics per replica, hardware per
node, the weight sync (rl_insight/server/analyses/changes.py gathers them).

Each candidate is compared before the onset (the ``before_steps`` steps up to it) and
after (from the onset on): its medians, its shift in units of its own robust spread, and
its rank correlation with the regressed signal over both. A candidate *moved* when its
shift is at least ``min_shift`` spreads and ``min_relative`` of its value. Ranking:

- causes before symptoms: a series that is a consequence of slowness (queue, prefill and
  decode times, waiting and running requests, the tail's share) restates the regression;
  it is listed after the series that can cause one (the work: response lengths and
  tokens; the capacity: KV cache, preemptions; the hardware; the weight sync; the
  trainer's own scalars);
- then by |rank correlation| with the signal (what moved *with* it, step by step, not
  only at the same time), then by the size of the shift;
- at equal correlation (within 0.02), the trainer's own scalar before the engines' view of
  the same quantity (``response_length/mean`` before completion tokens per request).

How much of the regression a candidate accounts for: for a part of the anatomy, its
shift over the regression's (exact, the parts add up to the step); for any other series,
the least-squares slope of the signal on it over the window times its shift, over the
regression's size (0 to 1), as far as a linear relation holds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

CAUSE, SYMPTOM = "cause", "symptom"
KIND_ORDER = {"scalar": 0, "weight_sync": 0, "engine": 1, "hardware": 1, "requests": 2}
BEFORE_STEPS = 20
MIN_SHIFT = 3.0
MIN_RELATIVE = 0.02
TOP = 5
TIE = 0.02


@dataclass
class Candidate:
    """A series per step: ``name`` as the user knows it (a trainer key, an engine or
    hardware metric), ``kind`` (scalar, requests, engine, hardware, weight_sync), its
    labels (replica, node, role), and whether it can cause a slowdown or only show one."""

    name: str
    kind: str
    values: dict[int, float]
    labels: dict[str, str] = field(default_factory=dict)
    role: str = CAUSE


def _spread(values: list[float]) -> float:
    m = statistics.median(values)
    mad = 1.4826 * statistics.median([abs(v - m) for v in values])
    diffs = [abs(values[i] - values[i - 1]) for i in range(1, len(values))]
    step = statistics.median(diffs) / 0.954 if diffs else 0.0
    return max(mad, step, 0.005 * abs(m), 1e-9)


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else 0.0


def _slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0


MIN_STEPS = 3  # a candidate is compared over at least this many steps on each side


def rank(regression: Mapping, target: Mapping[int, float], candidates: Iterable[Candidate],
         before_steps: int = BEFORE_STEPS, top: int = TOP) -> list[dict]:
    """The candidates that moved with ``regression`` (a Regression.as_dict()), ranked;
    ``target`` is its signal per step. The first ``top``."""
    onset, last = regression["onset_step"], regression["last_step"]
    steps = sorted(s for s in target if onset - before_steps <= s <= last)
    t_before = [target[s] for s in steps if s < onset]
    t_after = [target[s] for s in steps if s >= onset]
    # the signal's own change over the same steps as each candidate's (signed)
    size = statistics.median(t_after) - statistics.median(t_before) \
        if t_before and t_after else 0.0
    out = []
    for c in candidates:
        before = [c.values[s] for s in steps if s < onset and s in c.values]
        after = [c.values[s] for s in steps if s >= onset and s in c.values]
        if len(before) < MIN_STEPS or len(after) < MIN_STEPS:
            continue
        b, a = statistics.median(before), statistics.median(after)
        shift = (a - b) / _spread(before)
        if abs(shift) < MIN_SHIFT or abs(a - b) < MIN_RELATIVE * max(abs(b), abs(a)):
            continue
        both = [s for s in steps if s in c.values]
        xs, ys = [c.values[s] for s in both], [target[s] for s in both]
        rho = _pearson(_ranks(xs), _ranks(ys))
        accounts = None
        if size:
            accounts = max(0.0, min(1.0, _slope(xs, ys) * (a - b) / size))
        out.append({"name": c.name, "kind": c.kind, "labels": dict(c.labels),
                    "role": c.role, "before": b, "after": a,
                    "direction": "up" if a > b else "down",
                    "change_pct": 100.0 * (a - b) / abs(b) if b else None,
                    "shift_sigmas": round(shift, 2), "correlation": round(rho, 3),
                    "accounts_for": None if accounts is None else round(accounts, 3)})
    out.sort(key=lambda c: (c["role"] != CAUSE, -abs(c["correlation"]),
                            -abs(c["shift_sigmas"])))
    return _trainer_first(out)[:top]


def _trainer_first(ranked: list[dict]) -> list[dict]:
    """At equal correlation, the trainer's own scalar before another view."""
    out = list(ranked)
    for i in range(1, len(out)):
        j = i
        while j > 0 and out[j]["role"] == out[j - 1]["role"] and \
                KIND_ORDER.get(out[j]["kind"], 3) < KIND_ORDER.get(out[j - 1]["kind"], 3) \
                and abs(out[j]["correlation"]) >= abs(out[j - 1]["correlation"]) - TIE:
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


def scope(ranked: list[dict], replicas: Mapping[str, Mapping[int, float]], onset: int,
          before_steps: int = BEFORE_STEPS,
          culprits: Mapping[int, dict | None] | None = None) -> dict | None:
    """The one replica, node or rank a regression is in: its first cause's node or
    replica; else the trainer rank the steps since the onset waited for (and before it
    did not); else the one replica (of several) whose generating time moved while the
    others' did not."""
    if ranked and ranked[0]["role"] == CAUSE:
        labels = ranked[0]["labels"]
        for key in ("node", "replica"):
            if labels.get(key):
                return {key: labels[key]}
    rank = culprit_since(culprits or {}, onset, before_steps)
    if rank is not None:
        return rank
    moved, still = [], []
    for rep, values in replicas.items():
        before = [v for s, v in values.items() if onset - before_steps <= s < onset]
        after = [v for s, v in values.items() if s >= onset]
        if len(before) < 3 or len(after) < 3:
            continue
        shift = (statistics.median(after) - statistics.median(before)) / _spread(before)
        (moved if shift >= MIN_SHIFT else still).append(rep)
    if len(moved) == 1 and still:
        return {"replica": moved[0]}
    return None


CULPRIT_SHARE = 2 / 3  # of the steps since the onset, waiting for one rank
CULPRIT_BEFORE = 1 / 3  # ... which the steps before it waited for less often than this


def culprit_since(culprits: Mapping[int, dict | None], onset: int,
                  before_steps: int = BEFORE_STEPS) -> dict | None:
    """The rank most steps since ``onset`` waited for (rl_insight.anatomy.ranks), when it
    was not already the straggler before: its number, role, node and GPU, the kind, the
    phase, and its median lead and the median other rank's wait since the onset."""
    after = [c for s, c in culprits.items() if s >= onset]
    named = [c for c in after if c]
    if not named:
        return None
    counts: dict[str, int] = {}
    for c in named:
        counts[c["rank"]] = counts.get(c["rank"], 0) + 1
    rank, n = max(counts.items(), key=lambda kv: (kv[1], -int(kv[0]) if kv[0].isdigit()
                                                  else 0))
    before = [c for s, c in culprits.items() if onset - before_steps <= s < onset]
    was = sum(1 for c in before if c and c["rank"] == rank)
    if n < CULPRIT_SHARE * len(after) or (before and was >= CULPRIT_BEFORE * len(before)):
        return None
    mine = [c for c in named if c["rank"] == rank]
    last = mine[-1]
    kinds = [c["kind"] for c in mine]
    out = {"rank": rank, "role": last.get("role"), "phase": last.get("phase"),
           "kind": max(set(kinds), key=kinds.count), "evidence": last.get("evidence"),
           "lead_s": statistics.median(c["lead_s"] for c in mine),
           "waited_s": statistics.median(c["waited_s"] for c in mine),
           "ranks": last.get("ranks"), "steps": len(mine)}
    for key in ("node", "gpu"):
        if last.get(key):
            out[key] = last[key]
    return out


# trainer keys that restate the step's time rather than cause it (verl's timing_s/*,
# perf/time_per_step and throughput; the frameworks' timing keys)
RESTATING = ("timing_s/", "timing/", "timing_per_token_ms/", "timing_per_image_ms/",
             "time/", "timeperf/", "perf/time_per_step", "perf/throughput", "perf/mfu",
             "perf/step_time", "perf/rollout_time", "training/global_step", "step")
# per role, the steps' request statistics (rl_insight/anatomy/requests.py) and whether
# they can cause a slowdown (the work, the preemptions) or only show one
# the work itself (how many samples a step, and their tokens) is a cause: a bigger batch
# (more samples per prompt) makes every step longer
REQUEST_FIELDS = {"requests": CAUSE, "completion_tokens": CAUSE,
                  "completion_tokens_per_request": CAUSE, "preemptions": CAUSE,
                  "queue_s_mean": SYMPTOM, "prefill_s_mean": SYMPTOM,
                  "decode_s_mean": SYMPTOM, "e2e_p90_s": SYMPTOM}
ENGINE_SYMPTOMS = ("num_requests_running", "num_requests_waiting", "running", "waiting",
                   "queue")


# a run's clocks and cumulative series: they rise with any change that comes later
CLOCKS = ("training/epoch", "epoch", "training/global_step", "global_step", "step")
CUMULATIVE = ("_sum", "_count", "_bucket", "_total", "_created")


def is_candidate(key: str) -> bool:
    """Not a clock of the run (epoch, global step) nor a cumulative series (a counter, a
    histogram's sum and count): those move with every later change."""
    return key not in CLOCKS and not key.endswith(CUMULATIVE)


def scalar_role(key: str) -> str:
    if key.startswith(RESTATING) or any(s in key for s in ENGINE_SYMPTOMS):
        return SYMPTOM
    return CAUSE


def engine_role(name: str) -> str:
    return SYMPTOM if any(s in name for s in ENGINE_SYMPTOMS) else CAUSE


def from_rows(rows: Iterable[Mapping]) -> tuple[list[Candidate], dict[str, dict[int, float]]]:
    """The candidates the rows themselves hold (the weight sync, each role's request
    statistics, the tail's share), and each replica's generating time per step (for
    :func:`scope`)."""
    series: dict[tuple[str, str], dict[int, float]] = {}
    replicas: dict[str, dict[int, float]] = {}
    for row in rows:
        step = row["step"]
        if row.get("weight_update_s"):
            series.setdefault(("weight_sync", ""), {})[step] = row["weight_update_s"]
        if row.get("tail_share") is not None:
            series.setdefault(("tail_share", ""), {})[step] = row["tail_share"]
        for role, q in row.get("requests", {}).items():
            if q.get("requests"):
                series.setdefault(("completion_tokens_per_request", role), {})[step] = \
                    q["completion_tokens"] / q["requests"]
            for name in REQUEST_FIELDS:
                if name in q and q[name] is not None and name != \
                        "completion_tokens_per_request":
                    series.setdefault((name, role), {})[step] = float(q[name])
        for rep, v in row.get("replicas", {}).items():
            replicas.setdefault(rep, {})[step] = v["generate_s"]
    out = []
    for (name, role), values in series.items():
        kind = "weight_sync" if name == "weight_sync" else "requests"
        out.append(Candidate(name, kind, values, {"role": role} if role else {},
                             REQUEST_FIELDS.get(name, CAUSE if kind == "weight_sync"
                                                else SYMPTOM)))
    return out, replicas


def annotate(changes: Iterable, rows: list[Mapping], extra: Iterable[Candidate] = ()
             ) -> None:
    """Fill each change's ``candidates`` and ``scope`` (rl_insight.anatomy.changes.Change)
    from the rows and the other candidates (trainer scalars, engine metrics, hardware)."""
    from rl_insight.anatomy.changes import signals

    own, replicas = from_rows(rows)
    candidates = own + list(extra)
    culprits = {row["step"]: row.get("culprit") for row in rows if "culprit" in row}
    for change in changes:
        head = change.headline
        target = {}
        for row in rows:
            got = signals(row).get(head.signal)
            if got is not None:
                target[row["step"]] = got[0]
        change.candidates = rank(head.as_dict(), target, candidates)
        change.scope = scope(change.candidates, replicas, change.onset_step,
                             culprits=culprits)
