"""AReaL's PPO trainer loop, replayed with AReaL's own logging code, and RL-Insight
attached the way a user's script attaches it.

Run in a process of its own with areal 1.0.4 (PyPI) on ``PYTHONPATH``
(``.venv/frameworks/areal/site-packages``, installed by ``make setup``)::

    python tests/frameworks/areal_run.py --root DIR --trial NAME --truth FILE.json

What is AReaL's own here (areal 1.0.4): ``areal.utils.stats_logger.StatsLogger`` built
with the whole experiment config and a ``FinetuneSpec`` (``areal/trainer/rl_trainer.py``
``PPOTrainer.__init__``), ``areal.utils.perf_tracer.configure(config.perf_tracer,
rank=RANK, role="master")`` (``PPOTrainer._config_perf_tracer``), and the loop of
``PPOTrainer.train``: per phase a ``stats_tracker.record_timing(key)`` and
``perf_tracer.trace_scope("train.<name>", category=..., args={"global_step": gs})``
pair, in its order (rollout, compute_advantage, train_step, update_weights, save,
checkpoint_for_recover, eval, clear_batches), the commit inside ``train.log_stats``
through ``_export_and_commit_stats``' shape (``actor.export_stats()`` then
``rollout.export_stats()``, then ``stats_logger.commit(epoch, epoch_step, global_step,
stats)``), ``perf_tracer.save(step=global_step)`` last in each step, and ``close()``:
``stats_logger.close()`` then ``perf_tracer.save(force=True)``.

What stands in for the GPU parts: the actor and its engine are small classes whose
methods carry AReaL's own decorators and stats calls (``trace_perf("ppo_actor.ppo_update")``
with ``stats_tracker.scope_func_wrapper("ppo_actor")``, ``trace_perf(
"fsdp_engine.update_weights_from_distributed")``; ``areal/trainer/ppo/actor.py``,
``areal/engine/fsdp_engine.py``), and each phase sleeps for a known time. What each
phase measured (its wall time around the trainer's ``with`` block) goes to ``--truth``.

``--awex``: the colocated weight update through AWEX of AReaL main (areal-project/AReaL
cbff54d6, after v2.0.0; not on PyPI), in ``PPOTrainer.train``'s order there
(``areal/trainer/rl_trainer.py`` l.677-966): after the rollout, the handover to training
with no timer or scope (l.768-780: ``rollout.pause()``, ``pause_generation_sync()``,
``offload(tags=["kv_cache"])``, ``offload(tags=["weights"])``, ``actor.onload()``), the
save before the weight update (l.857-871), the rollout paused again (l.874, untimed), the
weight update in its scope (l.879-897), the rollout resumed after the commit (l.964).
The actor is AReaL's own ``TrainController`` (areal 1.0.4; its dispatch, l.471-600 and
``update_weights``/``onload``, is cbff54d6's line for line): each call goes through a
FAKE scheduler's ``async_call_engine`` to two workers' engines (threads here), whose
``update_weights`` is ``MegatronEngine``'s AWEX path with no trace scope
(``areal/engine/megatron_engine.py`` l.967-993: the execute, a barrier, finish, rank 0's
KV-cache onload and ``continue_generation``, a barrier). The slow step's rollout pause
takes SLOW_EXTRA_S more (an in-flight request aborted late); each worker's own weight
update, and the pauses and offloads as the loop measured them, go to ``--truth``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import threading
import time

import torch
from areal.api.cli_args import BaseExperimentConfig, PerfTracerConfig
from areal.api.io_struct import FinetuneSpec
from areal.utils import perf_tracer, stats_tracker
from areal.utils.perf_tracer import Category, trace_perf
from areal.utils.stats_logger import StatsLogger

# seconds each phase sleeps; the slow step's weight sync (with --awex: its rollout
# pause) sleeps SLOW_EXTRA_S more
ROLLOUT_S, ADVANTAGE_S, TRAIN_S, WEIGHTS_S = 0.4, 0.02, 0.2, 0.1
SLOW_EXTRA_S = 1.2
# --awex: the handover's calls, each worker's extra for its AWEX execute
PAUSE_S, PAUSE_GENERATION_S, OFFLOAD_S, ONLOAD_S, FINISH_S = 0.06, 0.02, 0.03, 0.04, 0.01
RANK_EXTRA_S = (0.0, 0.04)
BATCH = 8
STEPS_PER_EPOCH = 3
# the FAKE handover calls' own windows (perf_counter) while one of the loop's untimed parts
# runs: what any timer around the calls holds, the adapter's too
INNER: list[tuple[float, float]] = []


def inner(fn):
    """A FAKE call's own window, kept in INNER."""
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            INNER.append((t0, time.perf_counter()))
    return timed


