"""What many dedicated trainer-rank lane actors send the server, for bench/scale.py.

    python bench/scale_lanes.py --url http://127.0.0.1:PORT --lanes 4000 \\
        [--span-interval 1] [--warmup 20] [--seconds 120]

One coroutine per ``rank_<r>`` lane stands in for that lane's actor and sends what
rl_insight/collector/lanes.py's ``LaneCore.tick`` sends, in the same order and on the
same clock (``Periodic``: wait ``client.lane_flush_interval_s``, then tick): the spans
pending (``POST /v1/traces``, OTLP protobuf from ``otlp_encode.encode``, up to
``4 x client.lane_batch_size`` per request, sent until none are left or one fails), the
run's lane metrics when they changed (``POST /metrics/job@base64/rl_insight_lanes/
project.../experiment_name.../lane_actor...``), then the actor's own counters (``PUT
.../lane_actor...``), each on the actor's own keep-alive connection with the lane
Sender's 5 s timeout. A failed request keeps its data for the next tick, as the actor
does. The bodies are LaneCore's own: each lane's core is driven through a PPO step's
trainer states (examples/simulate_rl.py's names) with a recording sender, once, before
the load starts; the span sent each tick is encoded fresh (new ids and times).

The rank itself finishes one state per ``--span-interval`` seconds (a ``trace_state``
block: one span). Offered is what the ranks produce; achieved is what the server
answered 200 to. Prints one JSON line when the load starts (``{"event": "started",
"steady_start": ..., "steady_end": ...}``, unix seconds) and one with the results when
it ends, by itself, after ``--warmup`` + ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rl_insight.collector.lanes import LANE_JOB, LaneCore  # noqa: E402
from rl_insight.collector.otlp_encode import encode  # noqa: E402
from rl_insight.collector.push import group_path  # noqa: E402
from rl_insight.config import ClientSettings  # noqa: E402
from rl_insight.ray.actors import LANE_PREFIX  # noqa: E402
from rl_insight.wire.events import Identity, Span, StateChange  # noqa: E402

STATES = ("switch_to_trainer", "actor_compute_log_prob", "ref_compute_log_prob",
          "actor_update", "switch_to_rollout")
INTERVAL = (("monitor.trace_segment", "state_interval"),)
KINDS = ("spans", "lane_metrics", "own_metrics")
CLIENT = ClientSettings()


class Recorder:
    """The sender LaneCore is given while its bodies are made: keeps, sends nothing."""

    def __init__(self) -> None:
        self.on_server_restart: list = []
        self.pushes: list[tuple[dict, str, bool]] = []

    def spans(self, payload: bytes) -> bool:
        return True

    def push(self, job: str, grouping: dict, text: str, replace: bool = False) -> bool:
        self.pushes.append((grouping, text, replace))
        return True

    def push_groups(self, groups) -> list[bool]:
        return [self.push(*g) for g in groups]


def lane_bodies(ident: Identity, rank: int) -> dict:
    """LaneCore's own pushes for one rank lane after a step through every state."""
    rec = Recorder()
    name = f"{LANE_PREFIX}rank_{rank}"
    core = LaneCore(rec, name, CLIENT.lane_max_pending_spans, CLIENT.lane_batch_size)
    t = time.time_ns()
    for i, state in enumerate(STATES):
        start, end = t + i * 10**9, t + (i + 1) * 10**9
        core.ingest(ident, "bench", [StateChange(f"rank_{rank}", state, start, True, i + 1)])
        core.ingest(ident, "bench", [Span(state, start, end, f"rank_{rank}",
                                          (("step", 1),) + INTERVAL, 0, i + 1, 0, True)])
    core.tick()
    (run_group, run_text, _), (own_group, own_text, _) = rec.pushes
    return {"name": name, "run_group": run_group, "own_group": own_group,
            "run_path": group_path(LANE_JOB, run_group), "run_body": run_text.encode(),
            "own_path": group_path(LANE_JOB, own_group), "own_text": own_template(own_text),
            "series": sum(1 for line in (run_text + own_text).splitlines()
                          if line and not line.startswith("#"))}


def own_template(text: str) -> str:
    """The actor's own counters with their values as format fields."""
    text = text.replace("{", "{{").replace("}", "}}")
    for name, field in (("rl_insight_lane_spans_received_total", "received"),
                        ("rl_insight_lane_spans_sent_total", "sent"),
                        ("rl_insight_lane_spans_pending", "pending")):
        text = re.sub(rf"^{name} \S+$", f"{name} {{{field}}}", text, flags=re.M)
    return text


