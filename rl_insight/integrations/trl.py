"""TRL (``trl`` 1.16.0): ``callbacks=[RLInsightCallback()]``.

A transformers ``TrainerCallback`` in all but its base class (the trainer calls each
event by name; importing transformers is left to TRL). On the main process, each
``on_log`` becomes gauges, a training step's with ``state.global_step`` as the step (an
evaluation's and the run's summary with none). TRL times its own work
in profiling contexts and sends those times to wandb, mlflow and trackio only
(``trl/extras/profiling.py`` l.121-131); the callback takes them too (TRL's ``ProfilingContext``
reports each one through ``_log_metrics``, which it wraps once), and each step's are
logged with it as ``profiling/<name>`` keys, the step's parts: generation, rewards, the
reference log-probs, the loss, the weight sync to vLLM; the optimizer step it times
itself. TRL's ``AsyncGRPOTrainer`` uses no profiling contexts: it logs its own step timers
(``perf/*``: the step, forward and backward, the optimizer step, the wait for rollouts, the
weight sync), which the table reads as they are; the callback's own optimizer timing is
then left out (TRL's ``perf/optimizer_s`` times the same call). With ``use_vllm`` in server
mode, the vLLM server's ``/metrics`` is registered.
The trainer's arguments (its ``GRPOConfig``, as TRL hands them to wandb) are the run's
configuration, handed over at ``on_train_begin``.
``report_to=["rl_insight"]`` works too once :func:`register` ran. A vLLM server
TRL reaches at 0.0.0.0 (its default host) is kept at this machine's address by the
server's registration.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import rl_insight
from rl_insight import frameworks
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker

FRAMEWORK = frameworks.named("trl")
NAME = "rl_insight"
PREFIX = "profiling/"
# TRL names a timer "<the trainer's class>.<method>" (a subclass of GRPOTrainer its own)
LOGPS = "_get_per_token_logps_and_entropies"
REF_LOGPS = "ref_logps"  # the log-prob passes before the loss (the rollout's side)
OPTIMIZER = PREFIX + "optimizer_step"  # the callback's own timing of the optimizer step
# AsyncGRPOTrainer's timing of the same call (trl 1.16.0 trl/experimental/async_grpo/
# async_grpo_trainer.py _OptimizerTimeCallback l.199-214): where a step logs it, ours goes
TRL_OPTIMIZER = "perf/optimizer_s"


class _Profile:
    """TRL's profiling times of the current step, by name. The log-prob passes are told
    apart by where they fall: before the rollout's end (``_prepare_inputs``) they are the
    reference's and the old policy's; inside the loss they are the loss's own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, float] = {}
        self.logps = 0.0

    def add(self, name: str, seconds: float) -> None:
        trainer, _, method = name.partition(".")
        with self.lock:
            if method == LOGPS:
                self.logps += seconds
                return
            if method == "_prepare_inputs":
                ref = f"{trainer}.{REF_LOGPS}"
                self.times[ref] = self.times.get(ref, 0.0) + self.logps
                self.logps = 0.0
            elif method == "compute_loss":
                self.logps = 0.0
            self.times[name] = self.times.get(name, 0.0) + seconds

    def take(self) -> dict[str, float]:
        with self.lock:
            out, self.times, self.logps = self.times, {}, 0.0
        return {PREFIX + k: v for k, v in out.items() if v > 0}


_PROFILES: list[_Profile] = []  # the callbacks' profiles the one wrapper feeds


def _wrap_profiling() -> None:
    """Have TRL's profiling contexts report to the callbacks too (once per process)."""
    try:
        from trl.extras import profiling
    except ImportError:
        return
    cls = profiling.ProfilingContext
    if getattr(cls._log_metrics, "_rl_insight", False):
        return
    original = cls._log_metrics

    def _log_metrics(self, duration: float) -> Any:
        for profile in list(_PROFILES):
            profile.add(str(getattr(self, "name", "")), float(duration))
        return original(self, duration)

    _log_metrics._rl_insight = True
    cls._log_metrics = _log_metrics


