"""The server's intake of lane traffic at saturation, today's code beside a baseline's,
in one run: how many requests per second each answers, and what an overloaded one does.

    python bench/intake.py [--baseline REF] [--seconds 20] [--connections 32]

For each server (the checkout, then REF in a git worktree, each started with the CLI as
the tests start it: no Prometheus, Tempo or Grafana; spans relayed to a sink that
answers 200), the load is what lane actors send: LaneCore's own bodies
(bench/scale_lanes.py makes them): the spans of a tick (``POST /v1/traces``) and the
run's lane metrics (a Pushgateway ``POST``) and the actor's own counters (``PUT``),
alternating, on C keep-alive connections, each sending its next request as soon as the
last was answered (closed loop: the answered rate is the server's capacity). The server
runs on CPU 0 and the load on CPU 1 (``taskset``), so the load never takes the server's
core. Measured per server: requests answered 2xx per second, the server's CPU seconds
per second, and, for the checkout, the same with 8 times the connections (overload):
how many were answered 503/429 with Retry-After, and how long ``/healthz`` and the
server's own ``/metrics`` took meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import save  # noqa: E402
from bench.scale_lanes import Conn, lane_bodies  # noqa: E402
from rl_insight.collector.lanes import LANE_JOB  # noqa: E402
from rl_insight.collector.otlp_encode import encode  # noqa: E402
from rl_insight.common import netaddr  # noqa: E402
from rl_insight.wire.events import Identity, Span  # noqa: E402

BASELINE = "6d26dd8"  # the last commit before pooled lanes and the faster intake (#25)
OFF = ["prometheus.enabled=false", "tempo.enabled=false", "grafana.enabled=false",
       "alertmanager.enabled=false"]


class Sink:
    """Tempo's stand-in for the relay: answers 200 to every POST, counts bytes."""

    def __init__(self) -> None:
        sink = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/traces"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def worktree(ref: str) -> Path:
    """The baseline's code, checked out beside this one (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="rli-baseline-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref],
                   check=True, capture_output=True)
    return path


# The baseline's install had neither uvloop nor httptools (uvicorn's fast loop and parser,
# which this checkout requires): its server runs without them, as it did.
WITHOUT_FAST_HTTP = "import sys\nsys.modules['uvloop'] = None\nsys.modules['httptools'] = None\n"


def start_server(code: Path, home: Path, sink: Sink, plain_http: bool = False
                 ) -> tuple[subprocess.Popen, str]:
    port = netaddr.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    path = str(code)
    if plain_http:
        shim = home / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(WITHOUT_FAST_HTTP)
        path = f"{shim}:{code}"
    env.update({"RL_INSIGHT_HOME": str(home), "PYTHONPATH": path})
    args = [sys.executable, "-m", "rl_insight", "server", "start", "--set",
            "host=127.0.0.1", "--set", f"server.port={port}", "--set",
            f"traces.relay_url={sink.url}", *[x for o in OFF for x in ("--set", o)]]
    proc = subprocess.Popen(["taskset", "-c", "0", *args], env=env, cwd=code,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server in {code} did not become ready; see {home}/logs")


@contextmanager
def running_server(code: Path, sink: Sink, plain_http: bool = False):
    """``(url, pid)`` of a server of ``code`` in a home of its own, stopped and its home
    removed afterwards, whatever happened."""
    home = Path(tempfile.mkdtemp(prefix="rli-bench-"))
    proc, url = start_server(code, home, sink, plain_http)
    try:
        yield url, server_pid(home)
    finally:
        subprocess.run([sys.executable, "-m", "rl_insight", "server", "stop"],
                       env={**os.environ, "RL_INSIGHT_HOME": str(home),
                            "PYTHONPATH": str(code)}, cwd=code, capture_output=True)
        proc.kill()
        shutil.rmtree(home, ignore_errors=True)


SPANS_PER_EXPORT = 512  # the engines' BatchSpanProcessor sends at 512 spans


def engine_requests(n: int) -> list[list[tuple[str, str, bytes, str]]]:
    """Per connection, one engine's export of request spans (``llm_request``, its
    ``gen_ai.*`` attributes, as vLLM's exporter sends them: bench/request_spans.py
    builds them), 512 a request: ``--load requests``."""
    from bench.request_spans import Replica

    out = []
    for i in range(n):
        t = time.time_ns()
        batch = [(t - 2 * 10**9, t - k * 10**6, 200 + k, k) for k in range(SPANS_PER_EXPORT)]
        body = Replica(Identity("bench", f"requests-{i % 8}"), i).body(batch)
        out.append([("POST", "/v1/traces", body, "application/x-protobuf")])
    return out


def lane_requests(n: int, route: str = "pushgateway"
                  ) -> list[list[tuple[str, str, bytes, str]]]:
    """Per connection, the requests of one lane actor's tick, its own bodies: its spans,
    and its two groups as Pushgateway pushes or (``route="batch"``) in one batch push."""
    out = []
    for i in range(n):
        ident = Identity("bench", f"intake-{i % 8}")
        b = lane_bodies(ident, i)
        t = time.time_ns()
        spans = encode([(ident, "bench", Span("actor_update", t - 10**9, t, f"rank_{i}",
                                              (("step", 1),), 0, k + 1, 0, True))
                        for k in range(8)])
        own = b["own_text"].format(received=100, sent=100, pending=0).encode()
        if route == "batch":  # as the lane Sender sends them: both groups in one request
            body = json.dumps({"groups": [
                {"job": LANE_JOB, "grouping": b["run_group"], "text": b["run_body"].decode(),
                 "replace": False},
                {"job": LANE_JOB, "grouping": b["own_group"], "text": own.decode(),
                 "replace": True}]}).encode()
            out.append([("POST", "/v1/traces", spans, "application/x-protobuf"),
                        ("POST", "/api/v1/push/batch", body, "application/json")])
            continue
        out.append([("POST", "/v1/traces", spans, "application/x-protobuf"),
                    ("POST", b["run_path"], b["run_body"], "text/plain; version=0.0.4"),
                    ("PUT", b["own_path"], own, "text/plain; version=0.0.4")])
    return out


async def _drive(url: str, reqs, seconds: float, probe: bool, scrape_s: float) -> dict:
    host, port = url.split("//", 1)[1].split(":")
    counts = {"ok": 0, "busy": 0, "other": 0, "timeout": 0}
    stop = time.monotonic() + seconds

    async def one(plan) -> None:
        c = Conn(host, int(port), 30.0)
        i = 0
        while time.monotonic() < stop:
            method, path, body, ctype = plan[i % len(plan)]
            i += 1
            status = await c.request(method, path, body, ctype)
            if 200 <= status < 300:
                counts["ok"] += 1
            elif status in (429, 503):
                counts["busy"] += 1
                await asyncio.sleep(1.0)  # Retry-After, as the lane Sender waits
            elif status == -1:
                counts["timeout"] += 1
            else:
                counts["other"] += 1
        c.close()

    probes: dict[str, list[float]] = {"/healthz": [], "/metrics": []}

    async def probing() -> None:
        c = Conn(host, int(port), 30.0)
        while time.monotonic() < stop:
            for path in probes:
                t0 = time.monotonic()
                await c.request("GET", path, b"", "text/plain")
                probes[path].append(time.monotonic() - t0)
            await asyncio.sleep(0.5)

    scrapes: list[float] = []

    async def scraping() -> None:  # what Prometheus does to the server's /metrics
        c = Conn(host, int(port), 30.0)
        while time.monotonic() < stop:
            t0 = time.monotonic()
            await c.request("GET", "/metrics", b"", "text/plain")
            scrapes.append(time.monotonic() - t0)
            await asyncio.sleep(max(0.0, scrape_s - (time.monotonic() - t0)))

    tasks = [one(plan) for plan in reqs] + ([probing()] if probe else []) + \
        ([scraping()] if scrape_s else [])
    await asyncio.gather(*tasks)
    out = {k: v / seconds for k, v in counts.items()}
    if scrapes:
        out["/metrics scrape max s"] = max(scrapes)
    for path, got in probes.items():
        if got:
            got.sort()
            out[f"{path} max s"] = got[-1]
            out[f"{path} median s"] = got[len(got) // 2]
    return out


def drive(url: str, pid: int, connections: int, lanes: int, seconds: float,
          scrape_s: float, probe: bool = False, route: str = "pushgateway",
          load: str = "lanes") -> dict:
    """Closed loop on ``connections``, each cycling over its share of ``lanes`` lane
    actors' requests (``load="requests"``: engines' request-span exports); the server's
    /metrics read every ``scrape_s``."""
    os.sched_setaffinity(0, {1})  # the load on the other core
    proc = psutil.Process(pid)
    each = engine_requests(lanes) if load == "requests" else lane_requests(lanes, route)
    reqs = [[r for plan in each[c::connections] for r in plan] for c in range(connections)]
    cpu0 = sum(proc.cpu_times()[:2])
    t0 = time.monotonic()
    out = asyncio.run(_drive(url, reqs, seconds, probe, scrape_s))
    out["server CPU s/s"] = (sum(proc.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
    out["server RSS MB"] = proc.memory_info().rss / 2**20
    return out


def server_pid(home: Path) -> int:
    return json.loads((home / "run" / "server.json").read_text())["pid"]


def measure(code: Path, label: str, args, sink: Sink, overload: bool) -> dict:
    # the default baseline predates the intake's own HTTP path: it runs without it
    plain = code != REPO and args.baseline == BASELINE
    with running_server(code, sink, plain_http=plain) as (url, pid):
        # warm-up: imports, and every lane's groups exist before the measurement
        drive(url, pid, args.connections, args.lanes, max(3.0, args.lanes / 200), 0,
              route=args.route, load=args.load)
        row = {"code": label, **drive(url, pid, args.connections, args.lanes, args.seconds,
                                      args.scrape_interval, route=args.route,
                                      load=args.load)}
        if args.load == "requests":
            row["request spans/s"] = row["ok"] * SPANS_PER_EXPORT
        print(json.dumps(row), flush=True)
        rows = [row]
        if overload and args.load == "lanes":
            over = {"code": label + ", 8x connections",
                    **drive(url, pid, args.connections * 8, args.lanes, args.seconds,
                            args.scrape_interval, probe=True, route=args.route)}
            print(json.dumps(over), flush=True)
            rows.append(over)
        return {"rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=BASELINE, help="git ref of the code to compare")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--lanes", type=int, default=1000,
                    help="distinct lane actors (each its run group and own group)")
    ap.add_argument("--scrape-interval", type=float, default=5.0,
                    help="how often the server's /metrics is read (0: never)")
    ap.add_argument("--route", choices=["pushgateway", "batch"], default="pushgateway",
                    help="the lanes' groups as Pushgateway pushes, or in one batch push a "
                         "tick (the lane Sender's path; the baseline must have the route)")
    ap.add_argument("--load", choices=["lanes", "requests"], default="lanes",
                    help="lane actors' ticks, or engines' request-span exports (512 "
                         "llm_request spans each, one engine a connection)")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        print("bench/intake.py needs taskset (util-linux)", file=sys.stderr)
        return 2
    sink = Sink()
    base = worktree(args.baseline)
    try:
        rows = measure(REPO, "checkout", args, sink, overload=True)["rows"]
        rows += measure(base, f"baseline {args.baseline}", args, sink, overload=False)["rows"]
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                       capture_output=True)
    ratio = rows[0]["ok"] / rows[-1]["ok"] if rows[-1]["ok"] else float("inf")
    print(f"\nrequests answered per second: checkout {rows[0]['ok']:.0f}, baseline "
          f"{rows[-1]['ok']:.0f}: {ratio:.1f} times")
    name = f"intake_{args.lanes}_lanes" + ("_batch" if args.route == "batch" else "")
    if args.load == "requests":
        name = f"intake_request_spans_{args.lanes}_engines"
    path = save(name, {"args": vars(args), "rows": rows, "ratio": ratio})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