class Engine:
    """FSDPEngine's weight sync as it traces it (fsdp_engine.py: trace_perf, comm)."""

    def __init__(self) -> None:
        self.extra_s = 0.0

    @trace_perf("fsdp_engine.update_weights_from_distributed", category="comm")
    def update_weights_from_distributed(self, meta: dict) -> None:
        time.sleep(WEIGHTS_S + self.extra_s)

    def train_batch(self) -> dict:
        time.sleep(TRAIN_S)
        return {"update_successful": 1.0, "grad_norm": 0.31, "lr": 1.7e-5}

    def export_stats(self) -> dict:
        return stats_tracker.export_all(reduce_group=None)  # fsdp_engine.py export_stats


class Actor:
    """PPOActor's traced methods (actor.py: compute_advantages, ppo_update) and what
    ppo_update records, over a batch of BATCH sequences."""

    def __init__(self) -> None:
        self.engine = Engine()

    @trace_perf("ppo_actor.compute_advantages", category="compute")
    def compute_advantages(self, batch: dict) -> dict:
        time.sleep(ADVANTAGE_S)
        return batch

    @trace_perf("ppo_actor.ppo_update", category="compute")
    @stats_tracker.scope_func_wrapper("ppo_actor")
    def ppo_update(self, batch: dict) -> None:
        reward = batch["rewards"]
        seqlens = batch["seqlens"]
        stats_tracker.denominator(n_seqs=torch.ones_like(reward, dtype=torch.bool),
                                  correct_n_seqs=(reward > 0).bool(),
                                  incorrect_n_seqs=(reward <= 0).bool())
        stats_tracker.stat(task_reward=reward.float(), seq_len=seqlens.float(),
                           denominator="n_seqs")
        stats_tracker.scalar(eps_clip=0.2, use_dual_clip=0)
        with stats_tracker.scope("update"):
            # grpo_loss_fn (actor.py), called by the engine's train_batch for each
            # micro-batch: its per-token stats over the valid tokens
            tokens = torch.ones(int(seqlens.sum()), dtype=torch.bool)
            stats_tracker.denominator(n_tokens=tokens, n_valid_tokens=tokens)
            stats_tracker.stat(actor_loss=torch.full((len(tokens),), -0.003),
                               clip_ratio=torch.full((len(tokens),), 0.002),
                               importance_weight=torch.ones(len(tokens)),
                               denominator="n_valid_tokens")
            stats_tracker.scalar(**self.engine.train_batch())

    def update_weights(self, meta: dict) -> None:
        self.engine.update_weights_from_distributed(meta)

    def export_stats(self) -> dict:
        return self.engine.export_stats()


class Rollout:
    """The remote inference engine's side: its rollout stats (rlvr.py, workflow_executor.py)."""

    def prepare_batch(self, step: int) -> dict:
        time.sleep(ROLLOUT_S)
        rewards = torch.tensor([float((step + i) % 2) for i in range(BATCH)])
        stats_tracker.get("rollout").scalar(reward=float(rewards.mean()), accepted=1)
        return {"rewards": rewards, "seqlens": torch.full((BATCH,), 100.0 + step)}

    def export_stats(self) -> dict:
        return stats_tracker.export_all(None)  # sglang_remote.py export_stats


