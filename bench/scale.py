"""Measured scale: many engine endpoints and trainer-rank lanes against one server and
its managed Prometheus, on this machine, at several sizes.

    python bench/scale.py [--sizes 250,500,1000] [--lanes-per-endpoint 4]
                          [--lane-sizes 50,100,200,400] [--lane-tick 1] [--quick]
    make bench-scale      # the same, in a private network namespace

Per size N: the server starts with the CLI, as the tests start it (Prometheus 5 s
scrape interval, alerting rules on; Tempo, Grafana and Alertmanager off, spans relayed
to a counting OTLP sink); N simulated vLLM endpoints (bench/scale_engines.py, 250 per
process, each on its own loopback port, ~420 series each) are registered through
``POST /api/v1/prometheus/targets``, one call per replica as verl's
``register_rollout_replicas`` targets arrive; then

1. registration: latency per call (p50, p99), and the time until Prometheus scrapes
   every endpoint (``count(up{job="vllm"} == 1) == N``);
2. scrape only (``--scrape-seconds``): CPU (seconds per wall second) and RSS of the
   server and Prometheus, Prometheus' head series, the engine targets'
   ``scrape_duration_seconds`` (p50, p99 over every sample of every target in the
   phase) and Prometheus' ``prometheus_target_interval_length_seconds``;
3. with lanes (``--lanes-per-endpoint`` x N ``rank_<r>`` lanes, bench/scale_lanes.py:
   what that many dedicated lane actors send, one state span per lane per
   ``--span-interval``): the same figures again, plus span intake offered and achieved,
   latency of span requests and of lane pushes, the lane cycle, and the server's own
   scrape (its /metrics carries every pushed lane group).

The lane actors themselves are not run: a dedicated lane actor is a Ray worker process
of ~90 MB (docs/performance.md), 4,000 of them are ~350 GB. What the server carries
from them is their requests, and those are sent as they would send them.

Load goes to loopback only, is bounded in count and time, and stops by itself. Prints
one table (a column per size) and writes bench/scale.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
import requests  # noqa: E402

from bench.common import save  # noqa: E402
from tests.conftest import Cli, free_port_overrides  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "scale.json"
PROJECT, EXPERIMENT = "bench-scale", "scale"


class Sink:
    """The trace relay's destination: reads each OTLP request, counts it, answers 200
    with an empty ExportTraceServiceResponse (Tempo's place, at almost no cost)."""

    def __init__(self) -> None:
        import http.server

        sink = self
        self.requests = 0
        self.bytes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("content-length", 0))
                self.rfile.read(n)
                sink.requests += 1
                sink.bytes += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/traces"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Procs:
    """CPU seconds and peak RSS of named processes, sampled in the background."""

    def __init__(self) -> None:
        self.procs: dict[str, list[psutil.Process]] = {}
        self.peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._sample, daemon=True).start()

    def add(self, name: str, pid: int) -> None:
        with self._lock:
            self.procs.setdefault(name, []).append(psutil.Process(pid))

    def drop(self, name: str) -> None:
        with self._lock:
            self.procs.pop(name, None)

    def cpu(self) -> dict[str, float]:
        out = {}
        with self._lock:
            for name, ps in self.procs.items():
                total = 0.0
                for p in ps:
                    try:
                        t = p.cpu_times()
                        total += t.user + t.system
                    except psutil.Error:
                        pass
                out[name] = total
        return out

    def rss(self) -> dict[str, float]:
        out = {}
        with self._lock:
            for name, ps in self.procs.items():
                total = 0
                for p in ps:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                out[name] = total / 2**20
        return out

    def reset_peak(self) -> None:
        with self._lock:
            self.peak = {}

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            for name, mb in self.rss().items():
                with self._lock:
                    self.peak[name] = max(self.peak.get(name, 0.0), mb)

    def stop(self) -> None:
        self._stop.set()


