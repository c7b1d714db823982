"""One process of a verl run whose engines trace with their own code: vLLM 0.34.0 or
SGLang 0.5.23, each installed without its dependencies next to the suite's CPU torch
(``make setup`` puts them in .venv/engines). Run by tests/test_engine_tracing.py, with the
environment ``rl-insight ray-env`` gives a job (the endpoint, the token and the exporter's
headers and protocol).

``replica R``: a rollout replica's engine front end as verl's vLLM server runs it
(verl/workers/rollout/vllm_rollout/vllm_async_server.py, 0.9.1 line 639 and main at
047621b2): the engine starts first (vllm/v1/engine/async_llm.py: ``init_tracer(
"vllm.llm_engine", otlp_traces_endpoint)`` when ``--otlp-traces-endpoint`` is given), then
each request is its own coroutine inside ``trace_state("vllm_generate",
state_lane_id=f"replica_{R}")`` while one output loop feeds the engine core's outputs
through vLLM's ``OutputProcessor.process_outputs``, whose ``do_tracing``
(vllm/v1/engine/output_processor.py) makes each finished request's ``llm_request`` span
and vLLM's BatchSpanProcessor exports it. Only the engine core (the GPU) is played here:
its outputs (new token ids, QUEUED/SCHEDULED events, finish reason) on a 50 ms tick.

``replica R --engine sglang``: the same replica with SGLang's request tracing
(sglang/srt/observability/trace.py, 0.5.23): ``process_tracing_init`` as http_server.py
runs it for ``--enable-trace --otlp-traces-endpoint`` (its TracerProvider, its
BatchSpanProcessor and OTLP exporter), and per request a ``TraceReqContext``:
``trace_req_start`` at creation, ``trace_req_finish`` with the root span's ``gen_ai.*``
attributes. What calls those in SGLang does not import on this CPU machine:
req_time_stats.py (``APIServerReqTimeStats``) imports sglang/srt/configs, whose
janus_pro.py registers an image processor that needs torchvision, and PyPI's torchvision
does not load beside the CPU torch 2.13 here (its ``torchvision::nms`` operator is
missing); the tokenizer manager likewise. So their part is played, with the attributes
as ``TokenizerManager.convert_to_span_attrs`` and
``APIServerReqTimeStats.convert_to_gen_ai_span_attrs`` build them.

``trainer``: the step marks, as verl's trainer logs them (``training/global_step`` and
``timing_s/step`` at each step's end).

All processes keep one wall-clock schedule (``--t0``, ``--steps``: each step's seconds),
so a replica's requests end inside the step the trainer marks. At the end a replica
prints ``SPANS <json>``: each span's attributes and its resource, as vLLM's provider made
them (an in-memory exporter beside vLLM's own), so the test can tell how each was
attributed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
from pathlib import Path

import rl_insight

TICK = 0.05  # the engine core's step


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["replica", "trainer"])
    p.add_argument("--replica", type=int, default=0)
    p.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    p.add_argument("--t0-file", required=True, help="the schedule's start, once all are up")
    p.add_argument("--ready", required=True, help="touched once this process is up")
    p.add_argument("--steps", required=True, help="each step's seconds, comma-separated")
    p.add_argument("--requests", type=int, default=6, help="per step")
    p.add_argument("--long", default="", help="STEP:TOKENS: one request that long")
    p.add_argument("--endpoint", default="", help="vLLM's --otlp-traces-endpoint")
    return p.parse_args()


def start_time(args: argparse.Namespace) -> float:
    """Say this process is up, then wait (at most 120 s) for the common start."""
    Path(args.ready).touch()
    t0 = Path(args.t0_file)
    deadline = time.monotonic() + 120
    while not t0.exists() or not t0.read_text().strip():
        if time.monotonic() > deadline:
            raise SystemExit(f"no start time in {t0} after 120 s")
        time.sleep(0.05)
    return float(t0.read_text())


def schedule(args: argparse.Namespace) -> list[tuple[int, float, float]]:
    """(step, start, end) in wall-clock seconds."""
    out, t = [], args.t0
    for i, d in enumerate(float(x) for x in args.steps.split(",")):
        out.append((i + 1, t, t + d))
        t += d
    return out


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def trainer(args: argparse.Namespace) -> None:
    # Tracking.__init__ -> rl_insight.init(project, experiment_name) in verl's trainer
    import os

    rl_insight.init(os.environ["RL_INSIGHT_PROJECT"], os.environ["RL_INSIGHT_EXPERIMENT_NAME"])
    args.t0 = start_time(args)
    for step, start, end in schedule(args):
        sleep_until(end)
        rl_insight.metric_gauge("training_global_step", float(step))
        rl_insight.metric_gauge("timing_s_step", end - start)
    rl_insight.finish()
    print("TRAINER done", flush=True)


def watched(provider):
    """An in-memory exporter beside the engine's own, for the test to read."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(seen))
    return seen


