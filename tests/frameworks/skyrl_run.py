"""SkyRL's trainer logging, replayed through RL-Insight's SkyRL adapter
(rl_insight/integrations/skyrl.py). Run by tests/test_framework_skyrl.py with SkyRL's
packages on PYTHONPATH (``make setup``: .venv/frameworks/skyrl/site-packages, ``skyrl``
0.3.0, whose skyrl/train/utils/tracking.py is NovaSky-AI/SkyRL a9564572's).

SkyRL's trainers need GPUs, vLLM and Python 3.12 (``skyrl.train.trainer`` does not
import on 3.11), so the loop is replayed, not run: SkyRL's own ``Tracking`` (subclassed
by the adapter) and SkyRL's own ``Timer`` (skyrl/train/utils/utils.py) around sleeps
that stand for the phases, and the trainer's calls on the tracker in its order:

- the tracker as ``BasePPOExp.get_tracker`` builds it (skyrl/train/entrypoints/
  main_base.py:182-194: project_name, run_name, logger, config, tags), by an experiment
  whose ``get_tracker`` returns ``rl_insight.integrations.skyrl.get_tracker(self)``;
- ``--mode sync``: ``RayPPOTrainer.train`` (skyrl/train/trainer.py, 0.3.0): the eval
  before training (its ``timing/eval`` is not reset after the step-0 log, so step 1
  carries it), then per step the ``step`` timer around generate,
  postprocess_generator_output, convert_to_training_input, fwd_logprobs_values_reward,
  compute_advantages_and_returns, train_critic_and_policy (policy_train inside) and
  sync_weights; eval at ``eval_interval`` and at the last step, after the step timer;
  one ``tracker.log(payload, step=global_step, commit=True)``: all_metrics, then
  timing/*, then vllm/*, then ray/*;
- ``--mode async``: ``FullyAsyncRayPPOTrainer.train`` (skyrl/train/fully_async_trainer.py,
  0.3.0 :505-600): the ``step`` timer around wait_for_generation_buffer,
  convert_to_training_input, run_training (fwd_logprobs_values_reward,
  compute_advantages_and_returns, train_critic_and_policy, policy_train inside) and
  sync_weights; two calls per step, ``log(all_metrics, step=g, commit=False)`` then
  ``log(timing payload, step=g, commit=True)``;
- ``tracker.finish()`` at the end (trainer.py :591 in 0.3.0), then again from
  ``Tracking.__del__`` when the tracker goes.

The ground truth goes to ``--out`` (JSON): every dict logged (step, commit, data), the
extra seconds slept at ``--slow-step`` and in which phase, how often the adapter's
backend was finished, and what SkyRL's plain ``Tracking`` says to ``rl_insight``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

SYNC = {"generate": 0.4, "postprocess_generator_output": 0.01,
        "convert_to_training_input": 0.02, "fwd_logprobs_values_reward": 0.1,
        "compute_advantages_and_returns": 0.01, "policy_train": 0.3, "sync_weights": 0.1,
        "eval": 0.15}
ASYNC = {"wait_for_generation_buffer": 0.15, "convert_to_training_input": 0.02,
         "fwd_logprobs_values_reward": 0.05, "compute_advantages_and_returns": 0.01,
         "policy_train": 0.15, "sync_weights": 0.05}


class Experiment:
    """What ``BasePPOExp`` has for the tracker (main_base.py:43-44, 182): its ``cfg``,
    and ``get_tracker`` as a user's subclass overrides it for ``rl_insight``."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg

    def get_tracker(self):
        from rl_insight.integrations import skyrl

        return skyrl.get_tracker(self)


