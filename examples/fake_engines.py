"""FAKE rollout engines for the simulated RL run.

vLLM, vLLM-Omni and SGLang cannot run on a laptop without GPUs, so these stand-ins
serve real /metrics endpoints with the real metric names and labels (read from each
upstream's source at the version named beside it), whose values
follow a simulated load: requests arrive, queue, run and finish, the KV cache fills, and
the sleep state follows the RL step. Nothing here is the real engine.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import prometheus_client as pc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
# vLLM 0.33, entrypoints/rl/online/metrics.py and entrypoints/serve/dev/sleep/metrics.py
OPERATION_BUCKETS = (0.01, 0.1, 1, 10, 30, 60, 120, 300, 600)
# vLLM 0.33, v1/metrics/loggers.py L84 (inter-token latency, time per output token)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                    5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# SGLang 0.5.23, srt/observability/metrics_collector.py (bucket lists L1966, L1988, L2014,
# L837, and exponential_buckets(0.001, 1.62, 30) at L884)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04,
                      0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15,
                        20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700,
                        800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)
SGLANG_STAGE_BUCKETS = tuple(0.001 * 1.62 ** i for i in range(30))
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200,
                       400)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200,
                      400, 600, 1200, 1800, 2400)
# vllm-omni 0.30.0, vllm_omni/metrics/definitions.py SECONDS_BUCKETS, SECONDS_FAST_BUCKETS,
# BYTES_BUCKETS
OMNI_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
OMNI_FAST = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
OMNI_BYTES = (1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
              268435456)


class OmniPipeline:
    """vLLM-Omni's own ``vllm_omni:*`` families for a two-stage pipeline: stage 0 the
    autoregressive LLM (whose ``vllm:*`` metrics the engine serves), stage 1 a diffusion
    stage turning its output into an image. Names, label sets, types and buckets: vllm-omni
    0.30.0, vllm_omni/metrics/prometheus.py (pipeline and service families, labels
    model_name[, finished_reason | reason | stage | stage, stage_type]), modality.py
    (diffusion families, labels model_name, stage, replica) and transfer.py (labels
    model_name, from_stage, from_replica, to_stage, to_replica)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        m = {"model_name": MODEL}
        stage = ["model_name", "stage", "replica"]

        def hist(name, doc, labels, buckets=None):
            kw = {"buckets": buckets} if buckets else {}
            return Histogram(name, doc, labels, registry=registry, **kw)

        self.running = Gauge("vllm_omni:num_requests_running", "Requests running across "
                             "all stages", list(m), registry=registry).labels(**m)
        self.waiting = Gauge("vllm_omni:num_requests_waiting", "Requests waiting",
                             list(m), registry=registry).labels(**m)
        self.e2e = hist("vllm_omni:e2e_request_latency_s", "Pipeline e2e latency", list(m),
                        OMNI_SECONDS).labels(**m)
        self.success = Counter("vllm_omni:requests_success", "Requests by finish reason",
                               [*m, "finished_reason"], registry=registry)
        self.failed = Counter("vllm_omni:requests_failed", "Requests by failure reason",
                              [*m, "reason"], registry=registry)
        self.prompt_tokens = Counter("vllm_omni:prompt_tokens", "Prompt tokens", list(m),
                                     registry=registry).labels(**m)
        self.gen_tokens = Counter("vllm_omni:generation_tokens", "Generated tokens",
                                  list(m), registry=registry).labels(**m)
        self.stage_gen = hist("vllm_omni:stage_gen_time_s", "Generation time per stage",
                              [*m, "stage", "stage_type"], OMNI_SECONDS)
        self.queue_wait = hist("vllm_omni:request_queue_wait_s", "Queue wait before the "
                               "first stage", list(m), OMNI_SECONDS).labels(**m)
        self.stage_waiting = Gauge("vllm_omni:stage_waiting_requests", "Waiting per stage",
                                   [*m, "stage"], registry=registry)
        self.steps = hist("vllm_omni:num_inference_steps", "Diffusion steps per request",
                          list(m)).labels(**m)
        self.images = Counter("vllm_omni:image_count", "Images", list(m),
                              registry=registry).labels(**m)
        self.pixels = hist("vllm_omni:image_pixels", "Pixels per image", list(m)).labels(**m)
        self.peak_memory = Gauge("vllm_omni:peak_memory_mb", "Peak GPU memory per stage",
                                 [*m, "stage"], registry=registry)
        self.in_queue = hist("vllm_omni:stage_in_queue_s", "Diffusion scheduler queue time",
                             [*m, "stage"], OMNI_FAST)
        self.diffusion = {
            name: hist(f"vllm_omni:{name}", name, stage, buckets)
            for name, buckets in (("diffusion_exec_s", OMNI_SECONDS),
                                  ("diffusion_exec_per_step_s", OMNI_FAST),
                                  ("diffusion_preprocess_s", OMNI_FAST),
                                  ("diffusion_postprocess_s", OMNI_FAST),
                                  ("vae_decode_s", OMNI_SECONDS),
                                  ("denoise_step_latency_s", OMNI_FAST))}
        hop = ["model_name", "from_stage", "from_replica", "to_stage", "to_replica"]
        self.transfer = {name: hist(f"vllm_omni:{name}", name, hop,
                                    OMNI_BYTES if name.endswith("bytes") else OMNI_FAST)
                         for name in ("transfer_size_bytes", "transfer_tx_s",
                                      "transfer_rx_s", "transfer_in_flight_s")}
        for s_id, mb in (("0", 18_000.0), ("1", 9_500.0)):
            self.peak_memory.labels(**m, stage=s_id).set(mb)
            self.stage_waiting.labels(**m, stage=s_id).set(0)

    def queue(self, waiting: int, running: int) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.stage_waiting.labels(model_name=MODEL, stage="0").set(waiting)

    def finished(self, rng: random.Random, arrived: float, scheduled: float, now: float,
                 prompt: int, generated: int, reason: str) -> None:
        """One request through both stages: the LLM stage just finished; the diffusion
        stage is simulated from it."""
        steps = rng.randint(20, 50)
        per_step = rng.uniform(0.01, 0.03)
        vae = rng.uniform(0.03, 0.06)
        diffusion = steps * per_step + vae
        m = {"model_name": MODEL}
        at = {**m, "stage": "1", "replica": "0"}
        hop = {**m, "from_stage": "0", "from_replica": "0", "to_stage": "1",
               "to_replica": "0"}
        self.transfer["transfer_size_bytes"].labels(**hop).observe(generated * 4096)
        self.transfer["transfer_tx_s"].labels(**hop).observe(0.001 + generated / 2e6)
        self.transfer["transfer_rx_s"].labels(**hop).observe(0.0005 + generated / 4e6)
        self.transfer["transfer_in_flight_s"].labels(**hop).observe(0.002 + generated / 1e6)
        self.in_queue.labels(**m, stage="1").observe(0.0)
        for name, value in (("diffusion_exec_s", steps * per_step),
                            ("diffusion_exec_per_step_s", per_step),
                            ("diffusion_preprocess_s", 0.004),
                            ("diffusion_postprocess_s", vae),
                            ("vae_decode_s", vae), ("denoise_step_latency_s", per_step)):
            self.diffusion[name].labels(**at).observe(value)
        self.steps.observe(steps)
        self.images.inc()
        self.pixels.observe(1024 * 1024)
        self.stage_gen.labels(**m, stage="0", stage_type="llm").observe(now - scheduled)
        self.stage_gen.labels(**m, stage="1", stage_type="diffusion").observe(diffusion)
        self.queue_wait.observe(scheduled - arrived)
        self.e2e.observe(now - arrived + diffusion)
        self.prompt_tokens.inc(prompt)
        self.gen_tokens.inc(generated)
        self.success.labels(**m, finished_reason=reason).inc()


