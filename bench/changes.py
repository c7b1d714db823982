"""What changed, measured: the regression rule's false alarms on steady noisy runs, its
delay and onset error on each drift the simulation injects, how often the injected
cause is ranked first, and what the analysis costs at full size (2,000 candidate series,
1,000 steps): the server's CPU per finalized step and its memory per run.

Runs are virtual (examples/drifts.py: the simulation's own noise and drift model,
computed step by step), so thousands of steps cost seconds; the rule and the ranking are
the server's own code (rl_insight/anatomy/changes.py, association.py).

    python bench/changes.py [--seeds 200] [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "examples")]

import drifts  # noqa: E402

from bench.common import save  # noqa: E402
from rl_insight.anatomy import association, changes  # noqa: E402

SCENARIOS = ("response-length:30", "kv-shrink:1:30", "throttle:1:40", "weight-sync:30")
# issue 56: the same model with 5 % noise on every part of every step instead of 1 %
NOISY = ("response-length:22:0.04", "weight-sync:30")
NOISY_SIGMA = 0.05


def candidates(run: drifts.VirtualRun) -> list[association.Candidate]:
    """The series the server gathers from Prometheus, as it names them."""
    out = [association.Candidate(k, "scalar", v, {}, association.scalar_role(k))
           for k, v in run.scalars.items()]
    out += [association.Candidate(n, "engine", v, {"replica": r}, association.engine_role(n))
            for (n, r), v in run.engine.items()]
    out += [association.Candidate(n, "hardware", v, {"node": node})
            for (n, node), v in run.hardware.items()]
    return out


def analyze(run: drifts.VirtualRun) -> list[changes.Change]:
    found = changes.analyze(run.rows).report()
    association.annotate(found, run.rows, candidates(run))
    return found


def first_cause(change: changes.Change) -> tuple[str, str]:
    if not change.candidates:
        return ("", "")
    c = change.candidates[0]
    labels = c["labels"]
    return (c["name"], labels.get("replica") or labels.get("node") or "")


def scenario(spec: str, seeds: int, steps: int = 70, sigma: float = drifts.NOISE) -> dict:
    """Over ``seeds`` runs: detection delay after the true onset, onset error (and how
    often within two steps, or said unclear), the cause ranked first, and changes before
    the onset (false alarms)."""
    drift = drifts.parse(spec)
    delays, onset_err, right, early, kinds, unclear = [], [], 0, 0, set(), 0
    for seed in range(seeds):
        run = drifts.virtual_run(steps, [drift], seed=1000 + seed, sigma=sigma)
        onset = run.onsets[drift.kind]
        found = analyze(run)
        early += sum(1 for c in found if c.detected_step < onset)
        hit = next((c for c in found if c.detected_step >= onset), None)
        if hit is None:
            delays.append(float("inf"))
            continue
        delays.append(hit.detected_step - onset)
        onset_err.append(hit.onset_step - onset)
        unclear += hit.onset_unclear() is not None
        kinds.add(hit.kind)
        right += first_cause(hit) in drifts.causes(drift)
    s = sorted(delays)
    return {"seeds": seeds, "delay_p50": s[len(s) // 2], "delay_p95": s[int(len(s) * 0.95)],
            "delay_max": s[-1], "within_5": sum(d <= 5 for d in delays) / seeds,
            "onset_error_median": statistics.median(onset_err) if onset_err else None,
            "onset_error_max": max((abs(e) for e in onset_err), default=None),
            "onset_within_2": sum(abs(e) <= 2 for e in onset_err) / seeds,
            "onset_early_over_2": sum(e < -2 for e in onset_err) / seeds,
            "onset_late_over_2": sum(e > 2 for e in onset_err) / seeds,
            "onset_unclear": unclear / seeds,
            "cause_first": right / seeds, "false_alarms_before_onset": early,
            "kind": kinds.pop() if len(kinds) == 1 else "mixed"}


def steady(seeds: int, steps: int = 300) -> dict:
    alarms, runs_with = 0, 0
    for seed in range(seeds):
        found = changes.analyze(drifts.virtual_run(steps, [], seed=seed).rows).report()
        alarms += len(found)
        runs_with += bool(found)
    return {"runs": seeds, "steps": steps, "changes": alarms,
            "runs_with_a_change": runs_with,
            "per_1000_steps": 1000.0 * alarms / (seeds * steps)}


def cost(series: int = 2000, steps: int = 1000) -> dict:
    """The analysis of a run at full size: CPU per finalized step (the detector, as the
    server runs it on each row), the ranking of 2,000 candidates over 1,000 steps once (as
    on a change), and the memory the detector keeps per run."""
    run = drifts.virtual_run(steps, [drifts.parse("response-length:900")], seed=7)
    rng = random.Random(3)
    extra = [association.Candidate(f"key_{i}", "scalar",
                                   {s: rng.gauss(1.0, 0.05) for s in range(1, steps + 1)})
             for i in range(series - len(candidates(run)))]
    t0 = time.process_time()
    timed = changes.RunChanges()
    for row in run.rows:
        timed.add(row)
    per_step = (time.process_time() - t0) / steps
    # the reference in the same run: `report --step N`'s explanation of one step against
    # the ten before it, the per-step analysis the server already answers
    from rl_insight.anatomy import explain

    t0 = time.process_time()
    for step in range(11, 211):
        explain.explain(run.rows[step - 11:step], step)
    ref = (time.process_time() - t0) / 200
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    tracker = changes.RunChanges()
    for row in run.rows:
        tracker.add(row)
    after = tracemalloc.take_snapshot()
    kept = sum(s.size_diff for s in after.compare_to(before, "filename")
               if "rl_insight" in str(s.traceback))
    tracemalloc.stop()
    found = tracker.report()
    t0 = time.process_time()
    association.annotate(found, run.rows, candidates(run) + extra)
    rank_s = time.process_time() - t0
    return {"steps": steps, "series": series, "detector_cpu_per_step_us": per_step * 1e6,
            "detector_per_step_over_one_explain": per_step / ref if ref else None,
            "ranking_cpu_s": rank_s, "ranking_cpu_per_series_ms": 1000 * rank_s / series,
            "detector_memory_per_run_kib": kept / 1024, "changes": len(found)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="20 seeds, no full-size cost")
    args = ap.parse_args()
    seeds = 20 if args.quick else args.seeds
    out = {"noise_sigma": drifts.NOISE, "spike_p": drifts.SPIKE_P,
           "rule": changes.Rule().__dict__, "steady": steady(seeds),
           "scenarios": {spec: scenario(spec, seeds) for spec in SCENARIOS},
           "noisy_sigma": NOISY_SIGMA,
           "noisy": {spec: scenario(spec, seeds, sigma=NOISY_SIGMA) for spec in NOISY}}
    if not args.quick:
        out["cost"] = cost()
    print(f"steady {out['steady']}")
    for spec, r in out["scenarios"].items():
        print(f"{spec:22s} {r}")
    for spec, r in out["noisy"].items():
        print(f"{spec:22s} at {NOISY_SIGMA:.0%} noise {r}")
    if "cost" in out:
        print(f"cost {out['cost']}")
        save("changes", out)


if __name__ == "__main__":
    main()