class AwexRollout(Rollout):
    """The rollout controller's calls the AWEX handover makes (rollout_controller.py:
    pause, pause_generation_sync, offload(tags), resume; each a known time)."""

    def __init__(self) -> None:
        self.extra_s = 0.0
        self.callback_addr = "127.0.0.1:0"  # connect_engine hands it to the workers

    @inner
    def pause(self) -> None:
        time.sleep(PAUSE_S + self.extra_s)
        self.extra_s = 0.0  # the aborted request is gone after the first pause

    @inner
    def pause_generation_sync(self) -> None:
        time.sleep(PAUSE_GENERATION_S)

    @inner
    def offload(self, tags: list[str] | None = None) -> None:
        time.sleep(OFFLOAD_S)

    def resume(self) -> None:
        pass

    def set_version(self, version: int) -> None:
        pass


class AwexEngine:
    """One actor worker's engine: MegatronEngine's AWEX update_weights and onload
    (megatron_engine.py cbff54d6 l.967-993, l.1596-1611), no trace scope; what its
    update_weights took, from its own start to its return, kept as the truth."""

    def __init__(self, rank: int, barrier, windows: dict) -> None:
        self.rank, self.barrier, self.windows = rank, barrier, windows

    def connect_engine(self, engine, meta) -> None:  # train_controller.py connect_engine
        self.rollout_engine = engine

    @inner
    def onload(self) -> None:  # the adapter's resume_memory, then a barrier
        time.sleep(ONLOAD_S)
        self.barrier.wait()

    def update_weights(self, meta: dict) -> None:
        start = time.time()
        time.sleep(WEIGHTS_S + RANK_EXTRA_S[self.rank])  # execute_colocate_weight_update
        self.barrier.wait()  # dist.barrier(group=self.cpu_group)
        time.sleep(FINISH_S)  # finish_colocate_weight_update
        if self.rank == 0:  # rollout_engine.onload(tags=["kv_cache"]), continue_generation()
            time.sleep(FINISH_S)
        self.barrier.wait()
        self.windows[self.rank] = [start, time.time()]


class Scheduler:
    """FAKE scheduler: ``async_call_engine`` (scheduler_api.py) runs the method on the
    named engine in its worker (a thread here) and awaits its answer, as the RPC does;
    each rank's weight update from its dispatch to its answer kept as the truth (what
    the adapter times: the worker's own window and the thread's hand-over each way)."""

    def __init__(self, engines: dict, dispatched: dict) -> None:
        self.engines, self.dispatched = engines, dispatched

    async def async_call_engine(self, worker_id, method, engine_name=None, *args,
                                rpc_meta=None, **kwargs):
        engine = self.engines[engine_name or worker_id]
        start = time.time()
        try:
            return await asyncio.to_thread(getattr(engine, method), *args, **kwargs)
        finally:
            if method == "update_weights":
                self.dispatched[engine.rank] = [start, time.time()]


def actor_controller(actor: Actor, rollout: AwexRollout, windows: dict, dispatched: dict):
    """AReaL's own TrainController as PPOTrainer's actor in single-controller mode: two
    workers ``actor/0``, ``actor/1`` (both data-parallel heads of ``megatron:d2``), as
    ``initialize(role="actor")`` leaves it, connected to the rollout; the PPO work
    itself in this process, as the other runs' (its events on rank 0's lane)."""
    from areal.api import Worker
    from areal.api.cli_args import TrainEngineConfig
    from areal.infra.controller.train_controller import TrainController

    class ActorController(TrainController):
        compute_advantages = staticmethod(actor.compute_advantages)
        ppo_update = staticmethod(actor.ppo_update)
        export_stats = staticmethod(actor.export_stats)

    barrier = threading.Barrier(2, timeout=60)
    engines = {f"actor/{r}": AwexEngine(r, barrier, windows) for r in range(2)}
    controller = ActorController(AwexEngine, TrainEngineConfig(
        backend="megatron:d2", experiment_name="e", trial_name="t", path=""),
        Scheduler(engines, dispatched))
    controller._worker_role = "actor"  # initialize(role="actor", ...)
    controller.workers = [Worker(id=f"actor/{r}", ip="127.0.0.1") for r in range(2)]
    controller.workers_is_dp_head = [True, True]
    controller.connect_engine(rollout, {"type": "awex"})
    return controller


