"""What monitoring costs the training code that calls it, per call, measured in one run
beside two references: the OpenTelemetry SDK's span start and end (with its batch
processor), and one fire-and-forget Ray actor call per event (the design this replaces).

    python bench/caller_cost.py [--quick]

Prints a table and writes bench/results/caller_cost.json. Goals: a metric or a
trace_state block costs at most a fifth of an OpenTelemetry span (inside Ray, and outside
it, where the hub and lane cores share the process), and at least 20 times
less than an actor call per event; ``init()`` repeated (Uni-Agent calls it before every
metric it emits: uni_agent/rl_insight/__init__.py) at most 1 µs after the first, and a
small share of the metric it precedes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import per_call_ns, save, summary, table  # noqa: E402

STEP = {f"group_{i // 10}/metric_{i}": float(i) for i in range(100)}


def disabled_costs(n: int) -> dict:
    """Run in a child process with no endpoint configured: every call is a no-op."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import rl_insight
from bench.common import per_call_ns, summary
from bench.caller_cost import STEP
t = rl_insight.Tracking("bench", "disabled")
rl_insight.init()
out = {{
  "metric_gauge (disabled)": summary(per_call_ns(lambda i: rl_insight.metric_gauge("x", i), {n})),
  "init() repeated (disabled)": summary(per_call_ns(lambda i: rl_insight.init(), {n})),
  "trace_state block (disabled)": summary(per_call_ns(lambda i: block(), {n})),
  "log() of 100 scalars (disabled)": summary(per_call_ns(lambda i: t.log(STEP, i), {n // 10})),
}}
print(json.dumps(out))
"""
    code = code.replace("lambda i: block()", "lambda i: rl_insight.trace_state('s', "
                        "state_lane_id='replica_0').__enter__().__exit__(None, None, None)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RL_INSIGHT_", "VERL_"))}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, check=True)
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def outside_ray_costs(n: int) -> dict:
    """In a child process without Ray (a trainer that sends to the server itself, as
    TRL's or AReaL's do): the hub and lane cores run in the process, beside the calls;
    the OpenTelemetry reference measured there too."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import rl_insight
from bench.common import per_call_ns, summary
from bench.caller_cost import otel_span_cost
rl_insight.init(project="bench", experiment_name="outside-ray")
def block():
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
        pass
out = {{
  "OpenTelemetry SDK span start+end (reference, outside Ray)": otel_span_cost({n}),
  "metric_gauge (enabled, outside Ray)":
      summary(per_call_ns(lambda i: rl_insight.metric_gauge("x", i, replica="0"), {n})),
  "trace_state block (enabled, outside Ray)": summary(per_call_ns(lambda i: block(), {n})),
}}
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RL_INSIGHT_", "VERL_"))}
    env["RL_INSIGHT_SERVER_URL"] = "http://127.0.0.1:9"  # as in main(): nobody listens
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as home:
        env["RL_INSIGHT_HOME"] = home
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True)
    import json

    return json.loads(r.stdout.strip().splitlines()[-1])


def otel_span_cost(n: int) -> dict:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Discard(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracer = provider.get_tracer("bench")

    def span(i):
        s = tracer.start_span("vllm_generate", attributes={"state_lane_id": "replica_0"})
        s.end()

    try:
        return summary(per_call_ns(span, n))
    finally:
        provider.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer calls, for a smoke run")
    args = ap.parse_args()
    n = 5_000 if args.quick else 50_000

    import ray

    import rl_insight

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RL_INSIGHT_SERVER_URL"] = "http://127.0.0.1:9"  # nobody listens: the
    # caller's cost does not depend on where the hub pushes
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        att = rl_insight.ray.attach(project="bench", experiment_name="caller-cost")
        assert att.enabled, att.message
        rows = {}
        rows["OpenTelemetry SDK span start+end (reference)"] = otel_span_cost(n)

        @ray.remote(num_cpus=0)
        class Sink:
            def take(self, event):
                pass

        sink = Sink.remote()
        ray.get(sink.take.remote(None))
        rows["one Ray actor call per event (reference)"] = summary(
            per_call_ns(lambda i: sink.take.remote(("x", float(i))), n // 5))
        rows["metric_gauge (enabled)"] = summary(
            per_call_ns(lambda i: rl_insight.metric_gauge("x", i, replica="0"), n))
        rows["init() repeated (enabled)"] = summary(
            per_call_ns(lambda i: rl_insight.init(), n))

        def uni_agent_emit(i):  # uni_agent/rl_insight/__init__.py: init, then the metric
            rl_insight.init()
            rl_insight.metric_gauge("kv_cache_load", i, "router KV occupancy", replica="0")

        rows["init() + metric_gauge (Uni-Agent's emit)"] = summary(
            per_call_ns(uni_agent_emit, n))

        def block(i):
            with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
                pass

        rows["trace_state block (enabled)"] = summary(per_call_ns(block, n))
        t = rl_insight.Tracking("bench", "caller-cost")
        rows["log() of 100 scalars (enabled)"] = summary(
            per_call_ns(lambda i: t.log(STEP, i), n // 50))
        rl_insight.flush(30)
    finally:
        ray.shutdown()
    rows.update(disabled_costs(n))
    rows.update(outside_ray_costs(n))

    otel = rows["OpenTelemetry SDK span start+end (reference)"]["median_us"]
    actor = rows["one Ray actor call per event (reference)"]["median_us"]
    gauge = rows["metric_gauge (enabled)"]["median_us"]
    block_cost = rows["trace_state block (enabled)"]["median_us"]
    init = rows["init() repeated (enabled)"]["median_us"]
    outside_otel = rows["OpenTelemetry SDK span start+end (reference, outside Ray)"][
        "median_us"]
    ratios = {
        "init() repeated, µs (goal <= 1)": init,
        "init() repeated / metric_gauge": init / gauge,
        "init() repeated, disabled, µs (goal <= 1)":
            rows["init() repeated (disabled)"]["median_us"],
        "metric_gauge / OTel span (goal <= 0.2)": gauge / otel,
        "trace_state block / OTel span (goal <= 0.2)": block_cost / otel,
        "outside Ray: metric_gauge / OTel span (goal <= 0.2)":
            rows["metric_gauge (enabled, outside Ray)"]["median_us"] / outside_otel,
        "outside Ray: trace_state block / OTel span (goal <= 0.2)":
            rows["trace_state block (enabled, outside Ray)"]["median_us"] / outside_otel,
        "actor call / metric_gauge (goal >= 30)": actor / gauge,
        "actor call / trace_state block (goal >= 30)": actor / block_cost,
    }
    print(table(list(rows.items()), "Caller cost per call (same run, medians of each call)"))
    print()
    for k, v in ratios.items():
        print(f"{k:<52} {v:>10.2f}")
    path = save("caller_cost", {"rows": rows, "ratios": ratios,
                                "calls": n, "quick": args.quick})
    print(f"\nwritten: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