class Phase:
    """CPU per wall second of every watched process between start and end."""

    def __init__(self, procs: Procs) -> None:
        self.procs = procs
        procs.reset_peak()
        self.t0, self.c0, self.m0 = time.time(), procs.cpu(), machine_busy()

    def end(self) -> dict:
        t1, c1, m1 = time.time(), self.procs.cpu(), machine_busy()
        wall = t1 - self.t0
        cpu = {k: (c1[k] - self.c0.get(k, 0.0)) / wall for k in c1}
        busy = (m1 - self.m0) / wall
        return {"start": self.t0, "end": t1, "wall_s": wall, "cpu_per_s": cpu,
                "machine_busy_cpu_per_s": busy,
                "others_cpu_per_s": max(busy - sum(cpu.values()), 0.0),
                "rss_peak_mb": dict(self.procs.peak), "rss_end_mb": self.procs.rss()}


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every process, ours or not)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def prom_query(prom: str, query: str, at: float | None = None) -> list[dict]:
    params = {"query": query}
    if at is not None:
        params["time"] = f"{at:.3f}"
    try:
        r = requests.get(prom + "/api/v1/query", params=params, timeout=60)
        return r.json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return []


def prom_value(prom: str, query: str, at: float | None = None) -> float | None:
    got = prom_query(prom, query, at)
    try:
        return float(got[0]["value"][1])
    except (IndexError, KeyError, ValueError):
        return None


def samples(prom: str, selector: str, start: float, end: float) -> list[float]:
    """Every raw sample of the selector's series between start and end."""
    window = max(int(end - start), 1)
    got = prom_query(prom, f"{selector}[{window}s]", at=end)
    return [float(v) for s in got for _, v in s.get("values", [])]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(int(len(s) * q), len(s) - 1)]


def prom_figures(prom: str, start: float, end: float) -> dict:
    vllm = samples(prom, 'scrape_duration_seconds{job="vllm"}', start, end)
    server = samples(prom, 'scrape_duration_seconds{job="rl_insight_server"}', start, end)
    up_server = samples(prom, 'up{job="rl_insight_server"}', start, end)
    out = {
        "head_series": prom_value(prom, "prometheus_tsdb_head_series", end),
        "engine_scrape_s_p50": pct(vllm, 0.5), "engine_scrape_s_p99": pct(vllm, 0.99),
        "engine_scrapes": len(vllm),
        "engines_up": prom_value(prom, 'count(up{job="vllm"} == 1)', end),
        "server_scrape_s_p50": pct(server, 0.5), "server_scrape_s_max": max(server,
                                                                            default=None),
        "server_scrape_up_share": (sum(up_server) / len(up_server)) if up_server else None,
        "server_scrape_samples": prom_value(
            prom, 'scrape_samples_scraped{job="rl_insight_server"}', end),
        "samples_appended_per_s": prom_value(
            prom, f"rate(prometheus_tsdb_head_samples_appended_total[{int(end - start)}s])",
            end),
    }
    for q in ("0.5", "0.99"):
        out[f"interval_length_s_q{q}"] = prom_value(
            prom, f'max(prometheus_target_interval_length_seconds{{quantile="{q}"}})', end)
    return out