def serve(registry: CollectorRegistry, negotiate: bool = False,
          port: int = 0) -> tuple[object, int]:
    """Start a /metrics endpoint on ``port`` (0: a free one) of every interface.

    ``negotiate=False``: always the text format 0.0.4, as vLLM 0.33's own /metrics route
    answers. ``negotiate=True``: prometheus_client's own negotiating WSGI app, the library
    path SGLang 0.5.23 serves through (``make_asgi_app``): a scraper asking for OpenMetrics
    gets it, and prometheus_client >= 0.23 then writes ``sglang_num_running_reqs`` for
    ``sglang:num_running_reqs``, exactly as the real engine does."""
    import http.server
    import socketserver
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    pc.disable_created_metrics()
    if negotiate:
        class Quiet(WSGIRequestHandler):
            def log_message(self, *a):
                pass

        class Threading(socketserver.ThreadingMixIn, WSGIServer):
            daemon_threads = True

        server = make_server("0.0.0.0", port, pc.make_wsgi_app(registry), Threading, Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, server.server_address[1]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = pc.generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", pc.CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


class Scrapes:
    """How often a registry was read (its /metrics scraped): a collector that adds no
    family. A run's driver keeps its endpoints up until Prometheus has read them after
    the run (``until_scraped``), not for a fixed while."""

    def __init__(self) -> None:
        self.count = 0

    def collect(self):
        self.count += 1
        return []


def until_scraped(scrapes: list[Scrapes], most_s: float, times: int = 2,
                  meanwhile: Callable[[], object] | None = None) -> bool:
    """Wait until each endpoint was read ``times`` more times from now (a rate over the
    run's last values needs two samples), at most ``most_s`` seconds, calling
    ``meanwhile`` (an engine serving on) every 0.1 s; whether they were."""
    want = [s.count + times for s in scrapes]
    deadline = time.monotonic() + most_s
    while not all(s.count >= w for s, w in zip(scrapes, want, strict=True)):
        if time.monotonic() > deadline:
            return False
        if meanwhile is not None:
            meanwhile()
        time.sleep(0.1)
    return True


@dataclass
class Request:
    prompt: int
    target: int
    arrived: float
    scheduled: float = 0.0
    first_token: float = 0.0
    generated: int = 0
    rid: str = ""
    preemptions: int = 0
    per_tick: int = 0  # 0: the engine's rate; a long-tail request may set its own


# vLLM's request span (vllm/tracing.py SpanAttributes, vLLM 0.33; one span per finished
# request from OutputProcessor.do_tracing, kind SERVER, started at the request's arrival)
LLM_REQUEST = "llm_request"


def init_tracer(endpoint: str):
    """As vllm/tracing.py ``init_tracer`` makes the engine's tracer: an SDK
    TracerProvider, a batch processor over the OTLP exporter the environment chooses
    (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: gRPC unless http/protobuf; its headers from
    OTEL_EXPORTER_OTLP_TRACES_HEADERS), installed as the process's global provider."""
    import os

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import set_tracer_provider

    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    if protocol != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r}: this FAKE engine speaks only "
                         "http/protobuf (rl-insight ray-env sets it)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint),
                                                   schedule_delay_millis=500))
    set_tracer_provider(provider)
    return provider.get_tracer("vllm.v1.engine.output_processor")


