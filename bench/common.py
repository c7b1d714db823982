"""Shared by the benchmarks: timing per call, a result table, and the JSON record."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def per_call_ns(fn: Callable[[int], object], n: int, warmup: int = 200) -> list[float]:
    """Each call timed on its own, minus the timer's own cost (measured the same way)."""
    for i in range(warmup):
        fn(i)
    clock = time.perf_counter_ns
    base = []
    for _ in range(min(n, 5000)):
        t0 = clock()
        base.append(clock() - t0)
    overhead = statistics.median(base)
    out = []
    for i in range(n):
        t0 = clock()
        fn(i)
        out.append(max(clock() - t0 - overhead, 0.0))
    return out


def summary(samples_ns: list[float]) -> dict[str, float]:
    s = sorted(samples_ns)
    return {"median_us": s[len(s) // 2] / 1e3, "p99_us": s[int(len(s) * 0.99)] / 1e3,
            "mean_us": sum(s) / len(s) / 1e3, "n": len(s)}


def table(rows: list[tuple[str, dict]], title: str) -> str:
    lines = [title, f"{'what':<52} {'median µs':>10} {'p99 µs':>10} {'n':>8}"]
    for name, r in rows:
        lines.append(f"{name:<52} {r['median_us']:>10.2f} {r['p99_us']:>10.2f} {r['n']:>8}")
    return "\n".join(lines)


def save(name: str, data: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    data = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()},
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **data}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2))
    return path
