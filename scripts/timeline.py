"""Where the suite's time went, per xdist worker: each module (or shared world) in the
order it ran, when it started and how long it took, and the worker's idle end.

    RL_INSIGHT_TEST_TIMELINE=/tmp/tl.tsv make test
    .venv/bin/python scripts/timeline.py /tmp/tl.tsv
"""

from __future__ import annotations

import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    t0 = min(float(r[1]) for r in rows)
    end = max(float(r[1]) + float(r[2]) for r in rows)
    by_worker: dict[str, list] = defaultdict(list)
    for worker, start, secs, _when, nodeid in rows:
        by_worker[worker].append((float(start) - t0, float(secs), nodeid.split("::")[0]))
    for worker, items in sorted(by_worker.items()):
        items.sort()
        print(f"== {worker}: busy {sum(s for _, s, _ in items):.0f} s of {end - t0:.0f} s")
        spans: list[list] = []  # [module, first start, last end]
        for start, secs, module in items:
            if spans and spans[-1][0] == module:
                spans[-1][2] = start + secs
            else:
                spans.append([module, start, start + secs])
        for module, a, b in spans:
            if b - a >= 5:
                print(f"  {a:7.0f} s  {b - a:6.0f} s  {module}")
        print(f"  idle from {max(b for _, _, b in spans):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1])
