"""The server's own families on /metrics, written by prometheus_client's generate_latest
against /metrics as the server makes it (PushStore.exposition: as a push's are), in one process,
the same families each time, alternating. Shaped as the server's /metrics was at the end
of the test suite's eleven simulated runs (2026-12-07: 12,821 samples, 2.45 MB; the
lanes' state durations 4,233 bucket samples, 407 configuration keys, the engines'
request histograms 345 buckets each), scaled by ``--runs``.

    python bench/own_exposition.py [--runs 11] [--quick]

Writes bench/results/own_exposition.json: the median per /metrics of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, Counter, Histogram  # noqa: E402
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily  # noqa: E402

from bench.common import save  # noqa: E402
from rl_insight.config import PushSettings  # noqa: E402
from rl_insight.server.ingest.pushexposition import render, split_blocks  # noqa: E402
from rl_insight.server.ingest.pushstore import PushStore  # noqa: E402
from rl_insight.server.ingest.store import Store  # noqa: E402

BUCKETS = [str(b) for b in (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
                            1800, 3600, 7200)] + ["+Inf"]
STATES = ("vllm_generate", "vllm_sleep", "vllm_wake", "actor_update", "actor_compute_log_prob",
          "ref_compute_log_prob", "update_weights", "validate", "agent_generate",
          "agent_tool_call", "idle", "train_step")
LANES = ("rank_0", "rank_1", "replica_0", "replica_1", "driver")


class RunFamilies:
    """One run's share of what the server's collectors yield each scrape."""

    def __init__(self, run: str) -> None:
        self.run = run

    def collect(self):
        base = ["e2e-whatif", self.run]
        durations = HistogramMetricFamily(
            "rl_insight_monitor_state_duration_seconds", "Time in a state, per lane.",
            labels=["project", "experiment_name", "role", "state_lane_id", "state_name"])
        lane_state = GaugeMetricFamily(
            "rl_insight_monitor_lane_state", "1 for the state a lane is in.",
            labels=["project", "experiment_name", "role", "state_lane_id", "state_name"])
        for lane in LANES:
            role = "rollout" if lane.startswith("replica") else "trainer"
            for state in STATES[:7]:
                durations.add_metric(base + [role, lane, state],
                                     [(b, float(i)) for i, b in enumerate(BUCKETS)], 12.5)
                lane_state.add_metric(base + [role, lane, state], 0.0)
        config = GaugeMetricFamily("rl_insight_run_config_info", "A run's configuration.",
                                   labels=["project", "experiment_name", "key", "value"])
        for k in range(37):
            config.add_metric(base + [f"actor_rollout_ref.key_{k}", f"value {k}"], 1.0)
        yield durations
        yield lane_state
        yield config
        for name in ("queue", "time_to_first_token", "prefill", "decode", "e2e"):
            h = HistogramMetricFamily(f"rl_insight_request_{name}_seconds", "Requests.",
                                      labels=["project", "experiment_name", "replica"])
            for replica in ("0", "1"):
                h.add_metric(base + [replica], [(b, float(i)) for i, b in enumerate(BUCKETS)],
                             3.0)
            yield h


def registry(runs: int) -> CollectorRegistry:
    """The server's own registry: its instrumented metrics and every run's collector."""
    reg = CollectorRegistry()
    c = Counter("rl_insight_pushes", "Pushes.", ["kind", "result"], registry=reg)
    h = Histogram("rl_insight_intake_duration_seconds", "Intake.", ["kind"], registry=reg)
    for kind in ("batch", "put", "post"):
        c.labels(kind, "ok").inc()
        h.labels(kind).observe(0.01)
    for r in range(runs):
        reg.register(RunFamilies(f"run-{r}"))
    return reg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    reg = registry(a.runs)
    # /metrics as the server makes it (PushStore.exposition, no pushed groups), against
    # generate_latest's text of the same families
    store = PushStore(PushSettings(), Store(Path(tempfile.mkdtemp(prefix="own-exp-"))))
    ways = {"generate_latest": lambda: render(reg.collect()),
            "server": lambda: store.exposition(reg.collect())}
    first = ways["generate_latest"]()
    samples = sum(1 for line in first.decode().splitlines() if not line.startswith("#"))
    assert ways["server"]().count(b"\n") == len(split_blocks(first.decode())) * 2 + \
        samples
    times: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(5 if a.quick else 40):
        for name, fn in ways.items():  # alternating: the machine's drift hits both
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["server"] / med["generate_latest"]
    print(f"{samples} samples of {a.runs} runs' own families, median per /metrics: "
          f"generate_latest {med['generate_latest'] * 1e3:.1f} ms, the server's "
          f"{med['server'] * 1e3:.1f} ms: {ratio:.2f} of it")
    save("own_exposition", {"runs": a.runs, "samples": samples,
                            "median_ms": {k: v * 1e3 for k, v in med.items()},
                            "ratio": ratio})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