@dataclass
class EngineState:
    waiting: list[Request] = field(default_factory=list)
    running: list[Request] = field(default_factory=list)
    kv_capacity_tokens: int = 40_000
    max_running: int = 16
    tokens_per_tick: int = 24  # per running request per 50 ms tick
    sleep_level: int = 0


class _Metrics:
    """The engine's metric objects under one backend's names."""

    def __init__(self, backend: str, registry: CollectorRegistry) -> None:
        self.backend = backend
        self.omni: OmniPipeline | None = None
        if backend == "sglang":
            # SGLang 0.5.23, srt/observability/metrics_collector.py: scheduler gauges are
            # labelled model_name, engine_type, tp_rank, pp_rank, moe_ep_rank ("unified"
            # and rank "0" on one GPU; L364-404); tokenizer families model_name,
            # engine_type, plus is_streaming (L1855-2067), with their own buckets
            sched = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0",
                     "pp_rank": "0", "moe_ep_rank": "0"}
            tok = {"model_name": MODEL, "engine_type": "unified", "is_streaming": "false"}
            self.tok = tok

            def sg(name, doc):
                return Gauge(name, doc, list(sched), registry=registry).labels(**sched)

            def tc(name, doc):
                return Counter(name, doc, list(tok), registry=registry).labels(**tok)

            def th(name, doc, buckets):
                return Histogram(name, doc, list(tok), buckets=buckets,
                                 registry=registry).labels(**tok)

            self.running = sg("sglang:num_running_reqs", "The number of running requests.")
            self.waiting = sg("sglang:num_queue_reqs", "The number of requests in the "
                              "waiting queue.")
            self.kv = sg("sglang:token_usage", "The token usage.")
            self.throughput = sg("sglang:gen_throughput", "The generation throughput "
                                 "(token/s).")
            self.cache_hit = sg("sglang:cache_hit_rate", "The prefix cache hit rate.")
            # cached prompt tokens by where the prefix came from (device, host, storage)
            self.cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt "
                                         "tokens", [*tok, "cache_source"], registry=registry)
            self.prompt_tokens = tc("sglang:prompt_tokens", "Number of prefill tokens "
                                    "processed.")
            self.gen_tokens = tc("sglang:generation_tokens", "Number of generation tokens "
                                 "processed.")
            self.ttft = th("sglang:time_to_first_token_seconds", "Histogram of time to first "
                           "token in seconds.", SGLANG_TTFT_BUCKETS)
            self.e2e = th("sglang:e2e_request_latency_seconds", "Histogram of End-to-end "
                          "request latency in seconds", SGLANG_E2E_BUCKETS)
            self.sched = sched
            # L837 (scheduler labels), L884 (+stage), L2050 (tokenizer labels, no
            # is_streaming); buckets as upstream
            self.queue_time = Histogram("sglang:queue_time_seconds", "Histogram of queueing "
                                        "time in seconds.", list(sched),
                                        buckets=SGLANG_QUEUE_BUCKETS,
                                        registry=registry).labels(**sched)
            self.stage = Histogram("sglang:per_stage_req_latency_seconds", "The latency of "
                                   "each stage of requests.", [*sched, "stage"],
                                   buckets=SGLANG_STAGE_BUCKETS, registry=registry)
            tl = {"model_name": MODEL, "engine_type": "unified"}
            self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-"
                                 "token latency in seconds.", list(tl),
                                 buckets=SGLANG_ITL_BUCKETS, registry=registry).labels(**tl)
            # L552/L573: these two have no multiprocess mode, so SGLang exposes them with
            # a `pid` label as well
            pid = {**sched, "pid": str(os.getpid())}
            self.paused = Gauge("sglang:num_paused_reqs", "The number of paused requests "
                                "by async weight sync.", list(pid),
                                registry=registry).labels(**pid)
            self.retracted = Gauge("sglang:num_retracted_reqs", "The number of retracted "
                                   "requests.", list(pid), registry=registry).labels(**pid)
            return
        # vLLM 0.33 labels its engine metrics model_name, engine; vLLM-Omni 0.30.0's
        # OmniPrometheusStatLogger (metrics/stat_logger.py) replaces engine with the
        # pipeline stage and its own replica index: stage 0 (the LLM), replica 0
        labels = {"model_name": MODEL, "stage": "0", "replica": "0"} \
            if backend == "vllm_omni" else {"model_name": MODEL, "engine": "0"}
        names = list(labels)
        self.omni = OmniPipeline(registry) if backend == "vllm_omni" else None

        def g(name, doc, extra=()):
            return Gauge(name, doc, names + list(extra), registry=registry)

        def c(name, doc, extra=()):
            return Counter(name, doc, names + list(extra), registry=registry)

        def h(name, doc, buckets):
            return Histogram(name, doc, names, buckets=buckets,
                             registry=registry).labels(**labels)

        self.running = g("vllm:num_requests_running", "Running requests").labels(**labels)
        self.waiting = g("vllm:num_requests_waiting", "Waiting requests").labels(**labels)
        self.kv = g("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full").labels(**labels)
        self.sleep = g("vllm:engine_sleep_state", "Engine sleep state", ["sleep_state"])
        self.prompt_tokens = c("vllm:prompt_tokens", "Prefill tokens").labels(**labels)
        self.gen_tokens = c("vllm:generation_tokens", "Generation tokens").labels(**labels)
        self.preemptions = c("vllm:num_preemptions", "Preemptions").labels(**labels)
        self.success = c("vllm:request_success", "Finished requests", ["finished_reason"])
        self.prefix_queries = c("vllm:prefix_cache_queries", "Prefix cache queries (tokens)"
                                ).labels(**labels)
        self.prefix_hits = c("vllm:prefix_cache_hits", "Prefix cache hits (tokens)"
                             ).labels(**labels)
        self.ttft = h("vllm:time_to_first_token_seconds", "TTFT", LATENCY_BUCKETS)
        self.itl = h("vllm:inter_token_latency_seconds", "Inter-token latency",
                     (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25))
        self.e2e = h("vllm:e2e_request_latency_seconds", "E2E latency", LATENCY_BUCKETS)
        self.queue_time = h("vllm:request_queue_time_seconds", "Queue time", LATENCY_BUCKETS)
        self.prefill = h("vllm:request_prefill_time_seconds", "Prefill time", LATENCY_BUCKETS)
        self.decode = h("vllm:request_decode_time_seconds", "Decode time", LATENCY_BUCKETS)
        self.req_prompt = h("vllm:request_prompt_tokens", "Prompt tokens per request",
                            TOKEN_BUCKETS)
        self.req_gen = h("vllm:request_generation_tokens", "Generated tokens per request",
                         TOKEN_BUCKETS)
        self.iteration = h("vllm:iteration_tokens_total", "Tokens per engine step",
                           TOKEN_BUCKETS)
        self.labels = labels
        # vLLM 0.33 with VLLM_SERVER_DEV_MODE=1 (what RL weight sync uses): per operation,
        # no model/engine labels. entrypoints/rl/online/metrics.py L19/L26,
        # entrypoints/serve/dev/sleep/metrics.py L21/L28; buckets as upstream
        self.op_duration = {
            fam: Histogram(f"vllm:{fam}_operation_duration_seconds", doc, ["operation"],
                           buckets=OPERATION_BUCKETS, registry=registry)
            for fam, doc in (("rl_weight_update", "Duration of RL weight-update operations"),
                             ("sleep_mode", "Duration of sleep-mode operations"))}
        self.op_in_flight = {
            fam: Gauge(f"vllm:{fam}_operations_in_flight", doc, ["operation"],
                       registry=registry)
            for fam, doc in (("rl_weight_update", "RL weight-update operations running"),
                             ("sleep_mode", "Sleep-mode operations running"))}
        # loggers.py L548 (reasons pre-created) and L951 (TPOT, ITL buckets)
        self.waiting_by_reason = g("vllm:num_requests_waiting_by_reason",
                                   "Waiting requests by reason", ["reason"])
        for reason in ("capacity", "deferred"):
            self.waiting_by_reason.labels(**labels, reason=reason).set(0)
        # vLLM 0.33 v1/spec_decode/metrics.py (SpecDecodingProm), with
        # --speculative-config num_speculative_tokens=3: the FAKE vLLM drafts 3 tokens per
        # running request and engine step (vLLM-Omni's LLM stage here runs without it)
        self.spec = None
        if backend == "vllm":
            self.spec = {
                "drafts": c("vllm:spec_decode_num_drafts", "Drafts").labels(**labels),
                "draft_tokens": c("vllm:spec_decode_num_draft_tokens", "Draft tokens"
                                  ).labels(**labels),
                "accepted": c("vllm:spec_decode_num_accepted_tokens", "Accepted tokens"
                              ).labels(**labels),
                "per_pos": c("vllm:spec_decode_num_accepted_tokens_per_pos",
                             "Accepted tokens per draft position", ["position"])}
            self.spec["per_pos"] = [self.spec["per_pos"].labels(**labels, position=str(p))
                                    for p in range(3)]
        self.tpot = h("vllm:request_time_per_output_token_seconds", "Time per output token",
                      VLLM_ITL_BUCKETS)
        for state in SLEEP_STATES:
            self.sleep.labels(**labels, sleep_state=state).set(1 if state == "awake" else 0)
        for reason in ("stop", "length"):
            self.success.labels(**labels, finished_reason=reason)


