"""How far the step anatomy is from what happened: the server's rows against the
simulation's ground truth (`simulate_rl.py --truth FILE`: each replica's and rank's own
wall-clock record of its generation and phases, and when the trainer logged each step).

    python bench/anatomy_error.py --server-url URL --project P --experiment-name E \\
        --truth truth.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence

from rl_insight.anatomy.rows import clip, length, union

NS = 1e9


def truth_rows(truth: dict) -> dict[int, dict]:
    """Per step: its window (as the trainer's marks cut it) and, measured by the replicas
    and ranks themselves, each replica's generating time and the weight update."""
    out: dict[int, dict] = {}
    prev = None
    for step, logged_ns, step_s in truth["steps"]:
        start = prev if prev is not None else logged_ns - int(step_s * NS)
        gen = {str(i): length(clip(union((s, e) for _, s, e in rec), start, logged_ns)) / NS
               for i, rec in enumerate(truth["replicas"])}
        upd = union((s, e) for rank in truth["ranks"] for name, s, e in rank
                    if name == "update_weights")
        busy = [g for g in gen.values() if g > 0]
        out[step] = {"duration_s": (logged_ns - start) / NS, "replicas": gen,
                     "weight_update_s": length(clip(upd, start, logged_ns)) / NS,
                     "straggler_ratio": max(busy) / statistics.median(busy) if busy else None}
        prev = logged_ns
    return out


def compare(rows: Sequence[dict], truth: dict) -> dict:
    """Absolute errors (seconds, or ratio units) of each quantity over the steps both have."""
    want = truth_rows(truth)
    err: dict[str, list[float]] = {"duration_s": [], "replica_generate_s": [],
                                   "weight_update_s": [], "straggler_ratio": []}
    rel: list[float] = []
    worst: dict = {}
    for row in rows:
        t = want.get(row["step"])
        if t is None:
            continue
        err["duration_s"].append(abs(row["duration_s"] - t["duration_s"]))
        err["weight_update_s"].append(abs(row["weight_update_s"] - t["weight_update_s"]))
        for r, g in t["replicas"].items():
            got = row["replicas"].get(r, {}).get("generate_s", 0.0)
            err["replica_generate_s"].append(abs(got - g))
            if abs(got - g) >= worst.get("error_s", 0.0):
                worst = {"step": row["step"], "replica": r, "anatomy_s": got, "truth_s": g,
                         "error_s": abs(got - g)}
            if g > 0:
                rel.append(abs(got - g) / g)
        if t["straggler_ratio"] is not None and row["straggler_ratio"] is not None:
            err["straggler_ratio"].append(abs(row["straggler_ratio"] - t["straggler_ratio"]))
    out = {"steps_compared": len(err["duration_s"]), "steps_in_truth": len(want),
           "replica_generate_max_relative": max(rel, default=0.0),
           "replica_generate_worst": worst}
    for k, v in err.items():
        out[k] = {"max": max(v, default=0.0), "mean": statistics.fmean(v) if v else 0.0}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from rl_insight.commands.api_client import ServerClient

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-url", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--experiment-name", required=True)
    ap.add_argument("--truth", required=True)
    args = ap.parse_args(argv)
    rows = ServerClient(args.server_url).get("/api/v1/anatomy", project=args.project,
                                             experiment_name=args.experiment_name)["steps"]
    with open(args.truth) as f:
        print(json.dumps(compare(rows, json.load(f)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