def rollout_metrics(g: int) -> dict:
    """all_metrics before the timings, in the trainer's order (the notes' step 1)."""
    return {
        "generate/min_num_tokens": 41, "generate/max_num_tokens": 1024,
        "generate/avg_num_tokens": 287.3 + g, "generate/std_num_tokens": 120.5,
        "generate/avg_tokens_non_zero_rewards": 250.1, "generate/avg_tokens_zero_rewards": 301.7,
        "reward/avg_pass_at_5": 0.55, "reward/avg_raw_reward": 0.31 + 0.01 * g,
        "reward/mean_positive_reward": 1.0,
        "generate/batch_num_seq": 80, "generate/batch_padded_seq_len": 1536,
        "policy/rollout_train_logprobs_abs_diff_max": 0.9,
        "policy/rollout_train_logprobs_abs_diff_min": 0.0,
        "policy/rollout_train_logprobs_abs_diff_mean": 0.01,
        "policy/rollout_train_logprobs_abs_diff_std": 0.02,
        "loss/avg_final_rewards": 0.31, "loss/avg_raw_advantages": 0.0,
        "loss/avg_raw_advantages_abs": 0.42,
        "policy/final_loss": 0.012 + 0.001 * g, "policy/policy_loss": 0.012 + 0.001 * g,
        "policy/policy_entropy": 0.61, "policy/response_length": 1024,
        "policy/policy_lr": 1e-06, "policy/loss_metrics/clip_ratio": 0.003,
        "policy/minibatch_rollout_logprobs_abs_diff_mean": 0.01,
        "policy/minibatch_rollout_logprobs_abs_diff_max": 0.8,
        "policy/minibatch_rollout_logprobs_abs_diff_min": 0.0,
        "policy/minibatch_rollout_logprobs_abs_diff_std": 0.02,
        "policy/grad_norm": 0.35,
    }


def eval_metrics(score: float) -> dict:
    return {"eval/all/avg_score": score, "eval/all/pass_at_1": score,
            "eval/all/mean_positive_reward": 1.0, "eval/all/generate/avg_num_tokens": 312.4,
            "eval/gsm8k/avg_score": score, "eval/gsm8k/pass_at_1": score,
            "eval/gsm8k/mean_positive_reward": 1.0}


VLLM = {"vllm/train/num_requests_running": 0.0, "vllm/train/num_requests_waiting": 0.0,
        "vllm/train/kv_cache_usage_perc": 0.0}
