"""The whole collection path under load, on one machine, each figure beside its
reference from the same run: end-to-end throughput of metric events (P processes x T
threads, through the hub, counted at the server) and of spans (through the lanes and
the server, counted at an OTLP-decoding receiver); freshness; memory of the hub and the
lane actors; what the server sustains.

    python bench/pipeline.py [--quick]

Writes bench/results/pipeline.json. bench/run.py runs this and caller_cost.py together.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
import requests  # noqa: E402

from bench.common import save  # noqa: E402
from rl_insight.common import netaddr  # noqa: E402
from tests.fakes.otlp_receiver import FakeTempo  # noqa: E402  (FAKE Tempo, real OTLP)


class Stack:
    """The server (with Prometheus) on free loopback ports, in a home of its own."""

    def __init__(self, receiver: FakeTempo) -> None:
        self.home = tempfile.mkdtemp(prefix="rl-insight-bench-")
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith(("RL_INSIGHT_", "VERL_"))},
                    "RL_INSIGHT_HOME": self.home}
        self.port, self.prom_port = netaddr.free_ports(2)
        self.sets = ["host=127.0.0.1", f"server.port={self.port}",
                     f"prometheus.port={self.prom_port}", "prometheus.scrape_interval=1s",
                     "tempo.enabled=false", "grafana.enabled=false",
                     "alertmanager.enabled=false",
                     f"traces.relay_url={receiver.url}", "push.max_series_total=10000000"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.prom = f"http://127.0.0.1:{self.prom_port}"

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        extra = [x for s in self.sets for x in ("--set", s)]
        return subprocess.run([sys.executable, "-m", "rl_insight", *args, *extra],
                              env=self.env, cwd=REPO, capture_output=True, text=True,
                              check=True)

    def __enter__(self) -> Stack:
        self.cli("server", "start", "--detach")
        self.pid = requests.get(self.url + "/api/v1/services").json()["server"]["pid"]
        return self

    def __exit__(self, *exc) -> None:
        self.cli("server", "stop")


def counter_total(url: str, name: str, experiment: str) -> float:
    text = requests.get(url + "/metrics", timeout=10).text
    pat = re.compile(rf'^{name}{{[^}}]*experiment_name="{re.escape(experiment)}"[^}}]*}} (\S+)$',
                     re.M)
    return sum(float(v) for v in pat.findall(text))


def spans_dropped(url: str) -> float:
    """Spans the lane actors dropped and counted (bounded backlogs), from the server."""
    text = requests.get(url + "/metrics", timeout=10).text
    pat = r"^rl_insight_lane_spans_dropped_total\{[^}]*\} (\S+)$"
    return sum(float(v) for v in re.findall(pat, text, re.M))


def wait_accounted(receiver, url: str, before: int, dropped_before: float, n: int,
                   timeout: float) -> tuple[bool, int, float, float]:
    """Until n spans arrived at the receiver or were dropped and counted: whether they all
    were, how many arrived, how many were dropped, and when the last one arrived."""
    seen = {"arrived": -1, "t_last": time.perf_counter(), "dropped": 0.0}

    def accounted() -> bool:
        arrived = len(receiver.spans) - before
        if arrived > seen["arrived"]:
            seen["arrived"], seen["t_last"] = arrived, time.perf_counter()
        seen["dropped"] = spans_dropped(url) - dropped_before
        return arrived + seen["dropped"] >= n

    done = bool(wait_until(accounted, timeout, 0.1))
    return done, seen["arrived"], seen["dropped"], seen["t_last"]


def wait_until(cond, timeout: float, interval: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(interval)
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    quick = args.quick
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RL_INSIGHT_CLIENT_HUB_PUSH_INTERVAL_S"] = "0.25"
    os.environ["RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S"] = "0.25"
    receiver = FakeTempo(netaddr.free_port()).start()
    results: dict = {"quick": quick}
    with Stack(receiver) as stack:
        os.environ["RL_INSIGHT_SERVER_URL"] = stack.url
        import ray

        import rl_insight

        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False,
                 runtime_env=rl_insight.ray.runtime_env())
        try:
            run(stack, receiver, results, quick, ray, rl_insight)
        finally:
            ray.shutdown()
            receiver.stop()
    path = save("pipeline", results)
    print(f"\nwritten: {path}")
    return 0


def run_threads(work, threads: int) -> float:
    """Run ``work(k)`` on ``threads`` threads, then hand everything over; seconds taken."""
    import rl_insight

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rl_insight.flush(60)
    return time.perf_counter() - t0


def run(stack, receiver, results, quick, ray, rl_insight) -> None:
    from rl_insight.ray import actors

    @ray.remote(num_cpus=0)
    class Producer:
        def metrics(self, exp: str, threads: int, n: int) -> float:
            rl_insight.init("bench", exp)
            pid = str(os.getpid())

            def work(k=0):
                for _ in range(n):
                    rl_insight.metric_count("bench_events", 1.0, p=pid)

            return run_threads(work, threads)

        def spans(self, exp: str, threads: int, n: int, lanes: int) -> float:
            rl_insight.init("bench", exp)
            pid = os.getpid()

            def work(k=0):
                base = time.time_ns()
                for i in range(n):
                    rl_insight.trace_span(name="request", start_time_ns=base + i,
                                          end_time_ns=base + i + 1000,
                                          attributes={"state_lane_id":
                                                      f"req_{pid}_{k}_{i % lanes}"})

            return run_threads(work, threads)

        def one_call_per_event(self, sink, n: int) -> float:
            t0 = time.perf_counter()
            refs = [sink.apply.remote("bench_events", 1.0) for _ in range(n)]
            ray.get(refs)
            return time.perf_counter() - t0

    @ray.remote(num_cpus=0)
    class Sink:  # the reference design: an actor applying one event per call
        def __init__(self):
            self.n = 0

        def apply(self, name, value):
            self.n += 1

    rows = results.setdefault("rows", {})
    warm = Producer.remote()  # creates the hub and lane actors outside the timings
    ray.get([warm.metrics.remote("warmup", 1, 1000), warm.spans.remote("warmup", 1, 200, 50)])
    ray.kill(warm)
    threads = 2
    procs = (1, 2, 4) if quick else (1, 2, 4, 8)
    per_thread = 25_000 if quick else 100_000
    total_events = 0
    for p in procs:
        exp = f"metrics-{p}-{uuid.uuid4().hex[:6]}"
        producers = [Producer.remote() for _ in range(p)]
        ray.get([pr.__ray_ready__.remote() for pr in producers])
        n = p * threads * per_thread
        t0 = time.perf_counter()
        ray.get([pr.metrics.remote(exp, threads, per_thread) for pr in producers])
        done = wait_until(lambda exp=exp, n=n: counter_total(
            stack.url, "rl_insight_monitor_bench_events_total", exp) >= n, 120)
        dt = time.perf_counter() - t0
        total_events += n
        rows[f"metric events/s, {p} processes x {threads} threads"] = {
            "value": n / dt if done else 0.0, "unit": "events/s", "events": n}
        for pr in producers:
            ray.kill(pr)
    ref_n = 5_000 if quick else 20_000
    sink = Sink.remote()
    pr = Producer.remote()
    dt = ray.get(pr.one_call_per_event.remote(sink, ref_n))
    rows["reference: one actor call per event, 1 process"] = {
        "value": ref_n / dt, "unit": "events/s", "events": ref_n}
    ray.kill(sink)
    ray.kill(pr)

    hub = actors.find_hub()
    hub_stats = ray.get(hub.stats.remote())
    rows["hub RSS after the metric runs"] = {
        "value": hub_stats["rss_bytes"] / 2**20, "unit": "MB",
        "events": hub_stats["events_received"]}

    # spans through the lanes, the server and the relay to the receiver; a burst beyond
    # what the node's lane actor holds is dropped there and counted, so a run ends when
    # every span arrived or was counted, and its rate is of those that arrived
    span_threads, span_n = 2, (10_000 if quick else 40_000)
    for p in (1, 2) if quick else (1, 2, 4):
        exp = f"spans-{p}-{uuid.uuid4().hex[:6]}"
        before, dropped_before = len(receiver.spans), spans_dropped(stack.url)
        producers = [Producer.remote() for _ in range(p)]
        ray.get([pr.__ray_ready__.remote() for pr in producers])
        n = p * span_threads * span_n
        t0 = time.perf_counter()
        ray.get([pr.spans.remote(exp, span_threads, span_n, 50) for pr in producers])
        done, arrived, dropped, t_last = wait_accounted(receiver, stack.url, before,
                                                        dropped_before, n, 180)
        rows[f"spans/s, {p} processes x {span_threads} threads"] = {
            "value": arrived / (t_last - t0) if done else 0.0, "unit": "spans/s",
            "spans": n, "arrived": arrived, "dropped": dropped}
        if dropped:
            rows[f"spans dropped and counted, {p} processes (of {n:,})"] = {
                "value": dropped, "unit": "spans"}
        for pr in producers:
            ray.kill(pr)

    freshness(stack, receiver, rows, rl_insight, quick)
    memory(receiver, rows, ray, rl_insight, Producer, quick)
    server_capacity(stack, rows, quick)


def freshness(stack, receiver, rows, rl_insight, quick) -> None:
    rl_insight.init("bench", "freshness")
    metric, span = [], []
    for i in range(3 if quick else 8):
        value = 1000 + i
        t0 = time.perf_counter()
        rl_insight.metric_gauge("bench_fresh", value)
        q = 'rl_insight_monitor_bench_fresh{experiment_name="freshness"}'

        def seen(v=value, q=q):
            try:
                r = requests.get(stack.prom + "/api/v1/query", params={"query": q},
                                 timeout=2).json()["data"]["result"]
            except (requests.RequestException, ValueError, KeyError):
                return False
            return bool(r) and float(r[0]["value"][1]) == v
        if wait_until(seen, 60, 0.02):
            metric.append(time.perf_counter() - t0)
        mark = uuid.uuid4().hex
        t0 = time.perf_counter()
        now = time.time_ns()
        rl_insight.trace_span(name="fresh", start_time_ns=now - 1000, end_time_ns=now,
                              attributes={"state_lane_id": "replica_0", "mark": mark})
        if wait_until(lambda m=mark: m in receiver.attr("mark")[-200:], 60, 0.01):
            span.append(time.perf_counter() - t0)
    rows["freshness: metric_gauge to queryable in Prometheus (median)"] = {
        "value": statistics.median(metric), "unit": "s", "samples": len(metric)}
    rows["freshness: span end to arrival at the receiver (median)"] = {
        "value": statistics.median(span), "unit": "s", "samples": len(span)}


def lane_rss(ray, namespace: str) -> tuple[float, int]:
    """RSS of the node lane actors in a namespace (a node's every non-replica lane). Named
    actors come from the GCS: Ray's state API needs the dashboard, which this Ray has not
    (with it, `make bench` stopped here from 2026-12-01 to 2026-12-04)."""
    total, n = 0, 0
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] != namespace or not a["name"].startswith("rl_insight_lane_node_"):
            continue
        h = ray.get_actor(a["name"], namespace=namespace)
        total += ray.get(h.stats.remote())["rss_bytes"]
        n += 1
    return total / 2**20, n


def memory(receiver, rows, ray, rl_insight, Producer, quick) -> None:  # noqa: N803
    from rl_insight.ray import actors

    for lanes in (10, 100, 1000):
        ns = f"bench_lanes_{lanes}"
        pr = Producer.options(runtime_env={"env_vars": {
            "RL_INSIGHT_CLIENT_RAY_NAMESPACE": ns}}).remote()
        ray.get(pr.spans.remote(f"lanes-{lanes}", 1, lanes * 20, lanes))
        rss, n = lane_rss(ray, ns)
        rows[f"node lane actor's RSS, {lanes} lanes ({n} actor)"] = {
            "value": rss, "unit": "MB", "actors": n}
        ray.kill(pr)
    from rl_insight.client.transports import actor_config
    from rl_insight.config import ClientSettings

    cfg = actor_config(ClientSettings(ray_namespace="bench_dedicated"),
                       os.environ["RL_INSIGHT_SERVER_URL"], "", "")
    one = actors.get_lane("rl_insight_lane_replica_0", cfg)
    rows["one replica lane actor's RSS (replica_<r>)"] = {
        "value": ray.get(one.stats.remote())["rss_bytes"] / 2**20, "unit": "MB"}

    # backlog while the receiver is down: spans wait in the server's spool, on disk
    outage = 10 if quick else 60
    receiver.stop()
    pr = Producer.options(runtime_env={"env_vars": {
        "RL_INSIGHT_CLIENT_RAY_NAMESPACE": "bench_outage"}}).remote()
    peak = 0.0
    end = time.monotonic() + outage
    ref = None
    while time.monotonic() < end:
        if ref is None or ray.wait([ref], timeout=0)[0]:
            ref = pr.spans.remote("outage", 1, 2000, 20)
        rss, n = lane_rss(ray, "bench_outage")
        peak = max(peak, rss)
        time.sleep(1)
    receiver.start()
    rows[f"lane actors' peak RSS during a {outage} s receiver outage"] = {
        "value": peak, "unit": "MB"}
    ray.kill(pr)


def server_capacity(stack, rows, quick) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from rl_insight.collector.otlp_encode import encode
    from rl_insight.wire.events import Identity, Span

    seconds = 3 if quick else 10
    body = "".join(f'bench_push_series{{i="{i}"}} {i}\n' for i in range(100))
    session = requests.Session()

    def hammer(fn) -> int:
        count = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            count += fn()
        return count

    def push(k=[0]):  # noqa: B006 - a counter shared by the worker threads
        k[0] += 1
        r = session.put(f"{stack.url}/metrics/job/bench/g/{k[0] % 50}", data=body)
        return r.status_code == 200

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        n = sum(pool.map(lambda _: hammer(push), range(8)))
    rows["server: pushes/s sustained (100 series each)"] = {"value": n / seconds,
                                                           "unit": "pushes/s"}
    ident = Identity("bench", "server")
    t = time.time_ns()
    payload = encode([(ident, "h:1", Span("s", t, t + 1, f"req_{i}", (("k", i),)))
                      for i in range(100)])
    assert len(ExportTraceServiceRequest.FromString(payload).resource_spans) == 1

    def otlp():
        r = session.post(stack.url + "/v1/traces", data=payload,
                         headers={"Content-Type": "application/x-protobuf"})
        return r.status_code == 200

    proc = psutil.Process(stack.pid)
    cpu0 = sum(proc.cpu_times()[:2])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        n = sum(pool.map(lambda _: hammer(otlp), range(8)))
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    rows["server: OTLP requests/s sustained (100 spans each)"] = {"value": n / seconds,
                                                                 "unit": "requests/s"}
    rows["server: CPU per 1,000 spans"] = {"value": cpu / (n * 100) * 1000 * 1000,
                                          "unit": "ms"}


if __name__ == "__main__":
    sys.exit(main())