class Conn:
    """One keep-alive HTTP/1.1 connection, as the lane's requests.Session keeps."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes, ctype: str) -> int:
        try:
            return await asyncio.wait_for(self._request(method, path, body, ctype),
                                          self.timeout)
        except (TimeoutError, asyncio.TimeoutError):
            self.close()
            return -1  # timeout
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.close()
            return -2  # connection error

    async def _request(self, method: str, path: str, body: bytes, ctype: str) -> int:
        if self.writer is not None and (self.reader.at_eof() or
                                        self.writer.transport.is_closing()):
            self.close()  # closed by the server while idle: urllib3 opens a new one too
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "User-Agent: rl-insight-bench-lane\r\n\r\n").encode()
        self.writer.write(head + body)
        await self.writer.drain()
        line = (await self.reader.readline()).split()
        if len(line) < 2:
            raise ConnectionResetError("the server closed the connection")
        status = int(line[1])
        length, close = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            k = k.strip().lower()
            if k == "content-length":
                length = int(v)
            elif k == "connection" and v.strip().lower() == "close":
                close = True
        if length:
            await self.reader.readexactly(length)
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Stats:
    def __init__(self, t0: float, t1: float) -> None:
        self.t0, self.t1 = t0, t1
        self.lat = {k: [] for k in KINDS}
        self.codes = {k: {} for k in KINDS}
        self.spans_ok = 0
        self.cycles: list[float] = []

    def note(self, kind: str, start: float, end: float, code: int, spans: int = 0) -> None:
        if not self.t0 <= end < self.t1:
            return
        self.lat[kind].append(end - start)
        self.codes[kind][code] = self.codes[kind].get(code, 0) + 1
        if code == 200:
            self.spans_ok += spans


async def lane(rank: int, args, bodies: dict, ident: Identity, stats: Stats,
               host: str, port: int, origin: float, stop_at: float,
               backlog: dict) -> None:
    tick = args.tick
    conn = Conn(host, port, 5.0)  # the lane Sender's timeout
    pending: list[Span] = []
    produced = 0  # states the rank finished so far
    dirty = False
    sent_total = received = 0
    lane_id = f"rank_{rank}"
    await asyncio.sleep(tick * rank / args.lanes)  # the actors do not tick in step
    last_end = time.time_ns()
    while time.time() < stop_at:
        cycle0 = time.time()
        await asyncio.sleep(tick)  # Periodic: wait the interval, then tick
        now = time.time()
        due = int((now - origin) / args.span_interval) - produced
        for _ in range(max(due, 0)):  # the rank finished these states since the last tick
            state = STATES[produced % len(STATES)]
            end = time.time_ns()
            pending.append(Span(state, last_end, end, lane_id,
                                (("step", produced // len(STATES)),) + INTERVAL,
                                0, 0, 0, True))
            last_end = end
            produced += 1
            received += 1
            dirty = True
        while pending:  # send_spans: batches until none are left or one fails
            batch = pending[:4 * CLIENT.lane_batch_size]
            payload = encode([(ident, f"bench:{rank}", s) for s in batch])
            t = time.time()
            code = await conn.request("POST", "/v1/traces", payload,
                                      "application/x-protobuf")
            stats.note("spans", t, time.time(), code, len(batch))
            if code != 200:
                break
            del pending[:len(batch)]
            sent_total += len(batch)
        if dirty:  # push_metrics: the run's families when they changed
            t = time.time()
            code = await conn.request("POST", bodies["run_path"], bodies["run_body"],
                                      "text/plain; version=0.0.4")
            stats.note("lane_metrics", t, time.time(), code)
            dirty = code != 200
        own = bodies["own_text"].format(received=received, sent=sent_total,
                                        pending=len(pending))  # the actor's own, every tick
        t = time.time()
        code = await conn.request("PUT", bodies["own_path"], own.encode(),
                                  "text/plain; version=0.0.4")
        stats.note("own_metrics", t, time.time(), code)
        if stats.t0 <= now < stats.t1:
            stats.cycles.append(time.time() - cycle0)
        backlog[rank] = len(pending)  # kept up to date: a lane still waiting is cancelled
    conn.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(int(len(s) * q), len(s) - 1)]


async def run(args) -> dict:
    u = urlsplit(args.url)
    host, port = u.hostname, u.port
    if not host.startswith("127."):
        raise SystemExit("load goes to loopback only (127.0.0.0/8)")
    ident = Identity(args.project, args.experiment)
    made = time.time()
    bodies = [lane_bodies(ident, r) for r in range(args.lanes)]
    made = time.time() - made
    origin = time.time()
    stats = Stats(origin + args.warmup, origin + args.warmup + args.seconds)
    print(json.dumps({"event": "started", "steady_start": stats.t0,
                      "steady_end": stats.t1, "lanes": args.lanes,
                      "series_per_lane_actor": bodies[0]["series"]}), flush=True)
    backlog: dict[int, int] = {}
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    tasks = [asyncio.create_task(lane(r, args, bodies[r], ident, stats, host, port, origin,
                                      stats.t1, backlog)) for r in range(args.lanes)]
    done, slow = await asyncio.wait(tasks, timeout=args.warmup + args.seconds + 30)
    for t in slow:
        t.cancel()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    window = args.seconds
    out = {"event": "done", "lanes": args.lanes, "span_interval_s": args.span_interval,
           "tick_s": args.tick, "window_s": window,
           "bodies_made_s": made, "series_per_lane_actor": bodies[0]["series"],
           "lane_metrics_body_bytes": len(bodies[0]["run_body"]),
           "spans_offered_per_s": args.lanes / args.span_interval,
           "spans_accepted_per_s": stats.spans_ok / window,
           "requests_nominal_per_s": args.lanes * len(KINDS) / args.tick,
           "requests_ok_per_s": sum(c.get(200, 0) for c in stats.codes.values()) / window,
           "cycle_s_p50": pct(stats.cycles, 0.5), "cycle_s_p99": pct(stats.cycles, 0.99),
           "spans_pending_at_end": sum(backlog.values()),
           "lanes_unfinished": len(slow),
           "generator_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
           "kinds": {}}
    for k in KINDS:
        lat = stats.lat[k]
        out["kinds"][k] = {"requests": len(lat), "codes": {str(c): n for c, n in
                                                            stats.codes[k].items()},
                           "ok_per_s": stats.codes[k].get(200, 0) / window,
                           "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
                           "max_ms": max(lat, default=0.0) * 1e3}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--lanes", type=int, required=True)
    ap.add_argument("--span-interval", type=float, default=1.0,
                    help="seconds between the states a rank finishes")
    ap.add_argument("--tick", type=float, default=CLIENT.lane_flush_interval_s,
                    help="client.lane_flush_interval_s of the lane actors")
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--project", default="bench-scale")
    ap.add_argument("--experiment", default="scale")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.lanes + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    out = asyncio.run(run(args))
    out["pid"] = os.getpid()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
