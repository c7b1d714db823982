"""Engine request spans at the server: read from OTLP as vLLM makes them, counted as
bounded rl_insight_request_* series, joined to the step they ended in, and "why was step
N slow" down to the tail request, with the step's goodput.

The spans are made the way vLLM's ``OutputProcessor.do_tracing`` makes them
(vllm/v1/engine/output_processor.py; attribute names from vllm/tracing.py
``SpanAttributes`` at 03b8a674): the OpenTelemetry SDK's tracer, one ``llm_request`` span
of kind SERVER per finished request started at its arrival, and encoded by the OTLP
exporter's own encoder (opentelemetry.exporter.otlp.proto.common), as the HTTP exporter
sends them.
"""

from __future__ import annotations

import http.server
import threading
import time
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from rl_insight import config
from rl_insight.anatomy import explain
from rl_insight.collector.otlp_encode import encode
from rl_insight.server.app import create_app
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire.events import Identity, Span

S = 1_000_000_000
T0 = (int(time.time()) - 120) * S  # the steps ended within the hour: their rows export
STEP_S = 10


class Engine:
    """One vLLM engine's tracer, as vllm/tracing.py ``init_tracer`` makes it (a
    TracerProvider with the process's resource), its exporter recording."""

    def __init__(self, resource: dict | None = None) -> None:
        self.exported = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create(resource or {}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exported))
        self.tracer = self.provider.get_tracer("vllm.v1.engine.output_processor")

    def request(self, rid: str, arrival: float, queue: float, prefill: float,
                decode: float, prompt: int, completion: int, preemptions: int = 0,
                stamp: dict | None = None) -> None:
        """do_tracing: the span starts at the request's arrival and ends now (its end)."""
        ttft = queue + prefill
        e2e = ttft + decode
        start, end = int(arrival * S), int((arrival + e2e) * S)
        span = self.tracer.start_span("llm_request", kind=SpanKind.SERVER, start_time=start)
        for k, v in (stamp or {}).items():
            span.set_attribute(k, v)
        for k, v in (("gen_ai.response.model", "Qwen2.5-7B"), ("gen_ai.request.id", rid),
                     ("gen_ai.request.max_tokens", 32768),
                     ("gen_ai.usage.prompt_tokens", prompt),
                     ("gen_ai.usage.completion_tokens", completion),
                     ("gen_ai.latency.time_in_queue", queue),
                     ("gen_ai.latency.time_to_first_token", ttft),
                     ("gen_ai.latency.e2e", e2e),
                     ("gen_ai.latency.time_in_model_prefill", prefill),
                     ("gen_ai.latency.time_in_model_decode", decode),
                     ("gen_ai.latency.time_in_model_inference", prefill + decode)):
            span.set_attribute(k, v)
        if preemptions:  # the request journey's events carry the count
            span.add_event("journey", {"event.type": "PREEMPTED",
                                       "num_preemptions": preemptions}, timestamp=start + S)
        span.end(end_time=end)

    def body(self) -> bytes:
        spans = self.exported.get_finished_spans()
        self.exported.clear()
        return encode_spans(spans).SerializeToString()


@contextmanager
def in_process(tmp_path, *overrides: str):
    """The server's app and state in this process, on the real database."""
    s = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)},
                    overrides=["anatomy.settle_s=0", *overrides])
    state = ServerState(s, Supervisor(s.supervisor, s.logs_dir))
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            yield c, state
    finally:
        state.close()


@pytest.fixture
def server(tmp_path):
    with in_process(tmp_path, "anatomy.gpus_per_replica=2") as both:
        yield both


