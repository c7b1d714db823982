"""Engine request spans at scale into one server: 128 replicas x 256 requests in flight,
100,000 request spans a minute for 10 minutes, against the same run without request
spans; then a ramp past 1,000,000 a minute, to where it stops.

    python bench/request_spans.py [--minutes 10] [--rate 100000] [--ramp 200000,500000,...]

The server is started with the CLI as the tests start it (no Prometheus, Tempo or
Grafana; spans relayed to a sink standing in for Tempo's OTLP receiver), on CPU 0; the
load runs here, on CPU 1. The load is what the run sends:

- each replica's engine exporter, as vLLM's ``init_tracer`` makes it
  (vllm/tracing/otel.py, 0.34.0): the SDK's BatchSpanProcessor, which exports every 5 s or
  at 512 spans, through the OTLP/HTTP exporter, one keep-alive connection per replica,
  retrying a 429/503 with backoff as the exporter does (opentelemetry-exporter-otlp-proto-
  http: up to 6 tries); each span as ``do_tracing`` makes it (``llm_request``, kind
  SERVER, its ``gen_ai.*`` attributes; the run and replica in the resource, as verl
  main sets ``OTEL_RESOURCE_ATTRIBUTES``). A request ends at a random time in its
  replica's generation window, 256 in flight per replica;
- each replica lane's ``vllm_generate`` span when its generation ends, each rank lane's
  ``actor_update`` at the step's end, and the trainer's step mark (lane ``trainer``):
  what the lane actors send, so the server cuts steps and joins the requests to them.

Measured per phase: spans sent, taken (2xx) and lost (refused after every retry); the
requests the server counted (``rl_insight_requests_total``); the server's CPU seconds
per second and RSS, sampled every 5 s; the spans relayed, dropped and spooled (its own
``/metrics``); for each step, how long after its end its row in ``/api/v1/anatomy``
held all its requests. The spans-off run is the reference: the same lanes and marks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import struct
import sys
import time
from pathlib import Path

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (  # noqa: E402
    AnyValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span as Span_pb  # noqa: E402

from bench.common import save  # noqa: E402
from bench.intake import Sink, running_server  # noqa: E402
from bench.scale_lanes import Conn  # noqa: E402
from rl_insight.collector.otlp_encode import encode  # noqa: E402
from rl_insight.wire.events import Identity, Span  # noqa: E402

S = 1_000_000_000
BATCH = 512  # BatchSpanProcessor's max_export_batch_size
DELAY_S = 5.0  # and its schedule_delay_millis
TRIES = 6  # the OTLP/HTTP exporter's retries (429, 502, 503, 504)
RANKS = 8  # rank lanes (the trainer's, one per node of 8 GPUs is enough for the cut)
GEN_SHARE = 0.6  # the part of a step the replicas generate in


def kv(key: str, value) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=float(value)))


SPAN_TEMPLATE = b""  # set below, once the helpers exist
_scope = InstrumentationScope(name="vllm.llm_engine").SerializeToString()
SCOPE = b"\x0a" + bytes([len(_scope)]) + _scope  # ScopeSpans.scope


class Replica:
    """One engine's tracer and exporter: requests end into a buffer; a batch leaves
    every 5 s or at 512."""

    def __init__(self, run: Identity, index: int) -> None:
        self.index = index
        self.resource = [kv("service.name", "vllm"), kv("project", run.project),
                         kv("experiment_name", run.experiment_name),
                         kv("replica", str(index))]
        rs = ResourceSpans()
        rs.resource.attributes.extend(self.resource)
        self.resource_bytes = rs.SerializeToString()
        self.pending: list[tuple[int, int, int, int]] = []  # (start, end, tokens, n)
        self.count = 0
        self.rng = random.Random(index)

    def body(self, batch: list[tuple[int, int, int, int]]) -> bytes:
        """The exporter's request, as the SDK's encoder makes it. Each span is a
        serialized template (name, kind, the attributes every request has) followed by
        its own fields, written here: protobuf merges the two (scalars: the last wins;
        repeated attributes: appended), so the server decodes exactly the span the SDK
        would send, at a tenth of the cost, so the load's one core outruns the server."""
        rand = self.rng.getrandbits
        spans = []
        for start, end, tokens, n in batch:
            e2e = (end - start) / S
            queue = prefill = e2e * 0.05
            own = b"".join((
                b"\x0a\x10", rand(128).to_bytes(16, "big"),  # trace_id
                b"\x12\x08", rand(64).to_bytes(8, "big"),  # span_id
                b"\x39", struct.pack("<Q", start), b"\x41", struct.pack("<Q", end),
                _double("gen_ai.latency.time_to_first_token", queue + prefill),
                _double("gen_ai.latency.e2e", e2e), _double("gen_ai.latency.time_in_queue",
                                                             queue),
                _int("gen_ai.usage.completion_tokens", tokens),
                _double("gen_ai.latency.time_in_model_prefill", prefill),
                _double("gen_ai.latency.time_in_model_decode", e2e - queue - prefill),
                _double("gen_ai.latency.time_in_model_inference", e2e - queue),
                _string("gen_ai.request.id", f"chatcmpl-{self.index}-{n}")))
            span = SPAN_TEMPLATE + own
            spans.append(b"\x12" + _varint(len(span)) + span)  # ScopeSpans.spans
        scope = SCOPE + b"".join(spans)
        rs = self.resource_bytes + b"\x12" + _varint(len(scope)) + scope
        return b"\x0a" + _varint(len(rs)) + rs  # ExportTraceServiceRequest.resource_spans

    def message(self, batch: list[tuple[int, int, int, int]]) -> ExportTraceServiceRequest:
        """The same request built with the protobuf classes (the fast one's check)."""
        return ExportTraceServiceRequest.FromString(self.body(batch))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _key(key: str) -> bytes:
    k = key.encode()
    return b"\x0a" + _varint(len(k)) + k


