"""The lane tier of a 1,000-GPU run against one server, with the real lane code.

    python bench/scale_tier.py [--nodes 500 --ranks-per-node 8 --replicas 128]
        [--endpoints 250] [--seconds 300] [--warmup 30] [--out bench/scale_tier.json]
    make bench-tier

What runs, in a private network namespace on this machine (2 cores, shared by all):
the server and its Prometheus (started with the CLI, default settings but for Tempo,
Grafana and Alertmanager, which are off; spans are relayed to a sink that answers 200);
N simulated vLLM endpoints (bench/scale_engines.py) registered under the run, as in
bench/scale.py; and the lane tier: a lane actor's core (``LaneCore``, its ``Sender`` and
its ``Periodic`` at ``client.lane_flush_interval_s``, exactly what ``LaneActor`` runs)
for every node (``rl_insight_lane_node_<n>``) and every replica
(``rl_insight_lane_replica_<r>``), in worker processes instead of Ray actors, with the
node id the bench assigns. Routing is the client's own (``actors.lane_actor_name``): each
rank ``rank_<r>`` of node n reaches node n's core. Each rank finishes one trainer state
per second, as verl's annotated methods do (a state change in, a state change out, a
span); each replica is generating 80 % of the time. What a process hands its lane actor
arrives in batches every ``client.flush_interval_s``, as the client buffer sends them.

Measured: spans and finished states the tier made, sent and the server took (its
counter, and the state histograms' counts in the server's /metrics: 0 lost), lane tick
(flush) duration p50/p99, requests per tick and per second by kind, server CPU and RSS,
Prometheus' scrape of the server (up share, duration), the tier's memory per node
actor, and Prometheus and the engines beside.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from rl_insight.collector.lanes import LaneCore  # noqa: E402
from rl_insight.collector.loop import Periodic  # noqa: E402
from rl_insight.collector.push import Sender  # noqa: E402
from rl_insight.config import ClientSettings  # noqa: E402
from rl_insight.ray.actors import lane_actor_name  # noqa: E402
from rl_insight.wire.events import Identity, Span, StateChange  # noqa: E402

PROJECT, EXPERIMENT = "bench-tier", "1000-gpus"
STATES = ("switch_to_trainer", "actor_compute_log_prob", "ref_compute_log_prob",
          "actor_update", "update_weights")
CLIENT = ClientSettings()


# -- worker: lane cores in a process ---------------------------------------------------
class CountingSender(Sender):
    """The real Sender, counting its requests and the time each took."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.requests = {"spans": 0, "metrics": 0}
        self.failed = 0

    def spans(self, payload: bytes) -> bool:
        self.requests["spans"] += 1
        ok = super().spans(payload)
        self.failed += not ok
        return ok

    def push_groups(self, groups) -> list[bool]:
        self.requests["metrics"] += 1
        out = super().push_groups(groups)
        self.failed += not all(out)
        return out


class Actor:
    """One lane actor: its core, sender and tick loop; tick durations recorded."""

    def __init__(self, name: str, url: str, tick: float) -> None:
        self.sender = CountingSender(url)
        self.core = LaneCore(self.sender, name, CLIENT.lane_max_pending_spans,
                             CLIENT.lane_batch_size)
        self.ticks: list[float] = []
        self.loop = Periodic(tick, self._tick, name).start()

    def _tick(self) -> bool:
        t0 = time.perf_counter()
        more = self.core.tick()
        self.ticks.append(time.perf_counter() - t0)
        return more