def run_names(args: Any) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set, else project
    ``trl`` and the run's name (``run_name``, or its output folder's)."""
    out = getattr(args, "output_dir", None)
    return kit.run_names((), (getattr(args, "run_name", None),
                              os.path.basename(os.path.normpath(str(out))) if out else None),
                         "trl", "run")


def vllm_server_address(args: Any) -> str:
    """host:port of the vLLM server TRL generates with, as TRL's client names it (its
    base URL's path left out). TRL's default host is 0.0.0.0 (trl 1.16.0 grpo_config.py
    l.632): this machine, which the server's registration resolves to the address the
    registration came from (server/ingest/targets.py resolve_local), never 0.0.0.0."""
    url = getattr(args, "vllm_server_base_url", None) or \
        f"{args.vllm_server_host}:{args.vllm_server_port}"
    return url.split("://", 1)[-1].split("/", 1)[0]


class RLInsightCallback:
    """Report a TRL (transformers) trainer's steps to RL-Insight; every event a
    ``TrainerCallback`` has, each returning None (the trainer's control unchanged)."""

    def __init__(self, project: str | None = None, experiment_name: str | None = None
                 ) -> None:
        self.project, self.experiment_name = project, experiment_name
        self.tracker: FrameworkTracker | None = None
        self.profile = _Profile()
        self._optimizer_t0: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not getattr(state, "is_world_process_zero", True) or self.tracker is not None:
            return
        project, name = run_names(args)
        self.tracker = FrameworkTracker(FRAMEWORK, self.project or project,
                                        self.experiment_name or name, run_config=args)
        _PROFILES.append(self.profile)
        _wrap_profiling()
        if getattr(args, "use_vllm", False) and getattr(args, "vllm_mode", "") == "server":
            rl_insight.update_prometheus_config([vllm_server_address(args)], "vllm",
                                                [{"replica": 0}])

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any,
                              **kwargs: Any) -> None:
        self._optimizer_t0 = time.perf_counter()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._optimizer_t0 is not None:
            self.profile.add("optimizer_step", time.perf_counter() - self._optimizer_t0)
            self._optimizer_t0 = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        if self.tracker is None or not logs:
            return
        data = dict(logs)
        if "loss" not in data and any(k.endswith("_runtime") for k in data):
            # not a training step's dict (each has `loss`; with
            # include_num_input_tokens_seen it has `train_runtime` too): the run's summary
            # (train_runtime, train_loss) or an evaluation's metrics (eval_runtime,
            # eval_*), logged with no step. What TRL profiled in an evaluation (its
            # generation, its loss) is no part of the step before it, whose parts it
            # would replace at the server
            self.profile.take()
            self.tracker.log(data, None)
            return
        profile = self.profile.take()
        if TRL_OPTIMIZER in data:  # TRL timed the optimizer step itself: once, not twice
            profile.pop(OPTIMIZER, None)
        data.update(profile)
        self.tracker.log(data, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.profile in _PROFILES:
            _PROFILES.remove(self.profile)
        if self.tracker is not None:
            self.tracker.finish()


def _nothing(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
    return None


for _event in ("on_init_end", "on_epoch_begin", "on_epoch_end", "on_step_begin",
               "on_substep_end", "on_step_end", "on_evaluate", "on_predict", "on_save",
               "on_prediction_step", "on_push_begin"):
    setattr(RLInsightCallback, _event, _nothing)


def register() -> bool:
    """``report_to=["rl_insight"]``: the callback in transformers' table of reporting
    integrations (a module global it reads when a trainer is built)."""
    try:
        from transformers.integrations import integration_utils
    except ImportError:
        return False
    integration_utils.INTEGRATION_TO_CALLBACK[NAME] = RLInsightCallback
    return True