def post(c, body: bytes) -> None:
    r = c.post("/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
    assert r.status_code == 200, r.text


def lanes_and_marks(run: Identity, steps: int, slow: dict[int, float]) -> bytes:
    """Two replicas generating, one rank training, the trainer's step marks; replica 1
    generates ``slow[step]`` seconds in that step instead of 3."""
    spans = []
    for step in range(1, steps + 1):
        t = T0 + (step - 1) * STEP_S * S
        for replica in (0, 1):
            gen = slow.get(step, 3.0) if replica == 1 else 3.0
            spans.append((run, "h:1", Span("vllm_generate", t, t + int(gen * S),
                                           f"replica_{replica}", (), ends_state=True)))
        end_gen = t + int(max(3.0, slow.get(step, 3.0)) * S)
        spans.append((run, "h:2", Span("actor_update", end_gen, end_gen + 2 * S, "rank_0",
                                       (), ends_state=True)))
        spans.append((run, "h:3", Span("train_step", t, t + STEP_S * S, "trainer",
                                       (("step", step),))))
    return encode(spans)


def normal_requests(engine: Engine, step: int, replica: int, stamp: dict) -> None:
    t = (T0 + (step - 1) * STEP_S * S) / S
    for i in range(8):
        engine.request(f"req-{step}-{replica}-{i}", t + 0.1 * i, 0.05, 0.1, 1.5, 300, 400,
                       stamp=stamp)


def test_a_slow_step_explained_down_to_its_tail_request(server):
    """Steps 1-4 alike; in step 5 replica 1 takes 9 s: a burst of queued requests on
    replica 0 and, on replica 1, one request that generated 30,000 tokens and was
    preempted. The explanation names the rollout's generation first, replica 1, decode
    as the tail request's phase, its 30,000 tokens and its preemption, and the queueing
    against the baseline's."""
    c, state = server
    run = Identity("p", "e")
    post(c, lanes_and_marks(run, 6, {5: 9.0}))
    # verl main's engines carry the run in their resource (trace.enable_otel:
    # OTEL_RESOURCE_ATTRIBUTES project, experiment_name, replica); here replica 0's, and
    # replica 1's spans are stamped in its own process (rl_insight/client/engine_spans.py)
    eng0 = Engine({"project": "p", "experiment_name": "e", "replica": "0"})
    eng1 = Engine()
    stamp1 = {"project": "p", "experiment_name": "e", "replica": "1", "role": "rollout"}
    for step in range(1, 7):
        normal_requests(eng0, step, 0, {})
        normal_requests(eng1, step, 1, stamp1)
    t5 = (T0 + 4 * STEP_S * S) / S
    for i in range(6):  # the burst: queued behind each other on replica 0
        eng0.request(f"burst-{i}", t5 + 0.2, 1.0 + 0.3 * i, 0.1, 0.6, 300, 300)
    eng1.request("req-30k", t5 + 0.1, 0.05, 0.3, 8.4, 512, 30_000, preemptions=2,
                 stamp=stamp1)
    eng1.request("no-run", t5, 0.01, 0.01, 0.1, 10, 10)  # no run: counted, not kept
    post(c, eng0.body())
    post(c, eng1.body())
    assert c.post("/api/v1/experiments/finish",
                  json={"project": "p", "experiment_name": "e"}).status_code == 200
    rows = c.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "e"}
                 ).json()["steps"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    five = rows[4]
    assert five["requests"]["rollout"]["requests"] == 8 + 8 + 6 + 1
    assert five["requests"]["rollout"]["completion_tokens"] == 16 * 400 + 6 * 300 + 30_000
    assert five["tail"][0]["request_id"] == "req-30k"
    assert len(five["tail"][0]["trace_id"]) == 32
    assert five["generated_tokens"] == 16 * 400 + 6 * 300 + 30_000
    # goodput: 2 replicas x 2 GPUs, 1 rank
    assert five["gpu_seconds"]["rollout"]["busy"] == pytest.approx(2 * (3 + 9))
    assert five["gpu_seconds"]["rollout"]["idle"] == pytest.approx(2 * (7 + 1))
    assert five["gpu_seconds"]["ranks"]["busy"] == pytest.approx(1)  # 9..10 s of 9..11
    assert five["tokens_per_gpu_second"] == pytest.approx(
        five["generated_tokens"] / (24 + 16 + 10))
    assert five["tail_share"] > 0.3

    why = c.get("/api/v1/anatomy/explain", params={
        "project": "p", "experiment_name": "e", "step": 5}).json()
    assert why["baseline_steps"] == [1, 2, 3, 4]
    assert why["contributions"][0]["part"] == "generate:rollout"
    assert why["contributions"][0]["over_s"] == pytest.approx(6)
    cp = why["critical_path"]
    assert cp["slowest_replica"] == "1" and cp["straggler_ratio"] == pytest.approx(1.5)
    assert cp["requests"]["queue"]["mean_s"] > 4 * cp["requests"]["queue"]["baseline_mean_s"]
    top = cp["tail"][0]
    assert top["request_id"] == "req-30k" and top["dominant_phase"] == "decode"
    assert "generated 30,000 tokens" in top["why"] and "preempted 2 time(s)" in top["why"]
    text = explain.render(why)
    assert "critical path: rollout generation, slowest replica 1" in text
    assert "last to finish: req-30k on replica 1" in text and top["trace_id"] in text
    assert "GPU-hours over the baseline" in text
    assert c.get("/api/v1/anatomy/explain", params={
        "project": "p", "experiment_name": "e", "step": 99}).status_code == 404

    metrics = c.get("/metrics").text
    e2e = [ln for ln in metrics.splitlines()
           if ln.startswith("rl_insight_request_e2e_seconds_count")]
    assert e2e and all('request_id' not in ln for ln in metrics.splitlines()
                       if ln.startswith("rl_insight_request"))
    assert 'rl_insight_requests_total{experiment_name="e",project="p",replica="1",' \
           'role="rollout"} 49.0' in metrics
    assert 'rl_insight_request_preemptions_total{experiment_name="e",project="p",' \
           'replica="1",role="rollout"} 2.0' in metrics
    assert "rl_insight_request_spans_unattributed_total 1.0" in metrics
    assert 'rl_insight_step_gpu_seconds{experiment_name="e",project="p",role="rollout",' \
           'use="busy"}' in metrics
    # the Perfetto export's data: the requests under their replica lanes
    recent = c.get("/api/v1/traces/recent", params={"project": "p",
                                                    "experiment_name": "e"}).json()
    assert {r["lane"] for r in recent["requests"]} == {"replica_0", "replica_1"}


def test_a_request_span_joins_the_step_it_ended_in(server):
    c, state = server
    run = Identity("p", "j")
    post(c, lanes_and_marks(run, 3, {}))
    eng = Engine({"project": "p", "experiment_name": "j", "replica": "teacher_x_0"})
    t2 = (T0 + STEP_S * S) / S
    eng.request("ends-in-2", t2 - 1.0, 0.0, 0.5, 1.0, 10, 10)  # begins in 1, ends in 2
    eng.request("ends-in-3", t2 + STEP_S - 0.5, 0.0, 0.5, 1.0, 10, 10)
    post(c, eng.body())
    c.post("/api/v1/experiments/finish", json={"project": "p", "experiment_name": "j"})
    rows = c.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "j"}
                 ).json()["steps"]
    tails = {r["step"]: [t["request_id"] for t in r["tail"]] for r in rows}
    assert tails == {1: [], 2: ["ends-in-2"], 3: ["ends-in-3"]}
    # the role comes from the replica label verl gives a teacher's engine
    assert set(rows[1]["requests"]) == {"teacher_x"}