class VLLM:
    """vLLM's front end over a played engine core."""

    def __init__(self, endpoint: str) -> None:
        from opentelemetry import trace
        from vllm.tracing import init_tracer
        from vllm.v1.engine.output_processor import OutputProcessor

        init_tracer("vllm.llm_engine", endpoint)  # AsyncLLM.__init__
        self.provider = trace.get_tracer_provider()
        self.seen = watched(self.provider)
        # AsyncLLM: OutputProcessor(tokenizer, log_stats=..., tracing_enabled=endpoint set)
        self.processor = OutputProcessor(tokenizer=None, log_stats=True,
                                         tracing_enabled=True)
        self.active: dict[str, dict] = {}
        self.done: dict[str, asyncio.Future] = {}

    def add(self, rid: str, prompt: int, tokens: int, queue_s: float, decode_s: float,
            ) -> asyncio.Future:
        import numpy as np
        from vllm.sampling_params import SamplingParams
        from vllm.v1.engine import EngineCoreRequest

        req = EngineCoreRequest(
            request_id=f"{rid}-internal", prompt_token_ids=np.arange(prompt) % 1000 + 1,
            mm_features=None,
            sampling_params=SamplingParams(max_tokens=tokens, detokenize=False),
            pooling_params=None, arrival_time=time.time(), lora_request=None,
            cache_salt=None, data_parallel_rank=None, external_req_id=rid)
        self.processor.add_request(req, prompt=None)
        now = time.monotonic()
        per_tick = max(1, math.ceil(tokens / max(1.0, decode_s / TICK)))
        self.active[req.request_id] = {"queued": now, "start_at": now + queue_s,
                                       "scheduled": None, "left": tokens,
                                       "per_tick": per_tick}
        fut = asyncio.get_running_loop().create_future()
        self.done[req.request_id] = fut
        return fut

    def tick(self) -> None:
        """One engine-core step's outputs through vLLM's OutputProcessor."""
        from vllm.v1.engine import (
            EngineCoreEvent,
            EngineCoreEventType,
            EngineCoreOutput,
            FinishReason,
        )
        from vllm.v1.metrics.stats import IterationStats

        now = time.monotonic()
        outputs, finished = [], []
        for rid, r in self.active.items():
            if r["scheduled"] is None:
                if now >= r["start_at"]:  # scheduled now; its first token next tick
                    r["scheduled"] = now
                    outputs.append(EngineCoreOutput(rid, [], events=[
                        EngineCoreEvent(EngineCoreEventType.QUEUED, r["queued"]),
                        EngineCoreEvent(EngineCoreEventType.SCHEDULED, now)]))
                continue
            n = min(r["per_tick"], r["left"])
            r["left"] -= n
            last = r["left"] == 0
            outputs.append(EngineCoreOutput(
                rid, [7] * n, finish_reason=FinishReason.LENGTH if last else None))
            if last:
                finished.append(rid)
        if outputs:
            self.processor.process_outputs(outputs, now, IterationStats())
        for rid in finished:
            del self.active[rid]
            self.done.pop(rid).set_result(None)


