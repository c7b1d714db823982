"""`make bench` / `make bench-quick`: every benchmark, one table, goals and verdicts.

Runs bench/caller_cost.py, bench/pipeline.py and bench/busy_intervals.py (each in a
process of its own), then
prints their rows with the goals of the performance issue as ratios or limits, and
writes bench/results/summary.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.common import RESULTS, save  # noqa: E402


def best(rows: dict, prefix: str) -> float:
    return max((r["value"] for k, r in rows.items() if k.startswith(prefix)), default=0.0)


def goals(cost: dict, pipe: dict) -> list[tuple[str, float, str, bool, str]]:
    ratios, rows = cost["ratios"], pipe["rows"]
    hub = rows["hub RSS after the metric runs"]
    lanes = next(r for k, r in rows.items() if k.startswith("node lane actor's RSS, 1000 lanes"))
    out = [
        ("metric_gauge / OpenTelemetry span", ratios["metric_gauge / OTel span (goal <= 0.2)"],
         "<= 0.2", ratios["metric_gauge / OTel span (goal <= 0.2)"] <= 0.2, ""),
        ("trace_state block / OpenTelemetry span",
         ratios["trace_state block / OTel span (goal <= 0.2)"], "<= 0.2",
         ratios["trace_state block / OTel span (goal <= 0.2)"] <= 0.2, ""),
        ("outside Ray: metric_gauge / OpenTelemetry span",
         ratios["outside Ray: metric_gauge / OTel span (goal <= 0.2)"], "<= 0.2",
         ratios["outside Ray: metric_gauge / OTel span (goal <= 0.2)"] <= 0.2, ""),
        ("outside Ray: trace_state block / OpenTelemetry span",
         ratios["outside Ray: trace_state block / OTel span (goal <= 0.2)"], "<= 0.2",
         ratios["outside Ray: trace_state block / OTel span (goal <= 0.2)"] <= 0.2, ""),
        ("actor call per event / metric_gauge",
         ratios["actor call / metric_gauge (goal >= 30)"], ">= 30",
         ratios["actor call / metric_gauge (goal >= 30)"] >= 30, ""),
        ("actor call per event / trace_state block",
         ratios["actor call / trace_state block (goal >= 30)"], ">= 30",
         ratios["actor call / trace_state block (goal >= 30)"] >= 30, ""),
        ("metric events/s end to end (best P)", best(rows, "metric events/s"), ">= 100000",
         best(rows, "metric events/s") >= 100_000, ""),
        ("spans/s end to end (best P)", best(rows, "spans/s"), ">= 20000",
         best(rows, "spans/s") >= 20_000, ""),
        ("hub RSS, MB", hub["value"], "< 200 after 1,000,000 events", hub["value"] < 200,
         f"after {hub['events']:,} events"),
        ("node lane actor's RSS at 1,000 lanes, MB", lanes["value"], "< 1024",
         lanes["value"] < 1024, ""),
    ]
    return out


def verdict(ok: bool, value: float, goal: str) -> str:
    if ok:
        return "met"
    try:
        target = float(goal.split()[1].replace(",", ""))
        return f"missed by {abs(value - target) / target:.0%}"
    except (IndexError, ValueError):
        return "missed"


def main() -> int:
    quick = "--quick" in sys.argv
    flag = ["--quick"] if quick else []
    for script in ("caller_cost.py", "pipeline.py", "busy_intervals.py"):
        print(f"== bench/{script} {' '.join(flag)}", flush=True)
        subprocess.run([sys.executable, str(HERE / script), *flag], check=True)
    cost = json.loads((RESULTS / "caller_cost.json").read_text())
    pipe = json.loads((RESULTS / "pipeline.json").read_text())
    print("\nEnd to end, memory and the server (same run)")
    for name, r in pipe["rows"].items():
        print(f"  {name:<66} {r['value']:>12,.2f} {r['unit']}")
    busy = json.loads((RESULTS / "busy_intervals.json").read_text())
    print(f"\nverl-like rollout trace volume ({busy['concurrency']} concurrent requests per "
          "replica; the same load with and without per-request spans)")
    for name, value in busy["ratios"].items():
        print(f"  {name:<66} {value:>12,.1f}x")
    print("\nGoals (ratios against references measured in the same run)")
    rows = []
    for name, value, goal, ok, note in goals(cost, pipe):
        v = verdict(ok, value, goal)
        rows.append({"goal": name, "value": value, "target": goal, "verdict": v,
                     "note": note})
        print(f"  {name:<44} {value:>12,.2f}  goal {goal:<28} {v} {note}")
    save("summary", {"quick": quick, "goals": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
