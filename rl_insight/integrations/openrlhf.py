"""OpenRLHF (``openrlhf`` 0.11.2): the Ray job's runtime environment, nothing in its code.

    ray job submit --runtime-env rl_insight.yaml -- python3 -m openrlhf.cli.train_ppo_ray ...

where ``rl_insight.yaml`` is what ``rl-insight ray-env`` writes: the server's address and
``worker_process_setup_hook: rl_insight.ray.hooks.worker_setup``. That hook, in every
worker of the job, patches ``openrlhf.trainer.ppo_trainer`` when the worker imports it
itself (OpenRLHF's trainer actor does; an engine's or a model worker's process never gets
OpenRLHF's trainer, vLLM or DeepSpeed imported by us). OpenRLHF has no logger registry: its
trainer (``PPOTrainer``, or the asynchronous ``TrainingActor``, unnamed Ray actors) hands
every step's dict to ``BasePPOTrainer.save_logs_and_checkpoints(global_step, logs_dict)``,
which writes to wandb or TensorBoard when configured. Patched there (and at
``save_best_checkpoint``, which every evaluation's metrics pass in both trainers), each
dict becomes gauges at its ``global_step`` with wandb or TensorBoard on or off, and its
``timing/*`` keys the step's parts (rl_insight/frameworks/openrlhf.py). The run is named
as wandb names it (``--logger.wandb.project``, ``--logger.wandb.run_name``) unless
``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` say otherwise.

Its vLLM engines (``RolloutRayActor``, unnamed, vLLM's ``AsyncLLMEngine`` in the actor's
process) keep vLLM's Prometheus metrics in that process and serve them nowhere: the
trainer asks each engine, by its place in the trainer's ``vllm_engines`` (the replica
number), to relay them (``__ray_call__``; rl_insight/client/relay.py) through the
replica's lane actor, as the replica's ``vllm`` series.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from rl_insight import frameworks
from rl_insight.frameworks.openrlhf import ASYNC_MARK, BROADCAST_WAIT, QUEUE_WAIT, WEIGHT_SYNC
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker

log = logging.getLogger(__name__)

FRAMEWORK = frameworks.named("openrlhf")
ENGINE_JOB = "vllm"  # the engines' series as every vLLM replica's: job, replica
ENGINE_PREFIXES = ("vllm:",)  # vLLM's own families, not the process's collectors
PATCHED = "_rl_insight"
CLOCK = "_rl_insight_clock"  # a trainer's _Clock (below)

_tracker: FrameworkTracker | None = None


def _get(args: Any, path: str) -> Any:
    for part in path.split("."):
        args = getattr(args, part, None)
    return args


def run_names(args: Any) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set, else wandb's project
    and run name as OpenRLHF gives them (defaults ``openrlhf_train_ppo`` and
    ``ppo_<month><day>T<hour>:<minute>``, set whether wandb is on or not)."""
    return kit.run_names((_get(args, "logger.wandb.project"),),
                         (_get(args, "logger.wandb.run_name"),), "openrlhf", "ppo")


def tracker(trainer: Any) -> FrameworkTracker:
    """This process's tracker, named after the trainer's run; the trainer's parsed
    arguments (``hierarchize``'s nested namespaces) are the run's configuration."""
    global _tracker
    if _tracker is None:
        _tracker = FrameworkTracker(FRAMEWORK, *run_names(trainer.args),
                                    run_config=trainer.args)
    return _tracker


class RunEnd:
    """Stands in the trainer's ``tensorboard_logger`` slot, around OpenRLHF's own logger
    there (or none): ``log_train`` and ``log_eval`` go on to it; ``close``, which both
    trainers call when their ``fit`` ends (ppo_trainer.py l.576-579,
    ppo_trainer_async.py l.250-253), ends the run too. A process's exit cannot: Ray calls
    do not complete in an actor's exit handlers."""

    def __init__(self, inner: Any, tracker: FrameworkTracker) -> None:
        self.inner, self.tracker = inner, tracker

    def log_train(self, global_step: Any, logs_dict: Any) -> None:
        if self.inner:
            self.inner.log_train(global_step, logs_dict)

    def log_eval(self, global_step: Any, logs_dict: Any) -> None:
        if self.inner:
            self.inner.log_eval(global_step, logs_dict)

    def close(self) -> None:
        try:
            if self.inner:
                self.inner.close()
        finally:
            self.tracker.finish()

    def __getattr__(self, name: str) -> Any:  # anything else OpenRLHF's logger has
        return getattr(self.inner, name)


def relay_engine(engine: Any, replica: int) -> bool:
    """Run in a ``RolloutRayActor``'s process (``__ray_call__`` hands the actor first):
    relay vLLM's metrics of this process as replica ``replica``."""
    from rl_insight.client import relay

    return relay.relay_registry(ENGINE_JOB, f"replica_{replica}", {"replica": replica},
                                prefixes=ENGINE_PREFIXES)