class VictoriaMetrics:
    """Debian's victoria-metrics 1.79 on a free loopback port: a remote-write receiver
    on this machine, standing in for Mimir, Thanos or a VictoriaMetrics cluster."""

    def __init__(self, data: Path) -> None:
        from rl_insight.common import netaddr

        port = netaddr.free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            ["victoria-metrics", f"-httpListenAddr=127.0.0.1:{port}",
             f"-storageDataPath={data}", "-retentionPeriod=1d", "-loggerLevel=WARN"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.time() + 30
        while time.time() < end:
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError("victoria-metrics did not answer /health")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def remote_write_figures(prom: str, start: float, end: float) -> dict:
    """What the managed Prometheus sent on (Prometheus 2.42's remote storage metrics)."""
    w = f"{max(int(end - start), 1)}s"
    return {
        "samples_sent_per_s": prom_value(
            prom, f"sum(rate(prometheus_remote_storage_samples_total[{w}]))", end),
        "samples_failed": prom_value(
            prom, f"sum(increase(prometheus_remote_storage_samples_failed_total[{w}]))", end),
        "lag_s": prom_value(
            prom, "max(prometheus_remote_storage_highest_timestamp_in_seconds) - "
                  "min(prometheus_remote_storage_queue_highest_sent_timestamp_seconds)", end),
        "shards": prom_value(prom, "max(prometheus_remote_storage_shards)", end),
    }


def start_engines(n: int, per_proc: int, seconds: float, procs: Procs
                  ) -> tuple[list[subprocess.Popen], list[int], dict]:
    """n endpoints in ceil(n / per_proc) processes; their ports, once all listen."""
    sizes = [min(per_proc, n - i) for i in range(0, n, per_proc)]
    ps = [subprocess.Popen([sys.executable, str(HERE / "scale_engines.py"), "--count",
                            str(k), "--seconds", str(seconds), "--seed", str(i)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           cwd=REPO) for i, k in enumerate(sizes)]
    ports, info = [], {}
    for p in ps:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("an engine process ended before it listened")
        info = json.loads(line)
        ports += info["ports"]
        procs.add("engines", info["pid"])
    return ps, ports, info


def register(url: str, ports: list[int]) -> dict:
    """One registration per replica, as its address becomes known."""
    s = requests.Session()
    lat = []
    t_first = time.time()
    for i, port in enumerate(ports):
        body = {"job_name": "vllm", "targets": [f"127.0.0.1:{port}"],
                "labels": [{"replica": str(i)}], "project": PROJECT,
                "experiment_name": EXPERIMENT}
        t = time.perf_counter()
        r = s.post(url + "/api/v1/prometheus/targets", json=body, timeout=60)
        lat.append(time.perf_counter() - t)
        r.raise_for_status()
    return {"calls": len(lat), "first": t_first, "last": time.time(),
            "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "max_ms": max(lat) * 1e3, "total_s": sum(lat),
            "first_100_p50_ms": pct(lat[:100], 0.5) * 1e3,
            "last_100_p50_ms": pct(lat[-100:], 0.5) * 1e3}


COUNTERS = re.compile(r'^(rl_insight_http_requests_total|rl_insight_spans_received_total|'
                      r'rl_insight_push_groups|rl_insight_push_series|rl_insight_spool_spans)'
                      r'(\{.*\})? (\S+)$', re.M)


def server_counters(url: str) -> dict:
    """The server's own counters, read from its /metrics directly (when Prometheus'
    scrape of it times out, this is the only account of what it took)."""
    t = time.time()
    try:
        r = requests.get(url + "/metrics", timeout=300)
    except requests.RequestException as exc:
        return {"error": exc.__class__.__name__}
    out: dict = {"at": time.time(), "fetch_s": time.time() - t, "bytes": len(r.content),
                 "requests": {}}
    for name, labels, value in COUNTERS.findall(r.text):
        if name == "rl_insight_http_requests_total":
            lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            key = f"{lab.get('method')} {lab.get('route')} {lab.get('code')}"
            out["requests"][key] = out["requests"].get(key, 0.0) + float(value)
        else:
            out[name] = float(value)
    return out


def counter_rates(c0: dict, c1: dict) -> dict:
    """Per second between two server_counters readings: requests by route and code."""
    if "at" not in c0 or "at" not in c1:
        return {}
    dt = c1["at"] - c0["at"]
    out = {k: (v - c0["requests"].get(k, 0.0)) / dt for k, v in c1["requests"].items()
           if v - c0["requests"].get(k, 0.0) > 0}
    out["spans_received"] = (c1.get("rl_insight_spans_received_total", 0.0) -
                             c0.get("rl_insight_spans_received_total", 0.0)) / dt
    return out


def request_costs(url: str, pid: int, n: int = 200) -> dict:
    """The server's CPU and the latency of one request of each kind a lane actor sends,
    one at a time on one keep-alive connection, the server otherwise idle; the groups
    pushed are deleted again, so the load that follows starts from nothing."""
    from bench.scale_lanes import INTERVAL, lane_bodies
    from rl_insight.collector.otlp_encode import encode
    from rl_insight.wire.events import Identity, Span

    ident = Identity("bench-cost", "cost")
    bodies = [lane_bodies(ident, r) for r in range(n)]
    proc = psutil.Process(pid)
    s = requests.Session()
    text = {"Content-Type": "text/plain; version=0.0.4"}

    def one(kind: str, b: dict) -> requests.Response:
        if kind == "healthz":
            return s.get(url + "/healthz")
        if kind == "own_metrics":
            return s.put(url + b["own_path"], headers=text, data=b["own_text"].format(
                received=1, sent=1, pending=0).encode())
        if kind == "lane_metrics":
            return s.post(url + b["run_path"], data=b["run_body"], headers=text)
        now = time.time_ns()
        return s.post(url + "/v1/traces", headers={"Content-Type": "application/x-protobuf"},
                      data=encode([(ident, "cost", Span("actor_update", now - 10**9, now,
                                                        "rank_0", (("step", 1),) + INTERVAL,
                                                        0, 0, 0, True))]))

    out = {}
    for kind in ("healthz", "own_metrics", "lane_metrics", "spans"):
        lat = []
        t = proc.cpu_times()
        c0 = t.user + t.system
        for b in bodies:
            t0 = time.perf_counter()
            r = one(kind, b)
            lat.append(time.perf_counter() - t0)
            r.raise_for_status()
        t = proc.cpu_times()
        out[kind] = {"server_cpu_ms": (t.user + t.system - c0) / n * 1e3,
                     "p50_ms": pct(lat, 0.5) * 1e3}
    for b in bodies:
        s.delete(url + b["run_path"])
        s.delete(url + b["own_path"])
    return out


def http_sd(url: str) -> dict:
    """What one poll of GET /api/v1/prometheus/sd costs (a Prometheus of one's own, or
    each shard, polls it once per refresh_interval)."""
    s = requests.Session()
    lat, size, groups = [], 0, 0
    for _ in range(10):
        t = time.perf_counter()
        r = s.get(url + "/api/v1/prometheus/sd", timeout=60)
        lat.append(time.perf_counter() - t)
        if r.status_code != 200:
            return {"status": r.status_code}
        size, groups = len(r.content), len(r.json())
    return {"p50_ms": pct(lat, 0.5) * 1e3, "bytes": size, "groups": groups}


def wait_all_up(prom: str, n: int, timeout: float) -> float | None:
    end = time.time() + timeout
    while time.time() < end:
        v = prom_value(prom, 'count(up{job="vllm"} == 1)')
        if v is not None and v >= n:
            return time.time()
        time.sleep(0.5)
    return None


def sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 1.0))


