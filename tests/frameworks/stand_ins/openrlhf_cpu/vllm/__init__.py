"""FAKE vLLM: the names openrlhf 0.11.2 calls (``AsyncEngineArgs``,
``AsyncLLMEngine.from_engine_args``, ``SamplingParams``, ``inputs.TokensPrompt``,
``utils.random_uuid``; openrlhf/trainer/ray/vllm_engine.py, samples_generator.py,
utils/agent.py), on no GPU. As vLLM's own ``AsyncLLM`` does in the process that builds it
(vllm/v1/metrics/loggers.py PrometheusStatLogger), the engine keeps its ``vllm:*``
metrics in prometheus_client's global registry, served nowhere: here those of the
project's FAKE vLLM engine (examples/fake_engines.py, vLLM's names and labels), moved by
the requests this engine serves."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field

__version__ = "0.29.0"  # what openrlhf 0.11.2's setup.py pins
GENERATE_S = 0.08  # a request's generation here
RESPONSE_TOKENS = 12


class SamplingParams:
    def __init__(self, temperature=1.0, top_p=1.0, top_k=-1, max_tokens=None, min_tokens=0,
                 skip_special_tokens=True, logprobs=None, **kwargs):
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_tokens, self.min_tokens = max_tokens, min_tokens
        self.skip_special_tokens, self.logprobs = skip_special_tokens, logprobs


class AsyncEngineArgs:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


@dataclass
class CompletionOutput:
    token_ids: list
    finish_reason: str = "stop"
    logprobs: list | None = None
    text: str = ""


@dataclass
class RequestOutput:
    request_id: str
    outputs: list = field(default_factory=list)
    finished: bool = True


class _Outputs:
    def __init__(self) -> None:
        self.unfinished = 0

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> AsyncLLMEngine:
        return cls(engine_args)

    def __init__(self, engine_args: AsyncEngineArgs) -> None:
        from prometheus_client import REGISTRY

        from examples.fake_engines import FakeEngine

        self.fake = FakeEngine("vllm", seed=int(engine_args.kwargs.get("seed", 0)),
                               live=False)
        REGISTRY.register(self.fake.registry)  # vLLM's own families: the global registry
        self.output_processor = _Outputs()
        self.sleeping = False
        threading.Thread(target=self._clock, daemon=True, name="fake-vllm").start()

    def _clock(self) -> None:
        while True:
            time.sleep(self.fake.TICK)
            try:
                self.fake._tick(time.time())
            except Exception:
                pass

    async def is_sleeping(self) -> bool:
        return self.sleeping

    async def generate(self, prompt, sampling_params, request_id=None):
        self.output_processor.unfinished += 1
        try:
            self.fake.submit(1)
            await asyncio.sleep(GENERATE_S)
            n = min(RESPONSE_TOKENS, sampling_params.max_tokens or RESPONSE_TOKENS)
            ids = [3 + (i * 7) % 90 for i in range(n)]
            yield RequestOutput(request_id or str(uuid.uuid4()), [CompletionOutput(
                ids, "length" if n == sampling_params.max_tokens else "stop")])
        finally:
            self.output_processor.unfinished -= 1

    async def collective_rpc(self, method, args=()):
        if method.startswith("update_weight"):
            await asyncio.to_thread(self.fake.operation, "rl_weight_update", "update", 0.02)
        return [None]

    async def sleep(self, level=1):
        self.sleeping = True
        self.fake.set_sleep(level)

    async def wake_up(self, tags=None):
        self.sleeping = False
        self.fake.set_sleep(0)

    async def reset_prefix_cache(self):
        pass

    async def pause_generation(self, mode="keep"):
        pass

    async def resume_generation(self):
        pass
