"""TRL's table: its GRPOTrainer's profiling contexts' times, as its callback hands them over,
and its AsyncGRPOTrainer's own step timers."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_UPDATE,
    REF_LOGP,
    REWARD,
)
from rl_insight.frameworks.table import (
    GENERATE,
    IDLE,
    WAITING_FOR_SAMPLES,
    WAITING_FOR_SLOWEST,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

# AsyncGRPOTrainer's weight sync and the three phases it logs inside it
# (trl/experimental/async_grpo/async_grpo_trainer.py _sync_weight l.1733-1749, trl 1.16.0)
SYNC_PHASES = ("perf/weight_sync_pause_s", "perf/weight_sync_barrier_s",
               "perf/weight_sync_transfer_s")

TABLE = Framework(
    name="trl", title="TRL",
    source="trl 1.16.0 trl/extras/profiling.py (ProfilingContext names, "
           "<the trainer's class>.<name>), trl/trainer/grpo_trainer.py (logs: step_time); "
           "trl/experimental/async_grpo/async_grpo_trainer.py (AsyncGRPOTrainer: perf/*, "
           "its rollout worker's rollout/* in async_rollout_worker.py)",
    # AsyncGRPOTrainer: the wall time from the step before's end to this one's
    # (_log_step_metrics l.1634-1653, called at on_step_end after the weight sync), absent
    # on its first step; GRPOTrainer logs none (its step_time is a container, below)
    step_time_key="perf/step_s",
    # profiling/<name> keys are what RLInsightCallback adds to the step's logs from
    # TRL's own profiling contexts (TRL sends those to wandb, mlflow and trackio only); the
    # trainer's class is GRPOTrainer, or a subclass of it with its own name
    timings={"profiling/*.transformers.generate": t(GENERATE),
             "profiling/*.vLLM.generate": t(GENERATE),
             "profiling/*.transformers.generate_batch": t(GENERATE),
             "profiling/*._calculate_rewards": t(REWARD),
             "profiling/*.compute_loss": t(ACTOR_UPDATE),
             "profiling/optimizer_step": t(ACTOR_UPDATE),
             "profiling/*.sync_weights": t(WEIGHTS),
             "profiling/*.ref_logps": t(REF_LOGP),
             # AsyncGRPOTrainer (no profiling contexts; its rollout runs in a process of
             # its own, so only the trainer's wait for it is part of a step):
             # training_step's forward and backward (l.1627-1632; its perf/fwd_s, the
             # forward alone, is inside: a scalar), the optimizer step
             # (_OptimizerTimeCallback l.199-214)
             "perf/fwd_bwd_s": t(ACTOR_UPDATE),
             "perf/optimizer_s": t(ACTOR_UPDATE),
             # the trainer blocked on an empty rollout queue (RolloutQueueDataset.__iter__
             # l.351-365, flushed per step at l.1655-1657)
             "perf/rollout_wait_s": t(IDLE, WAITING_FOR_SAMPLES),
             # the weight sync: vLLM paused, the ranks' barrier (rank 0, which logs, waits
             # there for the slowest rank), the transfer (l.1751-1800)
             "perf/weight_sync_s": t(WEIGHTS),
             "perf/weight_sync_pause_s": t(WEIGHTS),
             "perf/weight_sync_barrier_s": t(IDLE, WAITING_FOR_SLOWEST),
             "perf/weight_sync_transfer_s": t(WEIGHTS)},
    # step_time: training_step's wall time without the optimizer step; _prepare_inputs
    # holds the generation, the rewards and the reference log-probs
    containers=frozenset({"step_time", "profiling/*._prepare_inputs",
                          "profiling/*._get_per_token_logps_and_entropies"}),
    # the weight sync's own share: the second barrier, the resume, the version's bump
    encloses={"perf/weight_sync_s": SYNC_PHASES},
    key_prefixes=("rewards/", "completions/", "clip_ratio/", "profiling/", "perf/",
                  "rollout/", "sample/", "batch/"),
    # its dashboard's first panels, its own keys (both trainers log them):
    # trl/trainer/grpo_trainer.py GRPOTrainer.log, async_grpo_trainer.py; transformers' Trainer
    headlines=(
        Headline("Reward", "short", ("reward", "reward_std")),
        Headline("Loss", "short", ("loss",)),
        Headline("Entropy", "short", ("entropy",)),
        Headline("Gradient norm and learning rate", "short",
                 ("grad_norm", "learning_rate")),
        Headline("Completion length", "short", ("completions/mean_length",)),
        Headline("Clipped region", "percentunit", ("clip_ratio/region_mean",)),
    ),
)