def _kv(key: str, value: bytes) -> bytes:
    body = _key(key) + b"\x12" + _varint(len(value)) + value
    return b"\x4a" + _varint(len(body)) + body  # Span.attributes (field 9)


def _double_prefix(key: str) -> bytes:
    """A double attribute but its 8 bytes: AnyValue.double_value (4) is fixed64."""
    return _kv(key, b"\x21" + bytes(8))[:-8]


_DOUBLE = {k: _double_prefix(k) for k in (
    "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue", "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode", "gen_ai.latency.time_in_model_inference")}


def _double(key: str, v: float) -> bytes:
    return _DOUBLE[key] + struct.pack("<d", v)


def _int(key: str, v: int) -> bytes:
    return _kv(key, b"\x18" + _varint(v))  # AnyValue.int_value (3)


def _string(key: str, v: str) -> bytes:
    b = v.encode()
    return _kv(key, b"\x0a" + _varint(len(b)) + b)  # AnyValue.string_value (1)


def _template() -> bytes:
    span = Span_pb()
    span.name = "llm_request"
    span.kind = 2  # SERVER
    span.attributes.extend([kv("gen_ai.usage.prompt_tokens", 512),
                            kv("gen_ai.request.max_tokens", 8192),
                            kv("gen_ai.request.top_p", 1.0),
                            kv("gen_ai.request.temperature", 1.0),
                            kv("gen_ai.request.n", 1)])
    return span.SerializeToString()


SPAN_TEMPLATE = _template()


