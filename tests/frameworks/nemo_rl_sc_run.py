"""NeMo-RL's single-controller GRPO replayed on Ray in its own order and process structure
(NVIDIA-NeMo/RL 7ea279ab: examples/run_grpo_single_controller.py,
nemo_rl/algorithms/single_controller.py), with RL-Insight turned on by the command line
alone: the script runs itself as ``python -m rl_insight.integrations.nemo_rl python
nemo_rl_sc_run.py ...`` (the site hook on ``PYTHONPATH``), and starts Ray as NeMo-RL's
``init_ray`` does, every worker given the driver's whole environment
(nemo_rl/distributed/virtual_cluster.py l.306-325). Nothing of RL-Insight is imported or
called by this script's NeMo-RL side: no ``attach``.

NeMo-RL does not install here: its composite ``Logger`` comes from a FAKE stand-in
(tests/frameworks/stand_ins/nemo_rl); the actor, its pumps and its Timer are this
replay's, each call where single_controller.py makes it:

- the driver (``main``): the config, ``init_ray``, ``SingleControllerActor.remote(
  master_config=, actor_args=, setup_timing_metrics=)`` (l.141-145), then
  ``_run_with_controller_liveness_watch``: ``run.remote()`` awaited with ``ray.wait`` and
  ``ping`` between (l.171-210);
- the ``SingleControllerActor`` (a Ray actor, asyncio): ``__init__`` builds ``Logger(
  master_config.logger)``, logs the hyperparameters (``master_config.model_dump()``) and
  the driver's setup timings at step 0, prefix ``timing/setup`` (l.162-169); ``run``
  syncs the weights, starts the rollout, train and watchdog pumps, and finishes the
  logger (l.277-332);
- ``_train_pump`` (l.843-1221), per step: ``total_step_time`` around chunks of
  ``exposed_generation`` (waiting for the buffer), ``logprob_inference_prep``,
  ``policy_and_reference_logprobs``, ``advantage_calculation``, ``training_prep``,
  ``policy_training``; then ``policy_training`` (finish_train_step), ``weight_sync``
  (``_sync_weights``), ``checkpointing`` where due; after the step's timer,
  ``log_metrics(step_metrics, step, prefix="train")`` and ``log_metrics(timing_metrics,
  step, prefix="timing/train")``: no ``step_finished``;
- ``_stall_watchdog_pump`` (l.1223-1278): every interval, ``rollout/*`` at the current
  step, no prefix.

Prints ``RUN {json}``; with --truth, writes each step's timing dict as it was logged.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import ray

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STAND_INS = HERE / "stand_ins"
sys.path.insert(0, str(STAND_INS))

from nemo_rl.utils.logger import Logger  # noqa: E402  (single_controller.py l.81)

# seconds each phase takes (a chunk's share where a step trains in CHUNKS chunks)
GROUP_S, LOGP_PREP_S, LOGP_S, ADV_S, PREP_S, TRAIN_S, FINISH_S, SYNC_S, CKPT_S = (
    0.05, 0.01, 0.06, 0.01, 0.01, 0.08, 0.05, 0.25, 0.05)
CHUNKS, SAVE_PERIOD, WATCHDOG_S = 2, 4, 0.4


class MasterConfig:
    """The single controller's pydantic ``MasterConfig`` as the actor reads it: sections
    as attributes (``logger`` a plain dict, l.111 of the entry script), ``model_dump()``."""

    def __init__(self, values: dict) -> None:
        self._values = values
        for key, value in values.items():
            setattr(self, key, value)

    def model_dump(self) -> dict:
        return copy.deepcopy(self._values)


class Timer:
    """nemo_rl/utils/timer.py as the pump uses it: ``time(label)`` blocks, each label's
    timings summed for the step (``get_timing_metrics(reduction_op="sum")``), ``reset``."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, label: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.sums[label] += time.perf_counter() - t0

    def get_timing_metrics(self, reduction_op: str = "sum") -> dict[str, float]:
        return dict(self.sums)

    def reset(self) -> None:
        self.sums.clear()