def worker(args) -> int:
    """Hosts the lane actors of nodes [first, last) and replicas [rfirst, rlast)."""
    if args.trace_heap:  # exact, but it slows every allocation of the tier severalfold
        tracemalloc.start()
    rss0 = psutil.Process().memory_info().rss
    ident = Identity(PROJECT, EXPERIMENT)
    actors: dict[str, Actor] = {}
    feeds: list[tuple[str, str, bool]] = []  # (actor, lane, is replica)
    # --colocate: the k-th replica of this process runs on its k-th node, and that
    # node's ranks go to the replica's actor instead of a node actor of their own
    host = {args.first + k: r for k, r in enumerate(range(args.rfirst, args.rlast))
            if args.colocate and args.first + k < args.last}
    for n in range(args.first, args.last):
        node = f"{n:012x}"
        for k in range(args.ranks_per_node):
            lane = f"rank_{n * args.ranks_per_node + k}"
            name = (lane_actor_name(f"replica_{host[n]}", node) if n in host
                    else lane_actor_name(lane, node))
            feeds.append((name, lane, False))
    for r in range(args.rfirst, args.rlast):
        lane = f"replica_{r}"
        feeds.append((lane_actor_name(lane, f"{r:012x}"), lane, True))
    for name, _, _ in feeds:
        if name not in actors:
            actors[name] = Actor(name, args.url, args.tick)
    heap = tracemalloc.get_traced_memory()[0] if args.trace_heap else 0
    made = {"spans": 0, "states": 0}
    stop = time.time() + args.seconds
    token = 0
    pending: dict[str, list] = {}
    flush = CLIENT.flush_interval_s
    next_flush = time.time() + flush
    second = int(time.time())
    print(json.dumps({"event": "started", "actors": len(actors), "lanes": len(feeds)}),
          flush=True)
    while time.time() < stop:
        now = time.time()
        if int(now) > second:  # one finished state per lane per second
            second = int(now)
            end = time.time_ns()
            for i, (name, lane, replica) in enumerate(feeds):
                state = "vllm_generate" if replica else STATES[(second + i) % len(STATES)]
                start = end - (800_000_000 if replica else 1_000_000_000)
                token += 1
                pending.setdefault(name, []).extend([
                    StateChange(lane, state, start, True, token),
                    Span(state, start, end, lane, (("step", second),), 0, token, 0, True)])
                made["spans"] += 1
                made["states"] += 1
        if now >= next_flush:  # the client buffer hands its batch over
            next_flush += flush
            for name, items in pending.items():
                if actors[name].core.ingest(ident, "bench", items):
                    actors[name].loop.wake()
            pending = {}
        time.sleep(0.01)
    for name, items in pending.items():
        actors[name].core.ingest(ident, "bench", items)
    def drain(a: Actor) -> None:
        """What is left goes out, as an actor's next ticks send it: a tick refused by a
        busy server (503, Retry-After) is tried again once the wait is over."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            a.loop.run_now(60)
            if a.core.idle():
                return
            time.sleep(max(0.05, min(5.0, a.sender.retry_at - time.monotonic())))

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(32) as pool:  # the actors drain at once, as they would
        list(pool.map(drain, actors.values()))
    ticks = sorted(t for a in actors.values() for t in a.ticks)
    out = {"event": "done", "actors": len(actors), "lanes": len(feeds), **made,
           "ticks_by_actor": sorted(len(a.ticks) for a in actors.values()),
           "spans_sent": sum(a.core.spans_sent for a in actors.values()),
           "spans_dropped": sum(a.core.spans_dropped for a in actors.values()),
           "spans_pending": sum(len(a.core.pending) for a in actors.values()),
           "requests": {k: sum(a.sender.requests[k] for a in actors.values())
                        for k in ("spans", "metrics")},
           "failed_requests": sum(a.sender.failed for a in actors.values()),
           "backoffs": sum(a.sender.backoffs for a in actors.values()),
           "ticks": len(ticks), "tick_p50_s": ticks[len(ticks) // 2] if ticks else None,
           "tick_p99_s": ticks[int(len(ticks) * 0.99)] if ticks else None,
           "tick_max_s": ticks[-1] if ticks else None,
           "heap_per_actor_bytes": (tracemalloc.get_traced_memory()[0] - heap)
           / max(1, len(actors)) if args.trace_heap else None,
           "rss_per_actor_bytes": (psutil.Process().memory_info().rss - rss0)
           / max(1, len(actors)),
           "rss_bytes": psutil.Process().memory_info().rss}
    print(json.dumps(out), flush=True)
    return 0


# -- the run ---------------------------------------------------------------------------
def split(total: int, parts: int, i: int) -> tuple[int, int]:
    per = -(-total // parts)
    return min(i * per, total), min((i + 1) * per, total)


def state_counts(url: str) -> float:
    """The run's finished states the server holds: the lane histograms' counts."""
    text = requests.get(url + "/metrics", timeout=300).text
    total = 0.0
    for m in re.finditer(r'^rl_insight_monitor_state_duration_seconds_count\{([^}]*)\} (\S+)$',
                         text, re.M):
        if f'experiment_name="{EXPERIMENT}"' in m.group(1):
            total += float(m.group(2))
    return total


def intake_buckets(url: str) -> dict[str, dict[float, float]]:
    """The server's intake duration histogram by route: le -> cumulative count."""
    text = requests.get(url + "/metrics", timeout=300).text
    out: dict[str, dict[float, float]] = {}
    for m in re.finditer(r'^rl_insight_intake_duration_seconds_bucket\{([^}]*)\} (\S+)$',
                         text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out.setdefault(labels["route"], {})[float(labels["le"])] = float(m.group(2))
    return out


def gc_pauses(url: str) -> dict[str, tuple[float, float]]:
    """The server's garbage collections by generation: (count, seconds in total)."""
    text = requests.get(url + "/metrics", timeout=300).text
    out: dict[str, list[float]] = {}
    for m in re.finditer(r'^rl_insight_gc_pause_seconds_(count|sum)\{generation="(\d)"\} (\S+)$',
                         text, re.M):
        out.setdefault(m.group(2), [0.0, 0.0])[m.group(1) == "sum"] = float(m.group(3))
    return {g: (v[0], v[1]) for g, v in out.items()}


def intake_quantiles(h0: dict, h1: dict) -> dict:
    """p50, p99 (the bucket bound reached) and count of each route between two reads."""
    out = {}
    for route, b1 in h1.items():
        b0 = h0.get(route, {})
        d = {le: n - b0.get(le, 0.0) for le, n in sorted(b1.items())}
        total = d.get(float("inf"), 0.0)
        if not total:
            continue
        q = {}
        for name, frac in (("p50_s", 0.5), ("p99_s", 0.99)):
            q[name] = next((le for le, n in d.items() if n >= frac * total), None)
        out[route] = {"requests": total, **q}
    return out


def pin(pid: int, cpu: int) -> None:
    """Every thread of the process on one CPU (taskset -a)."""
    subprocess.run(["taskset", "-a", "-cp", str(cpu), str(pid)], check=True,
                   capture_output=True)


def run(args) -> dict:
    from bench.scale import (
        Phase,
        Procs,
        Sink,
        counter_rates,
        prom_figures,
        register,
        server_counters,
        start_engines,
        wait_all_up,
    )
    from tests.conftest import Cli, free_port_overrides

    home = Path(tempfile.mkdtemp(prefix="rl-insight-tier-"))
    sink, procs = Sink(), Procs()
    cli = Cli(home, free_port_overrides())
    engines: list[subprocess.Popen] = []
    workers: list[subprocess.Popen] = []
    out: dict = {"nodes": args.nodes, "ranks_per_node": args.ranks_per_node,
                 "replicas": args.replicas, "endpoints": args.endpoints,
                 "tick_s": args.tick, "seconds": args.seconds, "workers": args.workers,
                 "pinned": args.pin, "colocate": args.colocate, "trace_heap": args.trace_heap,
                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        url = cli.start("tempo.enabled=false", "grafana.enabled=false",
                        "alertmanager.enabled=false", f"traces.relay_url={sink.url}")
        prom = cli.prometheus
        pid = requests.get(url + "/api/v1/services", timeout=10).json()["server"]["pid"]
        procs.add("server", pid)
        for child in psutil.Process(pid).children():
            if "prometheus" in child.name():
                procs.add("prometheus", child.pid)
        if args.endpoints:
            engines, ports, info = start_engines(args.endpoints, 250,
                                                 args.seconds + args.warmup + 900, procs)
            out["registration"] = register(url, ports)
            wait_all_up(prom, args.endpoints, 300)
            print(f"   {args.endpoints} engine endpoints up", flush=True)
        for i in range(args.workers):
            first, last = split(args.nodes, args.workers, i)
            rfirst, rlast = split(args.replicas, args.workers, i)
            workers.append(subprocess.Popen(
                [sys.executable, str(Path(__file__)), "--worker", "--url", url,
                 "--first", str(first), "--last", str(last), "--rfirst", str(rfirst),
                 "--rlast", str(rlast), "--ranks-per-node", str(args.ranks_per_node),
                 "--tick", str(args.tick), "--seconds", str(args.seconds + args.warmup),
                 *(["--colocate"] if args.colocate else []),
                 *(["--trace-heap"] if args.trace_heap else [])],
                stdout=subprocess.PIPE, text=True, cwd=REPO))
            procs.add("lane_tier", workers[-1].pid)
        if args.pin:  # the monitoring host's processes on CPU 0, the cluster's on CPU 1
            for name, cpu in (("server", 0), ("prometheus", 0), ("engines", 1),
                              ("lane_tier", 1)):
                for proc in procs.procs.get(name, []):
                    pin(proc.pid, cpu)
            os.sched_setaffinity(0, {1})
        for w in workers:
            json.loads(w.stdout.readline())
        print(f"   {args.nodes} node and {args.replicas} replica lane actors in "
              f"{args.workers} processes; warm-up {args.warmup:.0f} s", flush=True)
        time.sleep(args.warmup)
        c0, h0, g0 = server_counters(url), intake_buckets(url), gc_pauses(url)
        ph = Phase(procs)
        time.sleep(args.seconds)
        phase = ph.end()
        c1, h1, g1 = server_counters(url), intake_buckets(url), gc_pauses(url)
        phase["intake"] = intake_quantiles(h0, h1)
        phase["gc"] = {g: {"collections": n - g0.get(g, (0, 0))[0],
                           "seconds": t - g0.get(g, (0, 0))[1]} for g, (n, t) in g1.items()}
        phase["prometheus"] = prom_figures(prom, phase["start"], phase["end"])
        phase["server_rates"] = counter_rates(c0, c1)
        out["steady"] = phase
        done = [json.loads(w.stdout.readlines()[-1]) for w in workers]
        for w in workers:
            w.wait(120)
        tier = {k: sum(d[k] for d in done) for k in
                ("actors", "lanes", "spans", "states", "spans_sent", "spans_dropped",
                 "spans_pending", "ticks", "failed_requests", "backoffs")}
        tier["requests"] = {k: sum(d["requests"][k] for d in done)
                            for k in ("spans", "metrics")}
        tier["tick_p99_s"] = max(d["tick_p99_s"] or 0 for d in done)
        tier["tick_p50_s"] = max(d["tick_p50_s"] or 0 for d in done)
        tier["tick_max_s"] = max(d["tick_max_s"] or 0 for d in done)
        heaps = [d["heap_per_actor_bytes"] for d in done if d.get("heap_per_actor_bytes")]
        tier["heap_per_actor_bytes"] = sum(heaps) / len(heaps) if heaps else None
        tier["rss_per_actor_bytes"] = sum(d.get("rss_per_actor_bytes") or 0 for d in done) \
            / len(done)
        tier["rss_per_actor_bytes"] = sum(d["rss_bytes"] for d in done) / tier["actors"]
        tier["requests_per_tick"] = sum(tier["requests"].values()) / max(1, tier["ticks"])
        out["tier"] = tier

        def received() -> tuple[float, float]:
            got = server_counters(url)
            return got.get("rl_insight_spans_received_total", 0.0), state_counts(url)

        deadline = time.time() + 120
        spans_in, states_in = received()
        while (spans_in < tier["spans_sent"] or states_in < tier["states"]) and \
                time.time() < deadline:
            time.sleep(2)
            spans_in, states_in = received()
        out["server"] = {"spans_received": spans_in, "states_received": states_in,
                         "spans_lost": tier["spans"] - spans_in,
                         "states_lost": tier["states"] - states_in}
        print(json.dumps({k: out[k] for k in ("tier", "server")}, indent=1), flush=True)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        for p in engines:
            try:
                p.stdin.close()
            except OSError:
                pass
        cli.run("server", "stop", timeout=120)
        for pid in cli.ours():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in engines:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        procs.stop()
        sink.stop()
        shutil.rmtree(home, ignore_errors=True)
    return out


def markdown(runs: list[dict]) -> str:
    """The runs of a record as docs/scaling.md's table, one column a run."""
    def f(v, d=2):
        if v is None:
            return "-"
        return f"{v:,.{d}f}" if isinstance(v, float) else f"{v:,}"

    rows = [
        ("nodes x ranks, replicas", lambda r: f"{r['nodes']} x {r['ranks_per_node']}, "
                                              f"{r['replicas']}"),
        ("rank lanes + replica lanes", lambda r: f(r["tier"]["lanes"])),
        ("lane actors (node + replica)", lambda r: f(r["tier"]["actors"])),
        ("ranks' lanes carried by", lambda r: "replica actor where one runs"
         if r.get("colocate") else "node actors"),
        ("engine endpoints scraped beside", lambda r: f(r["endpoints"])),
        ("tick, s (client.lane_flush_interval_s)", lambda r: f(r["tick_s"], 0)),
        ("measured, s (after warm-up)", lambda r: f(r["seconds"], 0)),
        ("spans made / received by the server", lambda r: f"{r['tier']['spans']:,} / "
                                                          f"{r['server']['spans_received']:,.0f}"),
        ("finished states made / counted by the server",
         lambda r: f"{r['tier']['states']:,} / {r['server']['states_received']:,.0f}"),
        ("lost", lambda r: f(r["server"]["spans_lost"] + r["server"]["states_lost"], 0)),
        ("ticks per s made / nominal (actors / tick)",
         lambda r: f"{r['tier']['ticks'] / (r['seconds'] + 30):.1f} / "
                   f"{r['tier']['actors'] / r['tick_s']:.1f}"),
        ("requests per tick", lambda r: f(r["tier"]["requests_per_tick"])),
        ("requests per s at the server (spans + metrics)",
         lambda r: f"{r['steady']['server_rates'].get('POST /v1/traces 200', 0):.1f} + "
                   f"{r['steady']['server_rates'].get('POST /api/v1/push/batch 200', 0):.1f}"),
        ("503 with Retry-After per s", lambda r: f(sum(
            v for k, v in r["steady"]["server_rates"].items() if k.endswith(" 503")))),
        ("intake p50 / p99, s (server side: spans; metrics)",
         lambda r: "; ".join(f"{v['p50_s']} / {v['p99_s']}" for _, v in
                             sorted(r["steady"].get("intake", {}).items(), reverse=True))),
        ("lane tick p50 / p99, s (the tier's own clock)",
         lambda r: f"{r['tier']['tick_p50_s']:.2f} / {r['tier']['tick_p99_s']:.2f}"),
        ("server CPU, s per s", lambda r: f(r["steady"]["cpu_per_s"].get("server"))),
        ("server GC: full collections; time in all collections",
         lambda r: "-" if "gc" not in r["steady"] else
         f"{r['steady']['gc'].get('2', {}).get('collections', 0):.0f}; "
         f"{sum(v['seconds'] for v in r['steady']['gc'].values()) / r['seconds']:.3f} s/s"),
        ("server RSS peak, MB", lambda r: f(r["steady"]["rss_peak_mb"].get("server"), 0)),
        ("server scrape up share", lambda r: f(r["steady"]["prometheus"][
            "server_scrape_up_share"])),
        ("server scrape p50 / max, s",
         lambda r: f"{r['steady']['prometheus']['server_scrape_s_p50']:.2f} / "
                   f"{r['steady']['prometheus']['server_scrape_s_max']:.2f}"),
        ("Prometheus CPU, s per s; head series",
         lambda r: f"{r['steady']['cpu_per_s'].get('prometheus', 0):.2f}; "
                   f"{r['steady']['prometheus']['head_series']:,.0f}"),
        ("lane tier CPU, s per s (all nodes' lane actors)",
         lambda r: f(r["steady"]["cpu_per_s"].get("lane_tier"))),
        ("Python heap per lane actor, KB (tracemalloc, --trace-heap)",
         lambda r: f(r["tier"]["heap_per_actor_bytes"] / 1024, 0)
         if r["tier"].get("heap_per_actor_bytes") else "-"),
        ("process memory per lane actor, KB (RSS growth over the run / actors)",
         lambda r: f(r["tier"]["rss_per_actor_bytes"] / 1024, 0)
         if r["tier"].get("rss_per_actor_bytes") else "-"),
    ]
    head = "| what | " + " | ".join(r["time"][:16] for r in runs) + " |"
    out = [head, "| --- |" + " ---: |" * len(runs)]
    for name, fn in rows:
        cells = []
        for r in runs:
            try:
                cells.append(fn(r))
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("-")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=128)
    ap.add_argument("--endpoints", type=int, default=250)
    ap.add_argument("--tick", type=float, default=CLIENT.lane_flush_interval_s,
                    help="client.lane_flush_interval_s (default: the setting's default)")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--warmup", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=4, help="processes hosting lane actors")
    ap.add_argument("--trace-heap", action="store_true",
                    help="measure each lane actor's Python heap with tracemalloc (exact, "
                         "but it slows the tier severalfold, crowding its one core)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the processes unpinned (default: the server and Prometheus "
                         "on CPU 0, the lane tier and the engines on CPU 1)")
    ap.add_argument("--colocate", action="store_true",
                    help="a node hosting a replica sends its ranks' lanes through the "
                         "replica's lane actor (no node actor there)")
    ap.add_argument("--out", default=str(HERE / "scale_tier.json"))
    ap.add_argument("--markdown", metavar="JSON", help="print a record's runs as a table")
    # a worker process (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    for k in ("first", "last", "rfirst", "rlast"):
        ap.add_argument(f"--{k}", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())["runs"]))
        return 0
    if args.worker:
        return worker(args)
    threading.current_thread().name = "scale-tier"
    result = run(args)
    path = Path(args.out)
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    path.write_text(json.dumps({"runs": [*runs, result]}, indent=1))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