def test_requests_over_the_runs_cap_are_named_on_their_step_not_lost_silently(tmp_path):
    with in_process(tmp_path, "anatomy.max_requests_per_run=5") as (c, _):
        run = Identity("p", "cap")
        post(c, lanes_and_marks(run, 3, {}))
        eng = Engine({"project": "p", "experiment_name": "cap", "replica": "0"})
        normal_requests(eng, 3, 0, {})  # 8 requests ending in step 3; 5 are held
        post(c, eng.body())
        c.post("/api/v1/experiments/finish", json={"project": "p",
                                                   "experiment_name": "cap"})
        rows = c.get("/api/v1/anatomy", params={"project": "p",
                                                "experiment_name": "cap"}).json()["steps"]
        by_step = {r["step"]: r for r in rows}
        assert by_step[3]["requests"]["rollout"]["requests"] == 5
        assert by_step[3]["requests_dropped"] == 3
        assert by_step[1]["requests_dropped"] == by_step[2]["requests_dropped"] == 0
        metrics = c.get("/metrics").text
        assert 'rl_insight_step_requests_dropped{experiment_name="cap",project="p"} 3.0' \
            in metrics
        why = explain.render(explain.explain(rows, 3, 1))
        assert "3 request spans of this step were dropped" in why
        assert "anatomy.max_requests_per_run" in why