def run_size(n: int, lanes: int, steady: float, args, tick: float,
             remote_write: bool = False) -> dict:
    print(f"\n== {n} endpoints, {lanes} lanes" + (f" ticking every {tick:g} s" if lanes else "")
          + (", remote write to a local VictoriaMetrics" if remote_write else ""), flush=True)
    home = Path(tempfile.mkdtemp(prefix="rl-insight-scale-"))
    sink = Sink()
    procs = Procs()
    cli = Cli(home, free_port_overrides())
    engines: list[subprocess.Popen] = []
    vm = None
    out: dict = {"endpoints": n, "lanes": lanes, "lane_tick_s": tick,
                 "remote_write": remote_write,
                 "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    budget = args.scrape_seconds + args.warmup + steady + 600
    try:
        extra = []
        if remote_write:
            vm = VictoriaMetrics(home / "vm")
            procs.add("victoria_metrics", vm.proc.pid)
            extra.append(f"prometheus.remote_write_urls={vm.url}/api/v1/write")
        t = time.time()
        url = cli.start(f"prometheus.scrape_interval={args.scrape_interval}",
                        "tempo.enabled=false", "grafana.enabled=false",
                        "alertmanager.enabled=false", f"traces.relay_url={sink.url}",
                        *extra)
        out["server_start_s"] = time.time() - t
        prom = cli.prometheus
        pid = requests.get(url + "/api/v1/services", timeout=10).json()["server"]["pid"]
        procs.add("server", pid)
        for child in psutil.Process(pid).children():
            if "prometheus" in child.name():
                procs.add("prometheus", child.pid)
        if n:
            engines, ports, info = start_engines(n, args.endpoints_per_process, budget,
                                                 procs)
            out["series_per_endpoint"] = info["series"]
            out["bytes_per_scrape"] = info["bytes"]
            out["engine_processes"] = len(engines)
            print(f"   {len(engines)} engine processes, {info['series']} series and "
                  f"{info['bytes']:,} bytes per endpoint; registering", flush=True)
            reg = register(url, ports)
            up = wait_all_up(prom, n, 300)
            reg["all_up_after_first_s"] = (up - reg["first"]) if up else None
            reg["all_up_after_last_s"] = (up - reg["last"]) if up else None
            out["registration"] = reg
            out["http_sd"] = http_sd(url)
            print(f"   registered: p50 {reg['p50_ms']:.1f} ms, p99 {reg['p99_ms']:.1f} ms; "
                  f"all up {reg['all_up_after_first_s']} s after the first", flush=True)

            # scrape only
            time.sleep(2 * float(args.scrape_interval.rstrip("s")))  # a steady rhythm
            ph = Phase(procs)
            time.sleep(args.scrape_seconds)
            a = ph.end()
            a["prometheus"] = prom_figures(prom, a["start"], a["end"])
            if remote_write:
                a["remote_write"] = remote_write_figures(prom, a["start"], a["end"])
            out["scrape_only"] = a
            print(f"   scrape only: server {a['cpu_per_s'].get('server', 0):.2f} CPU/s, "
                  f"Prometheus {a['cpu_per_s'].get('prometheus', 0):.2f} CPU/s, head "
                  f"series {a['prometheus']['head_series']}", flush=True)

        if not lanes:
            return out
        if not n and args.request_costs:
            out["request_costs"] = request_costs(url, pid)
        # with lanes
        gen = subprocess.Popen([sys.executable, str(HERE / "scale_lanes.py"), "--url", url,
                                "--lanes", str(lanes), "--span-interval",
                                str(args.span_interval), "--tick", str(tick),
                                "--warmup", str(args.warmup),
                                "--seconds", str(steady), "--project", PROJECT,
                                "--experiment", EXPERIMENT],
                               stdout=subprocess.PIPE, text=True, cwd=REPO)
        procs.add("lane_load", gen.pid)
        counters0 = server_counters(url)
        started = json.loads(gen.stdout.readline())
        sleep_until(started["steady_start"])
        ph = Phase(procs)
        sleep_until(started["steady_end"])
        b = ph.end()
        received0 = prom_value(prom, "rl_insight_spans_received_total", b["start"])
        received1 = prom_value(prom, "rl_insight_spans_received_total", b["end"])
        relayed0 = prom_value(prom, "rl_insight_spans_relayed_total", b["start"])
        relayed1 = prom_value(prom, "rl_insight_spans_relayed_total", b["end"])
        counters1 = server_counters(url)
        b["server_counters_end"] = counters1
        b["server_rates"] = counter_rates(counters0, counters1)
        b["prometheus"] = prom_figures(prom, b["start"], b["end"])
        b["prometheus"]["lane_series"] = prom_value(
            prom, 'count({job="rl_insight_lanes"})', b["end"])
        if None not in (received0, received1):
            b["server_spans_received_per_s"] = (received1 - received0) / b["wall_s"]
        if None not in (relayed0, relayed1):
            b["server_spans_relayed_per_s"] = (relayed1 - relayed0) / b["wall_s"]
        try:
            done, _ = gen.communicate(timeout=120)
            b["lanes"] = json.loads(done.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            gen.kill()
            gen.wait()
            b["lanes"] = None
        procs.drop("lane_load")
        out["with_lanes"] = b
        ln = b["lanes"] or {}
        print(f"   with lanes: server {b['cpu_per_s'].get('server', 0):.2f} CPU/s, "
              f"spans {ln.get('spans_accepted_per_s', 0):,.0f}/s of "
              f"{ln.get('spans_offered_per_s', 0):,.0f}/s offered", flush=True)
        out["sink"] = {"requests": sink.requests, "bytes": sink.bytes}
    finally:
        for p in engines:
            try:
                p.stdin.close()
            except OSError:
                pass
        r = cli.run("server", "stop", timeout=120)
        if r.returncode != 0:
            print(r.stdout + r.stderr, file=sys.stderr)
        for pid in cli.ours():  # interrupted mid-start: no run file to stop it by yet
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
        if vm is not None:
            vm.stop()
        shutil.rmtree(home, ignore_errors=True)
    return out


def fmt(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"


def rows(results: list[dict]) -> list[tuple[str, list]]:
    def g(r: dict, *path):
        for p in path:
            if not isinstance(r, dict):
                return None
            r = r.get(p)
        return r

    def both(label, *path):
        return [(f"{label}, scrape only", [g(r, "scrape_only", *path) for r in results]),
                (f"{label}, with lanes", [g(r, "with_lanes", *path) for r in results])]

    out = [
        ("endpoints (replicas)", [r["endpoints"] for r in results]),
        ("series per endpoint", [r.get("series_per_endpoint") for r in results]),
        ("rank lanes", [r["lanes"] for r in results]),
        ("lane tick, s (client.lane_flush_interval_s)", [r.get("lane_tick_s")
                                                         for r in results]),
        ("registration p50, ms", [g(r, "registration", "p50_ms") for r in results]),
        ("registration p99, ms", [g(r, "registration", "p99_ms") for r in results]),
        ("registration of the last 100, p50 ms",
         [g(r, "registration", "last_100_p50_ms") for r in results]),
        ("all endpoints up, s after the first registration",
         [g(r, "registration", "all_up_after_first_s") for r in results]),
        ("all endpoints up, s after the last registration",
         [g(r, "registration", "all_up_after_last_s") for r in results]),
        ("GET /api/v1/prometheus/sd p50, ms", [g(r, "http_sd", "p50_ms") for r in results]),
        *both("Prometheus head series", "prometheus", "head_series"),
        *both("samples appended/s", "prometheus", "samples_appended_per_s"),
        *both("engine scrape p50, s", "prometheus", "engine_scrape_s_p50"),
        *both("engine scrape p99, s", "prometheus", "engine_scrape_s_p99"),
        *both("target interval q0.99, s (5 s set)", "prometheus",
              "interval_length_s_q0.99"),
        *both("server CPU, s per s", "cpu_per_s", "server"),
        *both("server RSS peak, MB", "rss_peak_mb", "server"),
        *both("Prometheus CPU, s per s", "cpu_per_s", "prometheus"),
        *both("Prometheus RSS peak, MB", "rss_peak_mb", "prometheus"),
        *both("engine processes CPU, s per s", "cpu_per_s", "engines"),
        ("remote write: samples sent/s", [g(r, "scrape_only", "remote_write",
                                            "samples_sent_per_s") for r in results]),
        ("remote write: lag, s", [g(r, "scrape_only", "remote_write", "lag_s")
                                  for r in results]),
        ("remote write: VictoriaMetrics CPU, s per s",
         [g(r, "scrape_only", "cpu_per_s", "victoria_metrics") for r in results]),
        ("remote write: VictoriaMetrics RSS peak, MB",
         [g(r, "scrape_only", "rss_peak_mb", "victoria_metrics") for r in results]),
        *both("machine CPU busy, s per s (of 2)", "machine_busy_cpu_per_s"),
        *both("other processes' CPU, s per s", "others_cpu_per_s"),
        ("lane load generator CPU, s per s",
         [g(r, "with_lanes", "cpu_per_s", "lane_load") for r in results]),
        *[(f"server CPU per {k} request alone, ms", [g(r, "request_costs", k, "server_cpu_ms")
                                                      for r in results])
          for k in ("healthz", "own_metrics", "lane_metrics", "spans")],
        ("lane series in Prometheus", [g(r, "with_lanes", "prometheus", "lane_series")
                                       for r in results]),
        ("server scrape samples (its /metrics)",
         [g(r, "with_lanes", "prometheus", "server_scrape_samples") for r in results]),
        ("server scrape p50, s", [g(r, "with_lanes", "prometheus", "server_scrape_s_p50")
                                  for r in results]),
        ("server scrape max, s", [g(r, "with_lanes", "prometheus", "server_scrape_s_max")
                                  for r in results]),
        ("server scrape up share", [g(r, "with_lanes", "prometheus",
                                      "server_scrape_up_share") for r in results]),
        ("spans offered/s", [g(r, "with_lanes", "lanes", "spans_offered_per_s")
                             for r in results]),
        ("spans accepted/s (200)", [g(r, "with_lanes", "lanes", "spans_accepted_per_s")
                                    for r in results]),
        ("spans the server took/s (its counter, warmup and steady)",
         [g(r, "with_lanes", "server_rates", "spans_received") for r in results]),
        ("requests the server answered/s (its counter)",
         [None if not g(r, "with_lanes", "server_rates") else sum(
             v for k, v in r["with_lanes"]["server_rates"].items() if k != "spans_received")
          for r in results]),
        ("server /metrics at the end: MB", [
            None if g(r, "with_lanes", "server_counters_end", "bytes") is None else
            r["with_lanes"]["server_counters_end"]["bytes"] / 1e6 for r in results]),
        ("server /metrics at the end: s to read",
         [g(r, "with_lanes", "server_counters_end", "fetch_s") for r in results]),
        ("spans relayed/s (server counter)", [g(r, "with_lanes", "server_spans_relayed_per_s")
                                              for r in results]),
        ("lane requests nominal/s (3 per lane per tick)",
         [g(r, "with_lanes", "lanes", "requests_nominal_per_s") for r in results]),
        ("lane requests answered 200/s",
         [g(r, "with_lanes", "lanes", "requests_ok_per_s") for r in results]),
        ("span request p50, ms", [g(r, "with_lanes", "lanes", "kinds", "spans", "p50_ms")
                                  for r in results]),
        ("span request p99, ms", [g(r, "with_lanes", "lanes", "kinds", "spans", "p99_ms")
                                  for r in results]),
        ("lane metrics push p50, ms", [g(r, "with_lanes", "lanes", "kinds", "lane_metrics",
                                         "p50_ms") for r in results]),
        ("lane metrics push p99, ms", [g(r, "with_lanes", "lanes", "kinds", "lane_metrics",
                                         "p99_ms") for r in results]),
        ("own metrics push p99, ms", [g(r, "with_lanes", "lanes", "kinds", "own_metrics",
                                        "p99_ms") for r in results]),
        ("lane cycle p50, s (the tick + its requests)",
         [g(r, "with_lanes", "lanes", "cycle_s_p50") for r in results]),
        ("lane cycle p99, s", [g(r, "with_lanes", "lanes", "cycle_s_p99") for r in results]),
        ("requests timed out (5 s) or failed", [
            None if g(r, "with_lanes", "lanes", "kinds") is None else sum(
                n for k in g(r, "with_lanes", "lanes", "kinds").values()
                for c, n in k["codes"].items() if c != "200") for r in results]),
        ("spans pending in lanes at the end",
         [g(r, "with_lanes", "lanes", "spans_pending_at_end") for r in results]),
    ]
    return out


def table(results: list[dict]) -> str:
    body = rows(results)
    width = max(len(name) for name, _ in body)
    lines = [f"{'what':<{width}} " + " ".join(
        f"{r['endpoints']:>5,}/{r['lanes']:,}@{r.get('lane_tick_s', 1):g}".rjust(12)
        for r in results)]
    for name, values in body:
        lines.append(f"{name:<{width}} " + " ".join(f"{fmt(v):>12}" for v in values))
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    """The table in Markdown (docs/scaling.md): the runs with endpoints, then the runs
    with lanes alone; rows with nothing measured in a table's runs are left out."""
    out = []
    for title, runs in (("Runs with endpoints", [r for r in results if r["endpoints"]]),
                        ("Runs with lanes alone", [r for r in results
                                                   if not r["endpoints"]])):
        if not runs:
            continue
        head = [f"{r['endpoints']:,} / {r['lanes']:,}"
                + (f" @{r.get('lane_tick_s', 1):g} s" if r["lanes"] else "")
                + (" RW" if r.get("remote_write") else "") for r in runs]
        out += [f"{title} (endpoints / lanes @ lane tick; RW: remote write)", "",
                "| what | " + " | ".join(head) + " |", "| --- |" + " ---: |" * len(runs)]
        for name, values in rows(runs):
            if any(v is not None for v in values) and name not in (
                    "endpoints (replicas)", "rank lanes"):
                out.append(f"| {name} | " + " | ".join(fmt(v) for v in values) + " |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250,500,1000", help="endpoints per run")
    ap.add_argument("--lanes-per-endpoint", type=int, default=4)
    ap.add_argument("--lane-sizes", default="50,100,200,400,700,100@4,200@4,400@4",
                    help="then runs with lanes only (no endpoints); L@T: L lanes ticking "
                         "every T s (client.lane_flush_interval_s) instead of --lane-tick")
    ap.add_argument("--endpoints-per-process", type=int, default=250)
    ap.add_argument("--scrape-interval", default="5s")
    ap.add_argument("--scrape-seconds", type=float, default=60.0,
                    help="the scrape-only phase")
    ap.add_argument("--warmup", type=float, default=20.0, help="lanes before measuring")
    ap.add_argument("--steady", type=float, default=120.0, help="the phase with lanes")
    ap.add_argument("--remote-write-sizes", default="1000",
                    help="then runs with endpoints only, remote writing to a local "
                         "VictoriaMetrics")
    ap.add_argument("--no-request-costs", dest="request_costs", action="store_false",
                    help="skip the one-request-at-a-time cost of each kind before the "
                         "lanes-only runs")
    ap.add_argument("--lane-steady", type=float, default=45.0,
                    help="the measured phase of the lanes-only runs")
    ap.add_argument("--span-interval", type=float, default=1.0)
    ap.add_argument("--lane-tick", type=float, default=1.0,
                    help="the lane actors' client.lane_flush_interval_s (default 1 s)")
    ap.add_argument("--quick", action="store_true",
                    help="50 endpoints with 200 lanes, then 50 lanes alone; short phases")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--markdown", metavar="JSON",
                    help="print the table of an earlier run (bench/scale.json) in Markdown; "
                         "runs nothing")
    args = ap.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())["sizes"]))
        return 0
    if args.quick:
        args.sizes, args.scrape_seconds, args.warmup, args.steady = "50", 15.0, 10.0, 20.0
        args.lane_sizes, args.lane_steady, args.remote_write_sizes = "50", 15.0, "50"
    runs = [(int(x), int(x) * args.lanes_per_endpoint, args.steady)
            for x in args.sizes.split(",") if x]
    runs += [(0, x, args.lane_steady) for x in args.lane_sizes.split(",") if x]
    runs += [(int(x), "0@rw", 0.0) for x in args.remote_write_sizes.split(",") if x]
    os.environ.pop("RL_INSIGHT_SERVER_URL", None)
    # a plain kill stops cleanly too: the server, its Prometheus and the engines
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    for n, lanes, steady in runs:
        lanes, _, tick = str(lanes).partition("@")
        rw = tick == "rw"
        tick = args.lane_tick if rw or not tick else float(tick)
        results.append(run_size(n, int(lanes), steady, args, tick, remote_write=rw))
        Path(args.out).write_text(json.dumps(record(args, results), indent=2))
    print("\n" + table(results))
    save("scale", record(args, results))
    print(f"\nwritten: {args.out}")
    return 0


def record(args, results: list[dict]) -> dict:
    import platform

    return {"machine": {"cpus": os.cpu_count(),
                        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                        "python": platform.python_version(),
                        "platform": platform.platform()},
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["python", "bench/scale.py", *sys.argv[1:]]),
            "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "sizes": results}


if __name__ == "__main__":
    sys.exit(main())