class Trainer:
    """What of PPOTrainer a user's script hands to rl_insight: ``.config`` and
    ``.stats_logger``, built in PPOTrainer.__init__'s order; ``train`` is its loop."""

    def __init__(self, config: BaseExperimentConfig, ft_spec: FinetuneSpec,
                 awex: bool = False) -> None:
        self.config = config
        self.awex = awex
        self.rank_windows: dict = {}
        self.dispatched: dict = {}
        self.actor = Actor()
        self.rollout = AwexRollout() if awex else Rollout()
        if awex:
            self.actor = actor_controller(self.actor, self.rollout, self.rank_windows,
                                          self.dispatched)
        self.stats_logger = StatsLogger(config, ft_spec)  # rl_trainer.py PPOTrainer.__init__
        self._config_perf_tracer()
        self.truth: list[dict] = []

    def _config_perf_tracer(self) -> None:  # rl_trainer.py PPOTrainer._config_perf_tracer
        rank = int(os.getenv("RANK", "0"))
        if self.config.perf_tracer is None:
            return
        perf_tracer.configure(self.config.perf_tracer, rank=rank, role="master")

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _is_v1_awex_colocate(self, config) -> bool:  # rl_trainer.py l.509-526
        return self.awex

    def _untimed(self, part: str, fn) -> None:
        """One of the AWEX handover's calls, which AReaL neither times nor traces: its
        wall time kept as the truth of its part, and in ``inner`` its FAKE calls' own
        (first start to last end): what the adapter's timer around them measures lies
        between the two."""
        INNER.clear()
        t0 = time.perf_counter()
        fn()
        took = time.perf_counter() - t0
        phases, inside = self.truth[-1]["phases"], self.truth[-1]["inner"]
        phases[part] = phases.get(part, 0.0) + took
        inside[part] = inside.get(part, 0.0) + (max(e for _, e in INNER) -
                                                min(s for s, _ in INNER) if INNER else 0.0)

    def _phase(self, key: str, name: str, category, gs: int, fn, extra_args=None):
        """One of PPOTrainer.train's `with record_timing(key), trace_scope(name)` pairs,
        its wall time kept as the truth, and in ``inner`` the time inside both: what
        either measures lies between the two."""
        args = {"global_step": gs, **(extra_args or {})}
        t0, w0 = time.perf_counter(), time.time()
        with stats_tracker.record_timing(key), \
                perf_tracer.trace_scope(name, category=category, args=args):
            i0 = time.perf_counter()
            out = fn()
            self.truth[-1]["inner"][key] = time.perf_counter() - i0
        self.truth[-1]["phases"][key] = time.perf_counter() - t0
        self.truth[-1]["windows"][key] = [w0, time.time()]
        return out

    def train(self, total_epochs: int, slow_step: int) -> None:
        max_steps = total_epochs * STEPS_PER_EPOCH
        for global_step in range(0, max_steps):
            epoch = global_step // STEPS_PER_EPOCH
            step = global_step % STEPS_PER_EPOCH
            self.truth.append({"global_step": global_step, "phases": {}, "inner": {},
                               "windows": {}})
            extra = SLOW_EXTRA_S if global_step == slow_step else 0.0
            if self.awex:
                self.rollout.extra_s = extra
            else:
                self.actor.engine.extra_s = extra
            batch = self._phase("rollout", "train.rollout", Category.COMPUTE, global_step,
                                lambda gs=global_step: self.rollout.prepare_batch(gs),
                                {"epoch_step": step})
            if self.awex:  # l.768-780: from the rollout to training, untimed
                self._untimed("rollout_pause", self.rollout.pause)
                self._untimed("rollout_pause", self.rollout.pause_generation_sync)
                self._untimed("offload", lambda: self.rollout.offload(tags=["kv_cache"]))
                self._untimed("offload", lambda: self.rollout.offload(tags=["weights"]))
                self._untimed("offload", self.actor.onload)
            adv = self._phase("compute_advantage", "train.compute_advantage",
                              Category.COMPUTE, global_step,
                              lambda b=batch: self.actor.compute_advantages(b))
            self._phase("train_step", "train.ppo_update", Category.COMPUTE, global_step,
                        lambda a=adv: self.actor.ppo_update(a))
            if self.awex:  # l.857-874: the save first, then the rollout paused again
                self._save(global_step)
                self._untimed("rollout_pause", self.rollout.pause)
            self._phase("update_weights", "train.update_weights", Category.COMM,
                        global_step,
                        lambda gs=global_step: self.actor.update_weights({"version": gs + 1}))
            if self.awex:
                self.rollout.set_version(global_step + 1)
                self.truth[-1]["ranks"] = dict(self.rank_windows)
                self.truth[-1]["dispatched"] = dict(self.dispatched)
            else:
                self._save(global_step)
            self._phase("eval", "train.eval", Category.COMPUTE, global_step, lambda: None)
            self._phase("clear_batches", "train.clear_batches", Category.INSTR,
                        global_step, lambda: None)
            with perf_tracer.trace_scope("train.log_stats", category=Category.INSTR,
                                         args={"global_step": global_step}):
                self._export_and_commit_stats(epoch, step, global_step)
            if self.awex:
                self.rollout.resume()  # l.964
            perf_tracer.save(step=global_step)  # PPOTrainer._save_perf_tracer

    def _save(self, global_step: int) -> None:  # _save_training_state, l.968-997
        self._phase("save", "train.save", Category.IO, global_step, lambda: None)
        self._phase("checkpoint_for_recover", "train.checkpoint", Category.IO,
                    global_step, lambda: None)

    def _export_and_commit_stats(self, epoch: int, epoch_step: int, global_step: int):
        stats = self.actor.export_stats()
        stats.update(self.rollout.export_stats())
        self.stats_logger.commit(epoch, epoch_step, global_step, stats)

    def close(self) -> None:  # PPOTrainer.close: the logger, then the tracer's last save
        self.stats_logger.close()
        perf_tracer.save(force=True)


