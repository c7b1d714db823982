"""OpenRLHF's table: its trainer's timing keys, in its synchronous and asynchronous
trainers (openrlhf 0.11.2; the same keys since v0.10, 4908e6ee and 266fbc58)."""

from __future__ import annotations

from rl_insight.frameworks.phases import ACTOR_UPDATE
from rl_insight.frameworks.table import (
    GENERATE,
    IDLE,
    WAITING_FOR_SAMPLES,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

# keys the adapter adds to the asynchronous trainer's dicts (OpenRLHF logs none of them):
# its --train.async_queue_size, which marks the dict as the asynchronous trainer's (there
# the generation overlaps the step before it); and what its timing/broadcast and
# timing/step_total hold besides work, measured around BasePPOTrainer's own methods
ASYNC_MARK = "async/queue_size"
WEIGHT_SYNC = "async/weight_sync_s"  # BasePPOTrainer.broadcast_to_vllm itself
# the rest of timing/broadcast: waiting on vLLM's lock while the next batch generates
# (with --train.partial_rollout_enable: pausing and resuming the engines instead)
BROADCAST_WAIT = "async/broadcast_wait_s"
# from the step before's end (its logging and saving, or an evaluation) to train_step:
# waiting on the rollout queue for this step's batch
QUEUE_WAIT = "async/queue_wait_s"

TABLE = Framework(
    name="openrlhf", title="OpenRLHF",
    source="openrlhf 0.11.2 openrlhf/trainer/ppo_trainer.py (BasePPOTrainer.train_step "
           "l.213-264, PPOTrainer.fit l.503-579: timing/*), ppo_trainer_async.py "
           "(TrainingActor.fit l.202-253); GitHub OpenRLHF/OpenRLHF 3c3be623 (v0.11.0) "
           "the same",
    # every dict is logged with its global_step (save_logs_and_checkpoints), 1 first
    # sync: the sum of the four parts below (PPOTrainer.fit l.545); async: the wall clock
    # since the step before, its queue wait and that step's logging and saving included
    # (TrainingActor.fit l.237-238)
    step_time_key="timing/step_total",
    timings={
        # samples_generator.generate_samples: vLLM's generation and its rewards (remote
        # reward model or agent function, run inside the engines' actors)
        "timing/generation": t(GENERATE),
        # experience_maker.make_experience_batch: the actor's, reference's and critic's
        # forward passes, the reward model's, the advantages
        "timing/make_experience": t("make_experience"),
        # ppo_train: the actor's and the critic's fit, side by side
        "timing/ppo_train": t(ACTOR_UPDATE),
        # broadcast_to_vllm; async: also waiting for the generation in flight to release
        # vLLM's lock (or, with partial rollout, pausing and resuming the engines)
        "timing/broadcast": t(WEIGHTS),
        # async only (the adapter's): timing/broadcast split, and the queue wait
        WEIGHT_SYNC: t(WEIGHTS),
        # the broadcast waits on vLLM's lock for the generation in flight, the trainer on
        # its queue for the next batch: both wait for the rollout (docs/frameworks.md)
        BROADCAST_WAIT: t(IDLE, WAITING_FOR_SAMPLES),
        QUEUE_WAIT: t(IDLE, WAITING_FOR_SAMPLES),
    },
    # async: this dict's batch was generated while the step before trained, and its
    # broadcast is told in two parts by the adapter's keys
    outside_step={ASYNC_MARK: frozenset({"timing/generation", "timing/broadcast"})},
    key_prefixes=("rollout/", "timing/", "eval_", "async/"),
    # its dashboard's first panels, its own keys: ppo_trainer.py _compute_rollout_stats;
    # trainer/ray/ppo_actor.py fit (policy_loss, kl, actor_grad_norm, actor_lr)
    headlines=(
        Headline("Reward", "short", ("rollout/reward_mean", "rollout/reward_std")),
        Headline("Policy loss", "short", ("policy_loss",)),
        Headline("KL", "short", ("kl",)),
        Headline("Gradient norm and learning rate", "short",
                 ("actor_grad_norm", "actor_lr")),
        Headline("Response length", "short", ("rollout/response_length_mean",)),
        Headline("Truncated", "percentunit", ("rollout/truncated_rate",)),
    ),
    engines="vllm",
    # BasePPOTrainer: both trainers' base, in the trainer actor's process (the async
    # trainer's TrainingActor imports it from there)
    on_import={"openrlhf.trainer.ppo_trainer":
               "rl_insight.integrations.openrlhf:patch_trainer"},
)
