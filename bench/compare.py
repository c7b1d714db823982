"""What comparing two runs costs the server (issue 57, point 5): two runs of 10,000 steps
each (a week of one-minute steps), 128 rollout replicas and 1,000 ranks a step, kept as
the server keeps them (rl_insight/server/analyses/anatomy.py), and 50 candidate series a
run (trainer scalars, engines, hardware: what the what-changed analysis gathers from
Prometheus, here in memory); ``GET /api/v1/compare``'s work (rl_insight/server/analyses/
comparison.py) in CPU seconds, and its peak of memory beside what the rows hold.

    .venv/bin/python -m bench.compare [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
import tracemalloc

from bench.bound import step_at
from bench.common import save
from rl_insight.anatomy.association import Candidate
from rl_insight.anatomy.rows import step_row
from rl_insight.server.analyses.comparison import Comparison


def run_of(steps: int, replicas: int, ranks: int, slower: float, seed: int) -> list:
    """``steps`` rows as the server keeps them: one step made from lanes, copied with its
    figures varied (making 10,000 rows of 1,000 ranks from lanes took minutes)."""
    lo, hi, lanes, reqs = step_at(replicas, ranks, 4096, seed=seed)
    template = step_row(1, lo, hi, lanes, reqs)
    rng = random.Random(seed)
    out = []
    for i in range(steps):
        r = copy.copy(template)
        f = rng.lognormvariate(0, 0.01) * slower
        r.step, r.duration_s = i + 1, template.duration_s * f
        r.start_ns, r.end_ns = int(i * 60e9), int((i + 1) * 60e9)
        b = copy.copy(template.bound)
        b.path = tuple(v * f for v in template.bound.path)
        r.bound = b
        out.append(r)
    return out


def candidates(steps: int, n: int, shift: float, seed: int) -> list[Candidate]:
    rng = random.Random(seed)
    return [Candidate(f"scalar_{k}", "scalar", {s: 1.0 + (shift if k == 0 else 0.0) +
                                                 rng.gauss(0, 0.01)
                                                 for s in range(1, steps + 1)})
            for k in range(n)]


def compare_cost(steps: int, replicas: int, ranks: int) -> dict:
    a = run_of(steps, replicas, ranks, 1.0, 1)
    b = run_of(steps, replicas, ranks, 1.1, 2)
    ca, cb = candidates(steps, 50, 0.0, 3), candidates(steps, 50, 0.3, 4)
    held = {("p", "a"): a, ("p", "b"): b}
    comparison = Comparison(lambda p, e: held.get((p, e)), lambda key, now: [],
                            lambda key, rows, onset: ca if key[1] == "a" else cb)
    cpus = []
    for _ in range(3):  # the CPU without tracemalloc (which doubles it), the median
        t0 = time.process_time()
        got = comparison.compare(("p", "a"), ("p", "b"))
        cpus.append(time.process_time() - t0)
    cpu = sorted(cpus)[1]
    tracemalloc.start()  # then its peak of memory, in a pass of its own
    base = tracemalloc.get_traced_memory()[0]
    comparison.compare(("p", "a"), ("p", "b"))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    parts = [d for d in got["differences"] if d["type"] == "part"]
    moved = [d for d in got["differences"] if d["type"] == "moved"]
    return {"steps_each": steps, "replicas": replicas, "ranks": ranks,
            "candidates_each": 50, "cpu_s": cpu, "peak_mib": peak / 2**20,
            "significant": got["significant"], "diff_pct": got["step_time"]["diff_pct"],
            "first_part": parts[0]["part"] if parts else None,
            "first_moved": moved[0]["name"] if moved else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller, not saved")
    args = ap.parse_args()
    out = compare_cost(500, 16, 100) if args.quick else compare_cost(10_000, 128, 1000)
    print(json.dumps(out, indent=2))
    if not args.quick:
        print(save("compare", out))


if __name__ == "__main__":
    main()
