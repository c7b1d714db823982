"""Where the suite's time went, per xdist worker: each module (or shared world) in the
order it ran, when it started and how long it took, and the worker's idle end; with the
CPU samples of scripts/cpu_busy.py, how busy the machine's CPUs were meanwhile (the
share of all of them: two waiting modules side by side show as a trough).

    .venv/bin/python scripts/cpu_busy.py /tmp/cpu.tsv &
    RL_INSIGHT_TEST_TIMELINE=/tmp/tl.tsv make test; kill %1
    .venv/bin/python scripts/timeline.py /tmp/tl.tsv [/tmp/cpu.tsv]
"""

from __future__ import annotations

import sys
from collections import defaultdict


def busy_share(samples: list[tuple[float, float]], start: float, end: float) -> str:
    """The mean busy share of the samples in (start, end] (each covers the seconds before
    it was taken), or blank without any."""
    inside = [share for at, share in samples if start < at <= end]
    return f"  CPU {sum(inside) / len(inside):4.0%}" if inside else ""


def main(path: str, cpu_path: str | None = None) -> None:
    rows = [line.rstrip("\n").split("\t") for line in open(path)]
    t0 = min(float(r[1]) for r in rows)
    end = max(float(r[1]) + float(r[2]) for r in rows)
    samples = [] if cpu_path is None else [
        (float(at) - t0, float(share)) for at, share in
        (line.split("\t") for line in open(cpu_path) if line.strip())]
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
                print(f"  {a:7.0f} s  {b - a:6.0f} s{busy_share(samples, a, b)}  {module}")
        print(f"  idle from {max(b for _, _, b in spans):.0f} s")
    if samples:
        print(f"== the CPUs while pytest ran: busy{busy_share(samples, 0, end - t0)[5:]}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