def config_for(root: str, experiment: str, trial: str, tracer: bool) -> BaseExperimentConfig:
    """The experiment config a launcher loads (cli_args.py), backends as it defaults
    them: wandb, swanlab and trackio disabled, no tensorboard."""
    cfg = BaseExperimentConfig(experiment_name=experiment, trial_name=trial,
                               total_train_epochs=2)
    cfg.stats_logger.experiment_name = experiment
    cfg.stats_logger.trial_name = trial
    cfg.stats_logger.fileroot = root
    # a key in the config (wandb stays disabled: AReaL only exports it): masked when the
    # config is handed over
    cfg.stats_logger.wandb.wandb_api_key = "0123456789abcdef0123456789abcdef01234567"
    if tracer:  # perf_tracer.enabled=true on the command line
        cfg.perf_tracer = PerfTracerConfig(experiment_name=experiment, trial_name=trial,
                                           fileroot=root, enabled=True, save_interval=1)
    return cfg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="AReaL's fileroot")
    p.add_argument("--experiment", default="areal-replay", help="AReaL's experiment_name")
    p.add_argument("--trial", required=True, help="AReaL's trial_name")
    p.add_argument("--epochs", type=int, default=2, help="of 3 steps each")
    p.add_argument("--slow-step", type=int, default=4)
    p.add_argument("--no-perf-tracer", action="store_true")
    p.add_argument("--no-attach", action="store_true", help="RL-Insight left out")
    p.add_argument("--awex", action="store_true", help="AWEX's colocated weight update")
    p.add_argument("--truth", required=True, help="a JSON file: what each phase took")
    a = p.parse_args()
    import rl_insight.integrations.areal

    cfg = config_for(a.root, a.experiment, a.trial, not a.no_perf_tracer)
    ft_spec = FinetuneSpec(total_train_epochs=a.epochs, dataset_size=STEPS_PER_EPOCH * BATCH,
                           train_batch_size=BATCH)
    with Trainer(cfg, ft_spec, a.awex) as trainer:
        if not a.no_attach:
            rl_insight.integrations.areal.attach(trainer)  # the user's one added line
        trainer.train(a.epochs, a.slow_step)
    trace = None
    if perf_tracer.is_configured():
        trace = str(perf_tracer.get_tracer()._output_path)
    with open(a.truth, "w") as f:
        json.dump({"steps": trainer.truth, "slow_step": a.slow_step, "trace_file": trace,
                   "last_commit_step": trainer.stats_logger.state_dict()["last_commit_step"]},
                  f, indent=1)


if __name__ == "__main__":
    main()