class SGLang:
    """SGLang's request tracing (trace.py's TraceReqContext) over a played tokenizer
    manager and scheduler."""

    def __init__(self, endpoint: str) -> None:
        from opentelemetry import trace
        from sglang.srt.observability.trace import process_tracing_init, trace_set_thread_info

        process_tracing_init(endpoint, "sglang")  # http_server.py, --enable-trace
        trace_set_thread_info("Tokenizer")
        self.provider = trace.get_tracer_provider()
        self.seen = watched(self.provider)
        self.active: dict[str, dict] = {}
        self.done: dict[str, asyncio.Future] = {}

    def add(self, rid: str, prompt: int, tokens: int, queue_s: float, decode_s: float,
            ) -> asyncio.Future:
        from sglang.srt.observability.trace import TraceReqContext

        # APIServerReqTimeStats.init_trace_ctx and set_created_time
        ctx = TraceReqContext(rid=rid, bootstrap_room=None, role="unified",
                              module_name="request")
        now = time.perf_counter()
        ctx.trace_req_start(realtime_ns(now))
        self.active[rid] = {"ctx": ctx, "created": now, "dispatched": now + 0.001,
                            "first_at": now + queue_s + TICK,
                            "done_at": now + queue_s + TICK + decode_s, "prompt": prompt,
                            "tokens": tokens, "first": 0.0}
        fut = asyncio.get_running_loop().create_future()
        self.done[rid] = fut
        return fut

    def tick(self) -> None:
        """The outputs the scheduler's batches bring back (_handle_batch_output): the
        first token's time once, then the finish (set_finished_time: the root span ends
        with the tokenizer manager's attributes and the latencies)."""
        now = time.perf_counter()
        for rid in list(self.active):
            r = self.active[rid]
            if not r["first"] and now >= r["first_at"]:
                r["first"] = now
            if r["first"] and now >= r["done_at"]:
                r["ctx"].trace_req_finish(realtime_ns(now), attrs=self.span_attrs(rid, r, now))
                del self.active[rid]
                self.done.pop(rid).set_result(None)

    @staticmethod
    def span_attrs(rid: str, r: dict, finished: float) -> dict:
        """TokenizerManager.convert_to_span_attrs's keys and values, with
        APIServerReqTimeStats.convert_to_gen_ai_span_attrs's latencies."""
        return {"gen_ai.usage.completion_tokens": r["tokens"],
                "gen_ai.usage.prompt_tokens": r["prompt"], "gen_ai.usage.cached_tokens": 0,
                "gen_ai.request.id": rid, "gen_ai.request.max_tokens": r["tokens"],
                "gen_ai.request.temperature": 1.0, "gen_ai.response.model": "Qwen2.5-7B",
                "gen_ai.response.finish_reasons": json.dumps(["length"]),
                "gen_ai.latency.time_to_first_token": r["first"] - r["created"],
                "gen_ai.latency.e2e": finished - r["created"],
                "gen_ai.latency.time_in_model_decode": finished - r["first"],
                "gen_ai.latency.time_in_model_inference": finished - r["dispatched"],
                "gen_ai.latency.time_in_model_prefill": r["first"] - r["dispatched"]}


def realtime_ns(perf: float) -> int:
    """req_time_stats.convert_time_to_realtime_ns: a perf_counter time on the wall clock."""
    return int((perf + time.time() - time.perf_counter()) * 1e9)


async def replica(args: argparse.Namespace) -> list[dict]:
    engine = (VLLM if args.engine == "vllm" else SGLang)(args.endpoint)
    lane = f"replica_{args.replica}"
    long_step, long_tokens = (int(x) for x in args.long.split(":")) if args.long else (0, 0)
    args.t0 = start_time(args)

    async def generate(rid: str, prompt: int, tokens: int, queue_s: float,
                       decode_s: float) -> None:
        # vLLMHttpServer.generate: each request in its own coroutine, inside the lane state
        with rl_insight.trace_state(f"{args.engine}_generate", state_lane_id=lane):
            await engine.add(rid, prompt, tokens, queue_s, decode_s)

    async def engine_loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            engine.tick()
            await asyncio.sleep(TICK)

    stop = asyncio.Event()
    loop_task = asyncio.create_task(engine_loop(stop))
    for step, start, _end in schedule(args):
        await asyncio.sleep(max(0.0, start + 0.2 - time.time()))
        jobs = [generate(f"step{step}-r{args.replica}-{i}", 200 + 10 * i, 400, 0.1 * i, 1.5)
                for i in range(args.requests)]
        if step == long_step:
            jobs.append(generate(f"step{step}-r{args.replica}-long", 300, long_tokens,
                                 0.0, 6.0))
        await asyncio.gather(*jobs)
    stop.set()
    await loop_task
    rl_insight.finish()  # the lane's last spans
    engine.provider.force_flush()  # vLLM's BatchSpanProcessor: every request span out
    return [{"name": s.name, "attributes": dict(s.attributes),
             "resource": dict(s.resource.attributes)}
            for s in engine.seen.get_finished_spans()]


def main() -> None:
    args = parse()
    if args.role == "trainer":
        trainer(args)
        return
    spans = asyncio.run(replica(args))
    print("SPANS " + json.dumps(spans, default=str), flush=True)


if __name__ == "__main__":
    main()