RAY = {"ray/node.0.gpu.0.util": 63.0, "ray/node.0.gpu.0.mem_used_gb": 61.2,
       "ray/node.0.cpu_ram_used_gb": 180.3, "ray/gpu.util.avg": 63.0,
       "ray/gpu.mem_used_gb.avg": 61.2, "ray/cpu_ram_used_gb.avg": 180.3}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--project", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--mode", choices=("sync", "async"), default="sync")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-step", type=int, default=4)
    p.add_argument("--slow-phase", default="generate")
    p.add_argument("--sleep", type=float, default=1.2)
    p.add_argument("--eval-interval", type=int, default=5)  # SkyRL's default
    p.add_argument("--linger", type=float, default=0.0,
                   help="at most this many seconds the engine stays up to be scraped")
    a = p.parse_args()

    import skyrl
    from skyrl.train.utils.tracking import Tracking
    from skyrl.train.utils.utils import Timer

    truth: dict = {"skyrl": getattr(skyrl, "__version__", None), "mode": a.mode,
                   "logs": [], "slept": {}}
    # SkyRL's own Tracking refuses the name (tracking.py:44): the adapter is what adds it
    try:
        Tracking(a.project, a.experiment, backend="rl_insight", config=None)
        truth["plain_refused"] = None
    except AssertionError as e:
        truth["plain_refused"] = str(e)

    # SkyRLTrainConfig's shape (skyrl/train/config/config.py: dataclasses), the fields
    # this replay reads and a few a run sets; trainer.rl_insight: the client's options
    cfg = SimpleNamespace(trainer=SimpleNamespace(
        project_name=a.project, run_name=a.experiment, logger="rl_insight", tags=None,
        eval_interval=a.eval_interval, eval_before_train=True,
        policy=SimpleNamespace(optimizer_config=SimpleNamespace(lr=1e-6)),
        rl_insight={"flush_interval_s": 0.5}),
        generator=SimpleNamespace(backend="vllm", n_samples_per_prompt=5))
    exp = Experiment(cfg)
    held = {"tracker": exp.get_tracker()}
    # BasePPOExp builds the trainer after the tracker (main_base.py _setup_trainer): its
    # inference client lists each engine's HTTP server (every engine one at a9564572);
    # here one FAKE vLLM engine serving real /metrics (examples/fake_engines.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import fake_engines

    engine = fake_engines.FakeEngine("vllm", seed=1)
    exp.trainer = SimpleNamespace(inference_engine_client=SimpleNamespace(
        server_urls=[f"http://127.0.0.1:{engine.port}"], proxy_url=""))
    truth["engine"] = f"127.0.0.1:{engine.port}"
    tracker = held["tracker"]
    truth["tracker"] = [c.__name__ for c in type(tracker).__mro__]
    backend = tracker.logger
    finished = []
    real_finish = backend.finish

    def counting_finish(*args, **kwargs):
        finished.append(time.time())
        return real_finish(*args, **kwargs)
    backend.finish = counting_finish

    def log(data: dict, step: int, commit: bool) -> None:
        truth["logs"].append({"step": step, "commit": commit, "data": dict(data)})
        held["tracker"].log(data, step=step, commit=commit)

    def work(name: str, timings: dict, g: int) -> None:
        """A phase: SkyRL's Timer around a sleep standing for its work."""
        extra = a.sleep if g == a.slow_step and name == a.slow_phase else 0.0
        if extra:
            truth["slept"] = {"step": g, "phase": name, "seconds": extra}
        if name == "generate":
            engine.submit(8)  # the engine's requests: its series move
        with Timer(name, timings):
            time.sleep(seconds[name] + extra)  # not a wait: the phase's work

    all_metrics: dict = {}
    all_timings: dict = {}
    eval_on = a.eval_interval > 0
    seconds = {**SYNC, **ASYNC} if a.mode == "async" else SYNC
    global_step = 0
    if eval_on:  # eval before training (trainer.py: eval_before_train, default True)
        work("eval", all_timings, 0)
        log(eval_metrics(0.21), global_step, True)
    global_step += 1
    for g in range(1, a.steps + 1):
        if a.mode == "sync":
            with Timer("step", all_timings):
                work("generate", all_timings, g)
                work("postprocess_generator_output", all_timings, g)
                work("convert_to_training_input", all_timings, g)
                work("fwd_logprobs_values_reward", all_timings, g)
                work("compute_advantages_and_returns", all_timings, g)
                with Timer("train_critic_and_policy", all_timings):
                    work("policy_train", all_timings, g)
                work("sync_weights", all_timings, g)
            all_metrics.update(rollout_metrics(g))
            all_metrics["trainer/tokens_per_second_per_gpu"] = 2150.0
            all_metrics.update({"trainer/epoch": 0, "trainer/global_step": global_step})
            if eval_on and (global_step % a.eval_interval == 0 or global_step == a.steps):
                work("eval", all_timings, g)
                all_metrics.update(eval_metrics(0.21 + 0.01 * g))
            payload = {**all_metrics, **{f"timing/{k}": v for k, v in all_timings.items()},
                       **VLLM}
            payload.update(RAY)
            log(payload, global_step, True)
            all_metrics = {}
        else:
            with Timer("step", all_timings):
                work("wait_for_generation_buffer", all_timings, g)
                work("convert_to_training_input", all_timings, g)
                with Timer("run_training", all_timings):
                    work("fwd_logprobs_values_reward", all_timings, g)
                    work("compute_advantages_and_returns", all_timings, g)
                    with Timer("train_critic_and_policy", all_timings):
                        work("policy_train", all_timings, g)
                work("sync_weights", all_timings, g)
            all_metrics.update(rollout_metrics(g))
            all_metrics.update({"async/staleness_mean": 0.5, "async/staleness_max": 1})
            all_metrics.update({"trainer/epoch": 0, "trainer/global_step": global_step})
            log(all_metrics, global_step, False)
            all_metrics = {}
            # eval after the first call: its metrics go with the next step's first
            if eval_on and (global_step % a.eval_interval == 0 or global_step == a.steps):
                work("eval", all_timings, g)
                all_metrics.update(eval_metrics(0.21 + 0.01 * g))
            log({"timing/" + k: v for k, v in all_timings.items()}, global_step, True)
        all_timings = {}
        global_step += 1

    tracker.finish()  # the trainer's
    truth["finished_by_trainer"] = len(finished)
    del tracker
    held.clear()  # the last reference: Tracking.__del__ finishes again
    gc.collect()
    truth["finished"] = len(finished)
    truth["backend_finished"] = backend.tracker.finished
    with open(a.out, "w") as f:
        json.dump(truth, f)
    # the engine stays up after the run (its server outlives the trainer's logging) until
    # Prometheus has found its target and scraped it twice since, --linger s at most
    fake_engines.until_scraped([engine.scrapes], a.linger)


if __name__ == "__main__":
    main()