@ray.remote(num_cpus=0, num_gpus=0)  # NeMo-RL's: num_cpus=1 (a CPU of the test cluster's)
class SingleControllerActor:
    def __init__(self, master_config: MasterConfig, actor_args: dict,
                 setup_timing_metrics: dict) -> None:
        self._master_config = master_config
        self._slow_step = actor_args["slow_step"]
        # Built here, not on the driver: Logger backends hold locks Ray cannot pickle
        self._logger = Logger(master_config.logger)
        self._logger.log_hyperparams(master_config.model_dump())
        self._logger.log_metrics(setup_timing_metrics, step=0, prefix="timing/setup")
        self._timer = Timer()
        self._train_steps = 0
        self._ready_groups = 0
        self._truth: list[dict] = []

    async def run(self) -> dict:
        await self._sync_weights()
        tasks = [asyncio.create_task(self._rollout_pump()),
                 asyncio.create_task(self._train_pump()),
                 asyncio.create_task(self._stall_watchdog_pump())]
        try:
            await tasks[1]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._logger.finish()
        return {"train_steps": self._train_steps, "truth": self._truth}

    async def ping(self) -> dict:
        return {"alive": True, "train_steps": self._train_steps}

    async def _rollout_pump(self) -> None:
        """The generation workers' groups arriving in the buffer, one every GROUP_S."""
        while True:
            await asyncio.sleep(GROUP_S)
            self._ready_groups += 1

    async def _sync_weights(self) -> None:
        slow = self._train_steps == self._slow_step
        await asyncio.sleep(SYNC_S * (4 if slow else 1))

    async def _train_pump(self) -> None:
        grpo = self._master_config.grpo
        per_chunk = grpo["num_prompts_per_step"] // CHUNKS
        while self._train_steps < grpo["max_num_steps"]:
            with self._timer.time("total_step_time"):
                for _ in range(CHUNKS):
                    with self._timer.time("exposed_generation"):
                        while self._ready_groups < per_chunk:
                            await asyncio.sleep(0.005)
                        self._ready_groups -= per_chunk
                    with self._timer.time("logprob_inference_prep"):
                        await asyncio.sleep(LOGP_PREP_S)
                    with self._timer.time("policy_and_reference_logprobs"):
                        await asyncio.sleep(LOGP_S)
                    with self._timer.time("advantage_calculation"):
                        await asyncio.sleep(ADV_S)
                    with self._timer.time("training_prep"):
                        await asyncio.sleep(PREP_S)
                    with self._timer.time("policy_training"):
                        await asyncio.sleep(TRAIN_S)
                with self._timer.time("policy_training"):  # finish_train_step
                    await asyncio.sleep(FINISH_S)
                step_metrics = {"loss": 0.011, "grad_norm": 0.37, "global_valid_toks": 51200,
                                "reward": 0.4 + 0.01 * self._train_steps}
                self._train_steps += 1
                with self._timer.time("weight_sync"):
                    await self._sync_weights()
                    step_metrics.update({"evicted_stale_prompt_groups": 0,
                                         "aborted_stale_inflight_groups": 0,
                                         "dropped_prompt_groups": 0})
                if self._train_steps % SAVE_PERIOD == 0:
                    with self._timer.time("checkpointing"):
                        await asyncio.sleep(CKPT_S)
            timing_metrics = self._timer.get_timing_metrics(reduction_op="sum")
            timing_metrics["valid_tokens_per_sec_per_gpu"] = (
                step_metrics["global_valid_toks"] / timing_metrics["total_step_time"])
            self._logger.log_metrics(step_metrics, step=self._train_steps, prefix="train")
            self._logger.log_metrics(timing_metrics, step=self._train_steps,
                                     prefix="timing/train")
            self._truth.append({"step": self._train_steps, **timing_metrics})
            self._timer.reset()

    async def _stall_watchdog_pump(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_S)
            metrics = {"rollout/committed_total": float(self._ready_groups),
                       "rollout/skipped_total": 0.0, "rollout/inflight": 4.0,
                       "rollout/idle_s": 0.0, "rollout/train_steps": float(self._train_steps)}
            self._logger.log_metrics(metrics, step=self._train_steps)


