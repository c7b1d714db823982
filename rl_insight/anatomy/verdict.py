"""Which side bounds a run: its steps' GPU accounting (:mod:`rl_insight.anatomy.bound`)
summed over a window of steps, and the verdict with the numbers that make it.

Plain data in (step rows as ``/api/v1/anatomy`` gives them), plain data out. The verdict
reads the path, the step's wall time by what ran: the rollout alone is time the trainer
waited for samples, training alone time the rollout waited for the trainer, the weight
sync alone time both waited for it. The side the run waited on most bounds it, unless
little was waited on at all (the sides overlap) or the two sides take turns in like
measure (``balanced``); a rollout side that is mostly its tail (the fleet waiting on its
slowest replicas or longest requests) is ``tail-bound``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from rl_insight.anatomy import bound as b

ROLLOUT_BOUND, TRAINING_BOUND, SYNC_BOUND, TAIL_BOUND, BALANCED = (
    "rollout-bound", "training-bound", "weight-sync-bound", "tail-bound", "balanced")
VERDICTS = (ROLLOUT_BOUND, TRAINING_BOUND, SYNC_BOUND, TAIL_BOUND, BALANCED)
MIN_WAIT_SHARE = 0.15  # a side waited on for less of the wall time than this bounds nothing
BALANCE = 0.8  # the other side waited on at least this much of the first: balanced
TAIL_SHARE = 0.4  # a rollout side this much tail or more is tail-bound (a 2x straggler of
# two replicas: half; replicas within 10 % of each other: a twentieth)
UNCLEAR = "unclear"


def bounded_rows(rows: Sequence[Mapping]) -> list[Mapping]:
    """The rows that carry an accounting (a row made before it existed has none)."""
    return [r for r in rows if r.get("bound")]


def account(rows: Sequence[Mapping], replicas: Mapping[str, Mapping] | None = None) -> dict:
    """The window's path and GPU-seconds by role and cause, summed over its steps; each
    role's causes against its GPUs times the wall time (``expected_gpu_seconds``);
    ``replicas``: the window's per-replica figures where the caller summed them already
    (:func:`rl_insight.anatomy.bound.sum_replicas`; the rows then carry none)."""
    rows = bounded_rows(rows)
    path = dict.fromkeys(b.PATH, 0.0)
    roles: dict[str, dict] = {}
    summed: dict[str, dict[str, float]] = {}
    said: dict[str, int] = {}  # a note true of every step in the window is the window's
    sources = set()
    colocated = False
    for r in rows:
        bd = r["bound"]
        sources.add(bd.get("source", "lanes"))
        colocated |= bool(bd.get("colocated"))
        for k, v in bd["path"].items():
            path[k] = path.get(k, 0.0) + v
        for role, rb in bd["roles"].items():
            acc = roles.setdefault(role, {"lanes": 0, "gpus": 0.0, "gpus_known": True,
                                          "gpu_seconds": dict.fromkeys(b.CAUSES, 0.0),
                                          "expected_gpu_seconds": 0.0})
            # a row read back from Prometheus tells no lanes or GPUs: unknown, said so
            acc["lanes"] = max(acc["lanes"], rb.get("lanes", 0))
            acc["gpus"] = max(acc["gpus"], rb.get("gpus", 0))
            acc["gpus_known"] &= bool(rb.get("gpus_known"))
            acc["expected_gpu_seconds"] += rb.get("gpus", 0) * r["duration_s"]
            for cause, v in rb["gpu_seconds"].items():
                acc["gpu_seconds"][cause] += v
        for key, causes in bd.get("replicas", {}).items():
            mine = summed.setdefault(key, dict.fromkeys(b.CAUSES, 0.0))
            for cause, v in causes.items():
                mine[cause] += v
        for m in bd.get("missing", ()):
            said[m] = said.get(m, 0) + 1
    wall = sum(r["duration_s"] for r in rows)
    for acc in roles.values():
        total = sum(acc["gpu_seconds"].values())
        acc["total_gpu_seconds"] = total
        acc["busy_share"] = acc["gpu_seconds"][b.BUSY] / total if total else None
        acc["gpu_seconds"] = {c: v for c, v in acc["gpu_seconds"].items() if v > 0}
    sync = sum(acc["gpu_seconds"].get(b.SYNC, 0.0) for acc in roles.values())
    return {"steps": len(rows),
            "first_step": rows[0]["step"] if rows else None,
            "last_step": rows[-1]["step"] if rows else None,
            "wall_s": wall,
            "step_s": statistics.median(r["duration_s"] for r in rows) if rows else None,
            "path": path, "path_share": {k: v / wall for k, v in path.items()} if wall else {},
            "roles": roles,
            "replicas": dict(replicas) if replicas is not None else
            {k: {c: v for c, v in cs.items() if v > 0}
             for k, cs in sorted(summed.items(), key=lambda kv: b._key_order(kv[0]))},
            "weight_sync": {"gpu_seconds": sync},
            "colocated": colocated,
            "source": sources.pop() if len(sources) == 1 else "mixed" if sources else None,
            "missing": [m for m, n in said.items() if n == len(rows)]}


def decide(acc: Mapping) -> dict:
    """The verdict of an accounting (:func:`account`), the numbers that make it and a
    sentence that says why."""
    wall = acc.get("wall_s") or 0.0
    if not wall:
        return {"verdict": UNCLEAR, "why": "no step with an accounting yet", "numbers": {}}
    p = acc["path"]
    rollout = p[b.ROLLOUT] + p[b.TAIL] + p[b.OTHER_ROLES]
    sides = {"rollout": rollout, "training": p[b.TRAINING], "sync": p[b.SYNC]}
    share = {k: v / wall for k, v in sides.items()}
    n = max(acc["steps"], 1)
    numbers = {"rollout_alone_share": share["rollout"], "training_alone_share":
               share["training"], "weight_sync_alone_share": share["sync"],
               "overlap_share": p[b.OVERLAP] / wall, "tail_share": p[b.TAIL] / wall,
               "trainer_waited_for_samples_s": rollout / n,
               "rollout_waited_for_trainer_s": p[b.TRAINING] / n,
               "weight_sync_s": p[b.SYNC] / n}
    for role, r in acc["roles"].items():
        numbers[f"{role}_busy_share"] = r.get("busy_share")
    top = max(sides, key=lambda k: sides[k])
    pct = {k: f"{100 * v:.0f}%" for k, v in share.items()}
    per_step = f"{sides[top] / n:.2f} s a step"
    if share[top] < MIN_WAIT_SHARE:
        verdict = BALANCED
        why = (f"little of the wall time waited on one side: the rollout alone {pct['rollout']}, "
               f"training alone {pct['training']}, the weight sync alone {pct['sync']}; "
               f"both sides ran at once {100 * p[b.OVERLAP] / wall:.0f}% of it")
    elif top == "sync":
        verdict = SYNC_BOUND
        why = (f"both sides waited for the weight sync {pct['sync']} of the wall time "
               f"({per_step}), more than for the rollout ({pct['rollout']}) or training "
               f"({pct['training']})")
    else:
        other = "training" if top == "rollout" else "rollout"
        if sides[other] >= BALANCE * sides[top]:
            verdict = BALANCED
            why = (f"the two sides take turns in like measure: the trainer waited for "
                   f"samples {pct['rollout']} of the wall time, the rollout for the trainer "
                   f"{pct['training']}")
        elif top == "rollout":
            tail = p[b.TAIL] / rollout if rollout else 0.0
            verdict = TAIL_BOUND if tail >= TAIL_SHARE else ROLLOUT_BOUND
            why = (f"the trainer waited for samples {pct['rollout']} of the wall time "
                   f"({per_step}); the rollout waited for the trainer {pct['training']}")
            if verdict == TAIL_BOUND:
                why += (f"; {100 * tail:.0f}% of that wait was the tail: the fleet waiting "
                        "on its slowest replicas or longest responses")
        else:
            verdict = TRAINING_BOUND
            why = (f"the rollout waited for the trainer {pct['training']} of the wall time "
                   f"({per_step}); the trainer waited for samples {pct['rollout']}")
    if acc.get("colocated"):
        why += ("; colocated (the replicas sleep while the trainer has their GPUs): the "
                "sides take turns on the same GPUs, so a split between them does not apply")
    return {"verdict": verdict, "why": why, "numbers": numbers}


def around(rows: Sequence[Mapping], onset_step: int, before: int = 20) -> dict | None:
    """The verdict of the ``before`` steps up to a change's onset and of the steps since:
    a change that moved the run to the other side says so (None where the rows carry no
    accounting on either side, as rows read back from Prometheus)."""
    rows = bounded_rows(rows)
    early = [r for r in rows if r["step"] < onset_step][-before:]
    late = [r for r in rows if r["step"] >= onset_step]
    if not early or not late:
        return None
    was, now = decide(account(early)), decide(account(late))
    return {"before": was["verdict"], "after": now["verdict"], "why": now["why"],
            "changed": was["verdict"] != now["verdict"]}
