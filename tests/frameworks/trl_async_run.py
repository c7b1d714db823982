"""A real TRL ``AsyncGRPOTrainer`` run (trl 1.16.0, trl/experimental/async_grpo/) on CPU with
RL-Insight turned on as TRL users turn on any reporting: ``callbacks=[RLInsightCallback()]``.
Run by tests/test_framework_trl.py with TRL's packages on PYTHONPATH (``make setup``:
.venv/frameworks/trl/site-packages) and the run named by ``RL_INSIGHT_PROJECT`` /
``RL_INSIGHT_EXPERIMENT_NAME``.

TRL's own classes do the work: the trainer, its rollout worker (``AsyncRolloutWorker``, a
spawned child process generating over HTTP and scoring with the reward function), its
rollout queue, its weight sync and its step timers (``perf/*``, ``rollout/*``). What a CPU
machine without the internet lacks is FAKE, each the smallest stand-in:

- the vLLM server (``FakeVLLM``, a thread here): ``/v1/completions`` as TRL's worker calls
  it (token ids and their log-probabilities, ``async_rollout_worker.py`` l.999-1024),
  ``/pause`` and ``/resume``;
- the weight transport (``weight_transfer=``, TRL's ``WeightTransferProtocol``, which its
  docstring offers for tests, ``async_grpo_trainer.py`` l.1335-1338): pause the server,
  read every parameter from TRL's own iterator, resume; NCCL is not here;
- the FlashAttention kernel its tree attention fetches from the hub
  (tests/frameworks/stand_ins/trl_cpu/kernels: the same function in torch);
- TRL's two GPU-or-package checks: the peak FLOPs of the device (``torch.cuda`` on a CPU
  build asserts; None is TRL's own answer for an unknown device, l.1811-1830 of
  trl/trainer/utils.py) and vLLM's package for the worker (``is_vllm_available``: the worker
  only speaks HTTP to the server).

The model is a tiny Qwen2 with random weights and a word-level tokenizer carrying Qwen3's
chat template (TRL's own copy, so its response parsing knows it), built here. The rollout is
made slow once: from the end of step ``--slow-step`` - 1 the server holds every request for
``--hold`` seconds, so the trainer waits for samples (TRL's ``perf/rollout_wait_s``) once
what its worker had queued is used up: with ``max_staleness=1`` that is within two steps
(TRL drops a sample two weight syncs older than the policy, ``RolloutQueueDataset``).
The ground truth goes to ``--out`` (JSON): every dict TRL handed ``on_log`` (a recording
callback after ours), when the hold began and how long it was, TRL's version.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
STAND_INS = Path(__file__).resolve().parent / "stand_ins" / "trl_cpu"
# the tokens Qwen3's chat template writes
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
           "<tool_call>", "</tool_call>")


def reward_len(completions: list[list[dict]], **kwargs: Any) -> list[float]:
    """The reward: words in the completion (module level: TRL's worker pickles it)."""
    return [float(len(str(c[-1].get("content", "")).split())) for c in completions]


class FakeVLLM:
    """FAKE vLLM OpenAI server: ``/v1/completions`` answers ``max_tokens`` word tokens and
    the eos token with their log-probabilities; ``hold(s)`` makes every answer wait until
    ``s`` seconds from now; ``/pause`` holds new answers until ``/resume``, as vLLM's pause
    does."""

    def __init__(self, word_ids: list[int], eos: int) -> None:
        self.word_ids, self.eos = word_ids, eos
        self.until = 0.0
        self.running = threading.Event()
        self.running.set()
        self.requests = 0
        self.rng = random.Random(0)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._answer({"status": "ok"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0]
                if path == "/pause":
                    server.running.clear()
                    return self._answer({})
                if path == "/resume":
                    server.running.set()
                    return self._answer({})
                if path != "/v1/completions":
                    return self._answer({"error": path}, 404)
                self._answer(server.complete(json.loads(body)))

            def _answer(self, data: dict, code: int = 200) -> None:
                out = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def hold(self, seconds: float) -> float:
        self.until = time.time() + seconds
        return time.time()

    def complete(self, payload: dict) -> dict:
        self.running.wait(60)
        wait = self.until - time.time()
        if wait > 0:
            threading.Event().wait(wait)  # the held answer: until the hold's end
        self.requests += 1
        n = max(1, int(payload.get("max_tokens") or 8) - 1)
        ids = [self.rng.choice(self.word_ids) for _ in range(n)] + [self.eos]
        return {"choices": [{"index": 0, "text": "", "token_ids": ids,
                             "logprobs": {"token_logprobs": [-math.log(len(self.word_ids))] *
                                          len(ids)},
                             "finish_reason": "stop"}]}


class WeightTransfer:
    """FAKE of TRL's NCCL weight transport (``WeightTransferProtocol``): the server paused
    and resumed over HTTP as TRL's client does, every parameter read from TRL's own
    streaming iterator in between."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tensors = 0

    def _post(self, path: str) -> None:
        import requests

        requests.post(self.url + path, timeout=30).raise_for_status()

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        self._post("/pause")

    def send_weights(self, iterator: Iterator[tuple[str, Any]]) -> None:
        for _name, tensor in iterator:
            self.tensors += 1
            float(tensor.float().sum())

    def resume(self) -> None:
        self._post("/resume")

    def destroy(self) -> None:
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--slow-step", type=int, default=5)
    p.add_argument("--hold", type=float, default=2.0)
    a = p.parse_args()
    sys.path.insert(0, str(STAND_INS))  # the FAKE kernel hub

    import torch
    import trl
    import trl.experimental.async_grpo.async_grpo_trainer as trainer_module
    import trl.experimental.async_grpo.async_rollout_worker as worker_module
    from datasets import Dataset
    from trl.chat_template_utils import qwen3_chat_template
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from rl_insight.integrations.trl import RLInsightCallback
    from tests.frameworks.trl_run import PROMPTS, WORDS, recorder, tiny_model

    trainer_module.get_peak_flops_per_device = lambda accelerator, dtype: None
    worker_module.is_vllm_available = lambda *args, **kwargs: True
    torch.manual_seed(0)
    torch.set_num_threads(1)

    tmp = tempfile.mkdtemp(prefix="trl_async_", dir=os.path.dirname(os.path.abspath(a.out)))
    model_dir, hf_tok, vocab = tiny_model(tmp, "<|im_end|>", SPECIAL, qwen3_chat_template)
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": x}] for x in PROMPTS]})
    server = FakeVLLM([vocab[w] for w in WORDS], vocab["<|im_end|>"])
    logged: list[dict] = []
    held: dict = {}

    def hold(state) -> None:  # the rollouts held once, from this step's end
        if state.global_step == a.slow_step - 1 and not held:
            held.update(step=a.slow_step, at=server.hold(a.hold), seconds=a.hold)

    args = AsyncGRPOConfig(output_dir=os.path.join(tmp, "out"), max_steps=a.steps,
                           per_device_train_batch_size=2, num_generations=2,
                           max_completion_length=8, logging_steps=1, report_to=[],
                           use_cpu=True, bf16=False, dtype="float32", save_strategy="no",
                           learning_rate=1e-3, disable_tqdm=True, seed=0, token_budget=0,
                           vllm_server_base_url=server.url, max_inflight_tasks=2,
                           queue_maxsize=2, max_staleness=1, weight_sync_steps=1)
    transfer = WeightTransfer(server.url)
    trainer = AsyncGRPOTrainer(model=model_dir, reward_funcs=reward_len, args=args,
                               train_dataset=dataset, processing_class=hf_tok,
                               callbacks=[RLInsightCallback(), recorder(logged, hold)],
                               weight_transfer=transfer)
    t0 = time.time()
    trainer.train()
    with open(a.out, "w") as f:
        json.dump({"trl": trl.__version__, "trainer": type(trainer).__name__,
                   "logs": logged, "held": held, "requests": server.requests,
                   "tensors_sent": transfer.tensors, "train_s": time.time() - t0}, f,
                  default=str)


if __name__ == "__main__":
    main()