def test_the_engines_exporter_gets_http_and_the_token_through_the_runtime_env(monkeypatch):
    """An engine's own OTLP exporter (vLLM's ``get_span_exporter``: gRPC unless
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says http/protobuf; its headers from
    OTEL_EXPORTER_OTLP_TRACES_HEADERS) authenticates without code; a job's own values
    win."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from rl_insight.ray.attach import env_vars

    env = env_vars({"RL_INSIGHT_SERVER_URL": "http://10.0.0.5:18080",
                    "RL_INSIGHT_TOKEN": "s3cr et"})
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                       env["OTEL_EXPORTER_OTLP_TRACES_HEADERS"])
    seen: list = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    receiver = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.handle_request, daemon=True).start()
    engine = Engine()
    engine.request("r", time.time(), 0.0, 0.1, 0.1, 1, 1)
    exporter = OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces")
    exporter.export(engine.exported.get_finished_spans())
    receiver.server_close()
    assert seen == ["Bearer s3cr et"]
    own = env_vars({"RL_INSIGHT_SERVER_URL": "http://s:1", "RL_INSIGHT_TOKEN": "t",
                    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=a"})
    assert own["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"
    assert own["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] == "x-team=a"
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in env_vars({})


def test_an_engines_spans_are_stamped_when_trace_state_first_runs_on_its_lane(
        recorded, monkeypatch):
    """verl 0.9.1: the vLLM server actor wraps each request in trace_state on
    replica_<r>; the engine's tracer (vllm/tracing.py init_tracer: the global SDK
    TracerProvider) gets the run and replica on every span it starts after that."""
    from opentelemetry import trace

    from rl_insight.client import api, engine_spans
    from rl_insight.client.runtime import RUNTIME

    c, _ = recorded
    c.identity = Identity("p", "stamped")
    monkeypatch.setattr(engine_spans, "_stamped", set())
    monkeypatch.setattr(RUNTIME, "stamped", set())
    engine = Engine()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: engine.provider)
    with api.trace_state("vllm_generate", state_lane_id="teacher_x_replica_3"):
        engine.request("r1", time.time(), 0.0, 0.1, 0.2, 10, 10)
    with api.trace_state("vllm_generate", state_lane_id="teacher_x_replica_3"):
        pass  # once per lane: one processor
    assert len(engine.provider._active_span_processor._span_processors) == 2
    (span,) = engine.exported.get_finished_spans()
    assert {k: span.attributes[k] for k in ("project", "experiment_name", "replica",
                                            "role")} == {
        "project": "p", "experiment_name": "stamped", "replica": "teacher_x_3",
        "role": "teacher_x"}
    assert span.attributes["gen_ai.request.id"] == "r1"  # the engine's own, after ours


def test_a_resource_that_names_the_run_and_replica_is_not_stamped_over(recorded,
                                                                      monkeypatch):
    """verl main exports OTEL_RESOURCE_ATTRIBUTES (project, experiment_name, replica)
    before its engine starts: those stand; no processor is added."""
    from opentelemetry import trace

    from rl_insight.client import api, engine_spans
    from rl_insight.client.runtime import RUNTIME

    c, _ = recorded
    c.identity = Identity("p", "stamped")
    monkeypatch.setattr(engine_spans, "_stamped", set())
    monkeypatch.setattr(RUNTIME, "stamped", set())
    engine = Engine({"project": "p", "experiment_name": "own", "replica": "0"})
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: engine.provider)
    with api.trace_state("vllm_generate", state_lane_id="replica_0"):
        engine.request("r1", time.time(), 0.0, 0.1, 0.2, 10, 10)
    assert len(engine.provider._active_span_processor._span_processors) == 1
    (span,) = engine.exported.get_finished_spans()
    assert "replica" not in span.attributes
    assert span.resource.attributes["experiment_name"] == "own"


def test_without_a_tracer_yet_an_engine_process_gets_the_resource_variable(monkeypatch):
    import sys

    from rl_insight.client import engine_spans

    monkeypatch.setattr(engine_spans, "_stamped", set())
    monkeypatch.setattr(engine_spans, "_sdk_provider", lambda: None)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "replica=7,service.name=vllm")
    assert engine_spans.stamp("replica_0", lambda: ("p", "e/1")) is None  # no engine here
    monkeypatch.setitem(sys.modules, "vllm", object())
    assert engine_spans.stamp("rank_0", lambda: ("p", "e")) is None
    assert engine_spans.stamp("replica_1", lambda: ("p", "e/1")) == "resource"
    assert Resource.create().attributes["experiment_name"] == "e/1"
    assert Resource.create().attributes["replica"] == "7"  # the engine's own wins