def init_ray() -> None:
    """virtual_cluster.py init_ray l.306-325: the driver's environment for every worker
    (its ``address="auto"`` left to RAY_ADDRESS here: the test cluster's)."""
    env_vars = dict(os.environ)
    env_vars.pop("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", None)
    ray.init(log_to_driver=False, include_dashboard=False,
             runtime_env={"env_vars": env_vars})


def through_the_launcher(argv: list[str]) -> int:
    """The user's command line: this script under ``python -m
    rl_insight.integrations.nemo_rl``, NeMo-RL (here its stand-ins) importable."""
    from rl_insight.integrations import nemo_rl

    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(STAND_INS), str(REPO), *paths])
    return nemo_rl.main([sys.executable, str(Path(__file__).resolve()), *argv])


def run_with_controller_liveness_watch(sc, interval_s: float) -> dict:
    """run_grpo_single_controller.py l.171-210: await run, pinging between waits."""
    run_ref = sc.run.remote()
    while True:
        ready, _ = ray.wait([run_ref], timeout=interval_s)
        if ready:
            return ray.get(run_ref)
        ray.get(sc.ping.remote(), timeout=60)


def main(argv=None) -> int:
    from rl_insight.integrations import kit

    argv = sys.argv[1:] if argv is None else list(argv)
    if str(kit.SITE_HOOK) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        return through_the_launcher(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="nemo-rl-sc-replay")
    ap.add_argument("--experiment-name", default="nemo-rl-sc-run")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--slow-step", type=int, default=3, help="the weight sync that ends "
                    "this step (1-based) takes four times as long")
    ap.add_argument("--truth", metavar="FILE")
    a = ap.parse_args(argv)
    # MasterConfig's sections (examples/configs/grpo_math_1B_megatron_single_controller
    # .yaml), those this replay reads and a few a run sets; the run named by wandb's names
    config = MasterConfig({
        "logger": {"log_dir": "logs/exp_001", "wandb_enabled": False,
                   "tensorboard_enabled": False, "mlflow_enabled": False,
                   "swanlab_enabled": False, "monitor_gpus": False,
                   "wandb": {"project": a.project, "name": a.experiment_name}},
        "grpo": {"num_prompts_per_step": 4, "num_generations_per_prompt": 16,
                 "max_num_steps": a.steps, "async_grpo": None, "val_period": 0},
        "async_rl": {"sampler": {"name": "in_order", "max_lookahead_versions": 1},
                     "max_buffered_rollouts": 64,
                     "stall_watchdog": {"interval_s": WATCHDOG_S, "stall_timeout_s": 600}},
        "data_plane": {"enabled": True},
        "policy": {"model_name": "Qwen/Qwen2.5-1.5B"},
        "checkpointing": {"enabled": True, "save_period": SAVE_PERIOD}})
    init_ray()
    t_start = time.time()
    sc = SingleControllerActor.remote(
        master_config=config, actor_args={"slow_step": a.slow_step},
        setup_timing_metrics={"total": 12.5, "policy_init": 7.1})
    result = run_with_controller_liveness_watch(sc, 2.0)
    t_end = time.time()
    if a.truth:
        Path(a.truth).write_text(json.dumps(result["truth"]))
    print("RUN " + json.dumps({"framework": "nemo_rl", "project": a.project,
                               "experiment_name": a.experiment_name, "t_start": t_start,
                               "t_end": t_end, "steps": a.steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