class FakeEngine:
    """A simulated engine driven by a 50 ms tick; thread-safe."""

    TICK = 0.05

    def __init__(self, backend: str, seed: int = 0, kv_capacity_tokens: int = 0,
                 port: int = 0, otlp_traces_endpoint: str = "", live: bool = True,
                 slots: int = 0, tokens: tuple[int, int] = (32, 600)) -> None:
        """``live=False``: no HTTP server and no clock thread, for a caller that drives
        ``_tick`` on simulated time and reads ``registry`` itself (bench/scale_engines.py).
        ``slots``: requests running at once (0: 16); ``tokens``: the range a request's
        response length is drawn from."""
        self.backend = backend
        # vLLM's --otlp-traces-endpoint: an llm_request span per finished request
        self.tracer = init_tracer(otlp_traces_endpoint) if otlp_traces_endpoint else None
        self._ids = 0
        self.registry = CollectorRegistry()
        self.m = _Metrics(backend, registry=self.registry)
        self.scrapes = Scrapes()  # its /metrics read: the driver's end waits for one
        self.registry.register(self.scrapes)
        self.s = EngineState()
        if kv_capacity_tokens:  # a smaller KV cache: saturation and preemptions
            self.s.kv_capacity_tokens = kv_capacity_tokens
        if slots:  # fewer at once: the engine's time grows with its share of the batch
            self.s.max_running = slots
        self.tokens = tokens
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.finished = 0
        self.prompt_total = 0
        # the simulation's drifts (examples/drifts.py): responses this many times as
        # long; the most KV-cache tokens a tick used; preemptions not yet counted out
        self.length_factor = 1.0
        self.peak_tokens = 0
        self.preempted = 0
        self._recent_tokens: list[tuple[float, int]] = []
        self.server, self.port = None, port
        if not live:
            return
        # SGLang answers through prometheus_client's negotiating app; vLLM in text
        self.server, self.port = serve(self.registry, negotiate=backend == "sglang",
                                       port=port)
        threading.Thread(target=self._loop, daemon=True, name="fake-engine").start()

    # -- driven by the RL step ----------------------------------------------------------
    def submit(self, n: int) -> None:
        now = time.time()
        with self.lock:
            for _ in range(n):
                self._ids += 1
                self.s.waiting.append(Request(self.rng.randint(64, 512),
                                              int(self.rng.randint(*self.tokens) *
                                                  self.length_factor), now,
                                              rid=f"cmpl-{self.port}-{self._ids}"))

    def submit_long(self, tokens: int, seconds: float) -> str:
        """One long-tail request: ``tokens`` generated over about ``seconds`` of decode
        (a reasoning model's 30,000-token answer, at the pace of a fast GPU). Its id."""
        with self.lock:
            self._ids += 1
            rid = f"cmpl-{self.port}-{self._ids}-long"
            self.s.waiting.insert(0, Request(
                512, tokens, time.time(), rid=rid,
                per_tick=max(1, int(tokens * self.TICK / seconds))))
            return rid

    def _trace(self, r: Request, now: float) -> None:
        """OutputProcessor.do_tracing: the finished request's llm_request span."""
        from opentelemetry.trace import SpanKind

        queue = r.scheduled - r.arrived
        ttft = r.first_token - r.arrived
        span = self.tracer.start_span(LLM_REQUEST, kind=SpanKind.SERVER,
                                      start_time=int(r.arrived * 1e9))
        for k, v in (("gen_ai.response.model", MODEL), ("gen_ai.request.id", r.rid),
                     ("gen_ai.request.max_tokens", r.target),
                     ("gen_ai.usage.prompt_tokens", r.prompt),
                     ("gen_ai.usage.completion_tokens", r.generated),
                     ("gen_ai.latency.time_in_queue", queue),
                     ("gen_ai.latency.time_to_first_token", ttft),
                     ("gen_ai.latency.e2e", now - r.arrived),
                     ("gen_ai.latency.time_in_model_prefill", r.first_token - r.scheduled),
                     ("gen_ai.latency.time_in_model_decode", now - r.first_token),
                     ("gen_ai.latency.time_in_model_inference", now - r.scheduled)):
            span.set_attribute(k, v)
        if r.preemptions:  # the request journey's PREEMPTED events carry the count
            span.add_event("journey", {"event.type": "PREEMPTED",
                                       "num_preemptions": r.preemptions})
        span.end(end_time=int(now * 1e9))

    def busy(self) -> bool:
        with self.lock:
            return bool(self.s.waiting or self.s.running)

    def snapshot(self) -> dict:
        """What a router polls of the engine: running and waiting requests, KV-cache use
        (a fraction), prompt tokens so far."""
        with self.lock:
            used = sum(r.prompt + r.generated for r in self.s.running)
            return {"running": float(len(self.s.running)),
                    "waiting": float(len(self.s.waiting)),
                    "kv": min(1.0, used / max(self.s.kv_capacity_tokens, 1)),
                    "prompt_tokens": float(self.prompt_total)}

    def operation(self, family: str, operation: str, seconds: float) -> None:
        """A vLLM dev-mode operation (``sleep_mode``: sleep, wake, release_kv_cache_memory;
        ``rl_weight_update``: start, update, finish) taking ``seconds``."""
        if self.backend != "vllm":  # SGLang and vLLM-Omni: no such metrics
            time.sleep(seconds)
            return
        gauge = self.m.op_in_flight[family].labels(operation=operation)
        gauge.inc()
        time.sleep(seconds)
        gauge.dec()
        self.m.op_duration[family].labels(operation=operation).observe(seconds)

    def set_sleep(self, level: int) -> None:
        """0 awake, 1 weights offloaded, 2 everything discarded."""
        with self.lock:
            self.s.sleep_level = level
            if self.backend == "sglang":  # requests wait out the weight sync paused
                self.m.paused.set(len(self.s.waiting) if level else 0)
            if level:
                self.m.kv.set(0)
        if self.backend != "sglang":
            for i, state in enumerate(SLEEP_STATES):
                self.m.sleep.labels(**self.m.labels, sleep_state=state).set(
                    1 if i == level else 0)

    def _speculate(self, drafts: int) -> None:
        """One engine step's drafts: position p is accepted only after p-1 was (p=0.7)."""
        spec = self.m.spec
        spec["drafts"].inc(drafts)
        spec["draft_tokens"].inc(3 * drafts)
        for _ in range(drafts):
            for pos in range(3):
                if self.rng.random() > 0.7:
                    break
                spec["per_pos"][pos].inc()
                spec["accepted"].inc()

    # -- the engine -----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            time.sleep(self.TICK)
            try:
                self._tick(time.time())
            except Exception:  # a fake must not die mid-run
                pass

    def _tick(self, now: float) -> None:
        m, s = self.m, self.s
        with self.lock:
            if s.sleep_level:
                return
            used = sum(r.prompt + r.generated for r in s.running)
            while s.waiting and len(s.running) < s.max_running and \
                    used + s.waiting[0].prompt < s.kv_capacity_tokens * 0.9:
                r = s.waiting.pop(0)
                r.scheduled = now
                used += r.prompt
                s.running.append(r)
                m.prompt_tokens.inc(r.prompt)
                self.prompt_total += r.prompt
                if self.backend == "sglang":
                    m.cached_tokens.labels(**m.tok, cache_source="device").inc(
                        int(r.prompt * 0.3))
                    m.queue_time.observe(now - r.arrived)
                    m.stage.labels(**m.sched, stage="request_process").observe(0.002)
                    m.stage.labels(**m.sched, stage="prefill_forward").observe(
                        0.02 + r.prompt / 20_000)
                else:
                    m.queue_time.observe(now - r.arrived)
                    m.prefill.observe(0.02 + r.prompt / 20_000)
                    m.req_prompt.observe(r.prompt)
                    m.prefix_queries.inc(r.prompt)
                    m.prefix_hits.inc(int(r.prompt * 0.3))
            step_tokens = 0
            done = []
            for r in s.running:
                n = min(r.per_tick or s.tokens_per_tick, r.target - r.generated)
                if r.generated == 0 and n:
                    r.first_token = now
                    m.ttft.observe(now - r.arrived)
                r.generated += n
                step_tokens += n
                if r.generated >= r.target:
                    done.append(r)
            for r in done:
                s.running.remove(r)
                self.finished += 1
                m.e2e.observe(now - r.arrived)
                if self.backend == "sglang":
                    m.itl.observe(self.TICK / s.tokens_per_tick)
                if self.backend != "sglang":
                    m.success.labels(**m.labels, finished_reason="length" if r.target > 500
                                     else "stop").inc()
                    m.decode.observe(now - r.first_token)
                    m.req_gen.observe(r.generated)
                    m.itl.observe(self.TICK / s.tokens_per_tick)
                    m.tpot.observe((now - r.first_token) / max(r.generated - 1, 1))
                if m.omni is not None:
                    m.omni.finished(self.rng, r.arrived, r.scheduled, now, r.prompt,
                                    r.generated, "length" if r.target > 500 else "stop")
                if self.tracer is not None:
                    self._trace(r, now)
            used = sum(r.prompt + r.generated for r in s.running)
            self.peak_tokens = max(self.peak_tokens, used)
            retracted = 0
            if used > s.kv_capacity_tokens * 0.95 and s.running:
                victim = s.running.pop()  # preempted: back to the queue, recomputed later
                victim.generated = 0
                victim.preemptions += 1
                self.preempted += 1
                s.waiting.insert(0, victim)
                retracted = 1
                if self.backend != "sglang":
                    m.preemptions.inc()
            if self.backend == "sglang":  # SGLang's name for it: retracted requests
                m.retracted.set(retracted)
            m.gen_tokens.inc(step_tokens)
            m.running.set(len(s.running))
            m.waiting.set(len(s.waiting))
            if m.omni is not None:
                m.omni.queue(len(s.waiting), len(s.running))
            if self.backend != "sglang":  # the queue waits on KV capacity in this model
                m.waiting_by_reason.labels(**m.labels, reason="capacity").set(len(s.waiting))
            m.kv.set(min(used / s.kv_capacity_tokens, 1.0))
            if self.backend != "sglang":
                m.iteration.observe(step_tokens + sum(1 for _ in done))
                if m.spec is not None and s.running:
                    self._speculate(len(s.running))
            else:
                self._recent_tokens.append((now, step_tokens))
                self._recent_tokens = [(t, k) for t, k in self._recent_tokens if now - t < 2]
                m.throughput.set(sum(k for _, k in self._recent_tokens) / 2)
                m.cache_hit.set(0.3 + 0.1 * self.rng.random())