class Load:
    """The run: steps, lanes, and every replica's request spans at a rate."""

    def __init__(self, url: str, run: Identity, replicas: int, in_flight: int,
                 step_s: float) -> None:
        self.host, port = url.split("//", 1)[1].split(":")
        self.port = int(port)
        self.run, self.step_s, self.in_flight = run, step_s, in_flight
        self.replicas = [Replica(run, i) for i in range(replicas)]
        self.stats = {"sent": 0, "taken": 0, "lost": 0, "retried": 0, "posts": 0}
        self.step_ends: dict[int, float] = {}
        self.step_requests: dict[int, int] = {}
        self.stop = False

    async def post(self, conn: Conn, body: bytes, spans: int) -> None:
        for attempt in range(TRIES):
            status = await conn.request("POST", "/v1/traces", body, "application/x-protobuf")
            self.stats["posts"] += 1
            if 200 <= status < 300:
                self.stats["taken"] += spans
                return
            self.stats["retried"] += 1
            await asyncio.sleep(min(2 ** attempt, 8) * (0.5 + random.random()))
        self.stats["lost"] += spans

    async def exporter(self, r: Replica) -> None:
        """BatchSpanProcessor's worker: a batch when 512 wait, else every 5 s."""
        conn = Conn(self.host, self.port, 30.0)
        await asyncio.sleep(random.random() * DELAY_S)
        last = time.monotonic()
        while not self.stop or r.pending:
            if len(r.pending) >= BATCH or time.monotonic() - last >= DELAY_S or (
                    self.stop and r.pending):
                batch, r.pending = r.pending[:BATCH], r.pending[BATCH:]
                last = time.monotonic()
                if batch:
                    await self.post(conn, r.body(batch), len(batch))
                continue
            await asyncio.sleep(0.05)
        conn.close()

    async def requests_of(self, rate_per_min: float, seconds: float, t0: float) -> None:
        """Requests end at ``rate_per_min`` on average, all within the steps'
        generation windows, spread over the replicas; 256 in flight on each."""
        if rate_per_min <= 0:
            return
        per_s = rate_per_min / 60 / GEN_SHARE  # in the generation window
        tick = 0.05
        carry, n = 0.0, 0
        end_at = t0 + seconds
        while time.time() < end_at:
            now = time.time()
            step = int((now - t0) // self.step_s) + 1
            into = (now - t0) % self.step_s
            if into < self.step_s * GEN_SHARE - 0.5:
                carry += per_s * tick
                k, carry = int(carry), carry - int(carry)
                end_ns = time.time_ns()
                for _ in range(k):
                    r = self.replicas[n % len(self.replicas)]
                    n += 1
                    # in flight for about in_flight / rate of its replica; at least 1 s
                    dur = max(1.0, self.in_flight * len(self.replicas) / per_s)
                    dur *= 0.5 + random.random()
                    dur = min(dur, into + 0.2)  # it arrived in this step's generation
                    r.count += 1
                    r.pending.append((end_ns - int(dur * S), end_ns,
                                      random.randint(200, 4000), r.count))
                self.step_requests[step] = self.step_requests.get(step, 0) + k
                self.stats["sent"] += k
            await asyncio.sleep(tick)

    async def lanes(self, seconds: float, t0: float) -> None:
        """The lane actors' spans and the trainer's marks, per step."""
        conn = Conn(self.host, self.port, 30.0)
        step = 1
        while True:
            start = t0 + (step - 1) * self.step_s
            gen_end = start + self.step_s * GEN_SHARE
            end = start + self.step_s
            if start >= t0 + seconds:
                break
            await asyncio.sleep(max(0.0, gen_end - time.time()))
            await self.post(conn, encode([
                (self.run, f"node-{i // 8}", Span("vllm_generate", int(start * S),
                                                  int(gen_end * S), f"replica_{i}", (),
                                                  ends_state=True))
                for i in range(len(self.replicas))]), 0)
            await asyncio.sleep(max(0.0, end - time.time()))
            spans = [(self.run, f"node-{i}", Span("actor_update", int(gen_end * S),
                                                  int(end * S), f"rank_{i}", (),
                                                  ends_state=True)) for i in range(RANKS)]
            spans.append((self.run, "trainer", Span("train_step", int(start * S),
                                                    int(end * S), "trainer",
                                                    (("step", step),))))
            await self.post(conn, encode(spans), 0)
            self.step_ends[step] = time.time()
            step += 1
        conn.close()

    async def run_phase(self, rate_per_min: float, seconds: float, t0: float) -> None:
        self.stop = False
        exporters = [asyncio.create_task(self.exporter(r)) for r in self.replicas]
        await asyncio.gather(self.requests_of(rate_per_min, seconds, t0),
                             self.lanes(seconds, t0))
        self.stop = True
        await asyncio.gather(*exporters)


class Watch:
    """The server seen from outside: CPU, RSS, its own counters, the anatomy's rows."""

    def __init__(self, url: str, pid: int, run: Identity) -> None:
        self.url, self.run = url, run
        self.proc = psutil.Process(pid)
        self.samples: list[dict] = []
        self.step_ready: dict[int, float] = {}

    def counters(self) -> dict[str, float]:
        text = requests.get(self.url + "/metrics", timeout=30).text
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = dict(s.labels)
                if s.name.startswith(("rl_insight_spans_", "rl_insight_spool_")):
                    key = s.name + ("{" + labels["reason"] + "}" if "reason" in labels else "")
                    out[key] = out.get(key, 0.0) + s.value
                elif s.name == "rl_insight_requests_total" and \
                        labels.get("experiment_name") == self.run.experiment_name:
                    out["requests_total"] = out.get("requests_total", 0.0) + s.value
        return out

    def rows(self) -> dict[int, int]:
        got = requests.get(self.url + "/api/v1/anatomy", timeout=30, params={
            "project": self.run.project, "experiment_name": self.run.experiment_name})
        if got.status_code != 200:
            return {}
        return {row["step"]: sum(q.get("requests", 0) for q in
                                 (row.get("requests") or {}).values())
                for row in got.json().get("steps", [])}

    def held(self) -> dict:
        """The run's requests the anatomy held, dropped (over its cap) and took late."""
        got = requests.get(self.url + "/api/v1/anatomy/runs", timeout=30).json()["runs"]
        mine = [r for r in got if r["experiment_name"] == self.run.experiment_name]
        return {k: mine[0][k] for k in ("pending_requests", "dropped_requests",
                                        "late_requests")} if mine else {}

    async def watch(self, load: Load, until: list[bool]) -> None:
        cpu0, t_prev = sum(self.proc.cpu_times()[:2]), time.monotonic()
        next_sample = time.monotonic() + 5
        while not until[0]:
            await asyncio.sleep(1.0)
            rows = await asyncio.to_thread(self.rows)
            for step, n in rows.items():
                want = load.step_requests.get(step, 0)
                if step not in self.step_ready and step in load.step_ends and n >= want:
                    self.step_ready[step] = time.time() - load.step_ends[step]
            if time.monotonic() >= next_sample:
                cpu = sum(self.proc.cpu_times()[:2])
                now = time.monotonic()
                c = await asyncio.to_thread(self.counters)
                self.samples.append({"t": now, "cpu_s_per_s": (cpu - cpu0) / (now - t_prev),
                                     "rss_mb": self.proc.memory_info().rss / 2**20, **c,
                                     "sent": load.stats["sent"]})
                cpu0, t_prev, next_sample = cpu, now, now + 5


def phase(url: str, pid: int, name: str, rate: float, seconds: float, args) -> dict:
    run = Identity("bench-requests", name)
    load = Load(url, run, args.replicas, args.in_flight, args.step_seconds)
    watch = Watch(url, pid, run)
    until = [False]

    async def go() -> None:
        w = asyncio.create_task(watch.watch(load, until))
        t0 = time.time() + 1
        await asyncio.sleep(1)
        await load.run_phase(rate, seconds, t0)
        # the last step's row and the spans' counts settle
        deadline = time.time() + 60
        last = max(load.step_ends, default=0)
        while time.time() < deadline and last not in watch.step_ready:
            await asyncio.sleep(1)
        until[0] = True
        await w

    print(f"== {name}: {rate:,.0f} request spans a minute for {seconds:.0f} s, "
          f"{args.replicas} replicas x {args.in_flight} in flight, steps of "
          f"{args.step_seconds:.0f} s", flush=True)
    asyncio.run(go())
    end = watch.counters()
    held = watch.held()
    busy = [s for s in watch.samples[1:]]  # the first sample holds the start-up
    ready = sorted(watch.step_ready.values())
    out = {"phase": name, "rate_per_min": rate, "seconds": seconds, **load.stats,
           "server_requests_total": end.get("requests_total", 0.0),
           "spans_received": end.get("rl_insight_spans_received_total", 0.0),
           "spans_relayed": end.get("rl_insight_spans_relayed_total", 0.0),
           "spans_dropped": {k: v for k, v in end.items() if k.startswith(
               "rl_insight_spans_dropped")},
           "spool_spans_max": max((s.get("rl_insight_spool_spans", 0) for s in busy),
                                  default=0),
           "server_cpu_s_per_s_mean": (sum(s["cpu_s_per_s"] for s in busy) / len(busy)
                                       if busy else 0.0),
           "server_cpu_s_per_s_max": max((s["cpu_s_per_s"] for s in busy), default=0.0),
           "server_rss_mb_max": max((s["rss_mb"] for s in watch.samples), default=0.0),
           "server_rss_mb_end": watch.samples[-1]["rss_mb"] if watch.samples else 0.0,
           "anatomy": held,
           "steps": len(load.step_ends), "steps_with_all_requests": len(ready),
           "step_ready_s_median": ready[len(ready) // 2] if ready else None,
           "step_ready_s_max": ready[-1] if ready else None}
    out["lost_at_server"] = out["taken"] - out["server_requests_total"] if rate else 0
    print(json.dumps(out), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="each of the two runs")
    ap.add_argument("--rate", type=float, default=100_000, help="request spans a minute")
    ap.add_argument("--ramp", default="300000,1000000,2000000,4000000",
                    help="further rates, a minute each, until spans are lost")
    ap.add_argument("--ramp-seconds", type=float, default=60.0)
    ap.add_argument("--replicas", type=int, default=128)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--step-seconds", type=float, default=20.0)
    ap.add_argument("--name", default="requests")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        print("bench/request_spans.py needs taskset (util-linux)", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {1})  # the load on the other core
    sink = Sink()
    rows = []
    for label, rate, seconds, ramp in (
            [("without request spans", 0.0, args.minutes * 60, False),
             ("with request spans", args.rate, args.minutes * 60, False)]
            + [(f"ramp {float(r):,.0f}/min", float(r), args.ramp_seconds, True)
               for r in args.ramp.split(",") if r]):
        with running_server(REPO, sink) as (url, pid):
            row = phase(url, pid, label.replace(" ", "-").replace(",", ""), rate, seconds,
                        args)
            row["label"] = label
            rows.append(row)
        if ramp and (row["lost"] or row["lost_at_server"]):
            break  # where it stops
    off, on = rows[0], rows[1]
    ratios = {"cpu": (on["server_cpu_s_per_s_mean"] / off["server_cpu_s_per_s_mean"]
                      if off["server_cpu_s_per_s_mean"] else None),
              "rss": on["server_rss_mb_max"] / off["server_rss_mb_max"]}
    print(f"\nwith {args.rate:,.0f} request spans a minute: lost {on['lost']} at the "
          f"exporters, {on['lost_at_server']:.0f} at the server; server CPU "
          f"{on['server_cpu_s_per_s_mean']:.2f} s/s against {off['server_cpu_s_per_s_mean']:.2f} "
          f"without, RSS {on['server_rss_mb_max']:.0f} MB against {off['server_rss_mb_max']:.0f}; "
          f"steps complete {on['step_ready_s_max']} s after their end at most")
    path = save(args.name, {"args": vars(args), "rows": rows, "ratios": ratios})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