def relay_engines(engines: Any) -> int:
    """Ask each engine to relay its metrics, without waiting; how many were asked."""
    asked = 0
    for replica, engine in enumerate(engines or ()):
        call = getattr(engine, "__ray_call__", None)
        if call is None:
            continue
        try:
            call.remote(relay_engine, replica)
            asked += 1
        except Exception:
            log.warning("rl-insight: engine %d of OpenRLHF was not asked to relay its "
                        "metrics", replica, exc_info=True)
    return asked


class _Clock:
    """What the asynchronous trainer's step holds besides work, measured around
    ``BasePPOTrainer``'s own methods (``TrainingActor`` overrides neither ``train_step`` nor
    the base's ``broadcast_to_vllm``, which its own calls inside the vLLM lock)."""

    def __init__(self) -> None:
        self.ready: float | None = None  # the step before's logging, or an eval, ended
        self.queue_wait: float | None = None
        self.weight_sync = 0.0

    def step_started(self) -> None:
        now = time.time()
        self.queue_wait = None if self.ready is None else max(0.0, now - self.ready)
        self.weight_sync = 0.0

    def parts(self, broadcast: Any) -> dict[str, float]:
        out = {WEIGHT_SYNC: self.weight_sync}
        if isinstance(broadcast, (int, float)):
            out[BROADCAST_WAIT] = max(0.0, float(broadcast) - self.weight_sync)
        if self.queue_wait is not None:
            out[QUEUE_WAIT] = self.queue_wait
        return out


def clock(trainer: Any) -> _Clock:
    c = trainer.__dict__.get(CLOCK)
    if c is None:
        c = trainer.__dict__[CLOCK] = _Clock()
    return c


def is_async(trainer: Any) -> bool:
    return bool(getattr(getattr(trainer.args, "train", None), "async_enable", False))


def started(trainer: Any) -> None:
    """After ``BasePPOTrainer.__init__``: the run named, the engines relaying."""
    try:
        if not isinstance(trainer.tensorboard_logger, RunEnd):
            trainer.tensorboard_logger = RunEnd(trainer.tensorboard_logger, tracker(trainer))
        relay_engines(getattr(trainer, "vllm_engines", None))
    except Exception:
        log.warning("rl-insight: attaching to OpenRLHF's trainer failed; training goes on "
                    "without monitoring", exc_info=True)


def logged(trainer: Any, global_step: Any, logs: Mapping[str, Any] | None) -> None:
    """A step's dict, as ``save_logs_and_checkpoints`` got it (every step, whatever
    ``--logger.logging_steps`` says: that sets wandb's and TensorBoard's cadence)."""
    try:
        data = {k: v for k, v in (logs or {}).items() if k != "generated_samples"}
        if is_async(trainer):  # the table's mark (generation overlaps), the waits apart
            data[ASYNC_MARK] = float(getattr(trainer.args.train, "async_queue_size", 1) or 1)
            data.update(clock(trainer).parts(data.get("timing/broadcast")))
        tracker(trainer).log(data, step=global_step)
    except Exception:
        log.warning("rl-insight: OpenRLHF's step %s was not logged", global_step,
                    exc_info=True)


def evaluated(trainer: Any, metrics: Mapping[str, Any] | None) -> None:
    """An evaluation's metrics (``eval_*``), as scalars of no step of their own."""
    try:
        if metrics:
            tracker(trainer).log(dict(metrics))
    except Exception:
        log.warning("rl-insight: OpenRLHF's evaluation was not logged", exc_info=True)


def patch_trainer(module: Any) -> bool:
    """Patch ``openrlhf.trainer.ppo_trainer.BasePPOTrainer`` (once): the hook's
    ``on_import`` for OpenRLHF. Returns whether the class was found."""
    cls = getattr(module, "BasePPOTrainer", None)
    if cls is None:
        log.warning("rl-insight: %s has no BasePPOTrainer; OpenRLHF is not monitored "
                    "(the adapter was read against openrlhf 0.11.2)", module.__name__)
        return False
    if getattr(cls, PATCHED, False):
        return True
    init, save, best = cls.__init__, cls.save_logs_and_checkpoints, cls.save_best_checkpoint
    step, broadcast = cls.train_step, cls.broadcast_to_vllm

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        init(self, *args, **kwargs)
        started(self)

    @functools.wraps(step)
    def train_step(self, rollout_samples, global_step):
        clock(self).step_started()
        return step(self, rollout_samples, global_step)

    @functools.wraps(broadcast)
    def broadcast_to_vllm(self):
        t0 = time.perf_counter()
        try:
            return broadcast(self)
        finally:
            clock(self).weight_sync += time.perf_counter() - t0

    @functools.wraps(save)
    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        logged(self, global_step, logs_dict)
        try:
            return save(self, global_step, logs_dict, client_states)
        finally:
            clock(self).ready = time.time()

    @functools.wraps(best)
    def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
        evaluated(self, eval_metrics)
        try:
            return best(self, eval_metrics, global_step, client_states)
        finally:
            clock(self).ready = time.time()

    cls.__init__ = __init__
    cls.train_step = train_step
    cls.broadcast_to_vllm = broadcast_to_vllm
    cls.save_logs_and_checkpoints = save_logs_and_checkpoints
    cls.save_best_checkpoint = save_best_checkpoint
    setattr(cls, PATCHED, True)
    return True
