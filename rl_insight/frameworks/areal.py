"""AReaL's table: its timeperf/* keys and its perf tracer's scopes."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    ADVANTAGES,
    CHECKPOINT,
    CRITIC_UPDATE,
    CRITIC_VALUES,
    DATA,
    OFFLOAD,
    REF_LOGP,
    VALIDATION,
)
from rl_insight.frameworks.table import (
    DRIVER,
    GENERATE,
    RANK,
    WEIGHTS,
    Framework,
    Headline,
    SpanRule,
    t,
)

ROLLOUT_PAUSE = "rollout_pause"  # the rollout paused (its requests aborted) for training

TABLE = Framework(
    name="areal", title="AReaL",
    source="areal-project/AReaL main cbff54d6 (after v2.0.0 fee938ea; moved from "
           "inclusionAI/AReaL; its names the same as at 4aef98d8 = areal 1.0.4 on PyPI, "
           "which has no 2.x) areal/trainer/rl_trainer.py (stats_tracker.record_timing "
           "keys, logged as timeperf/<key>; perf_tracer.trace_scope names), "
           "areal/utils/perf_tracer.py; AWEX's colocated handover: "
           "rl_insight/integrations/areal_awex.py",
    timings={"timeperf/rollout": t(GENERATE), "timeperf/ref_logp": t(REF_LOGP),
             "timeperf/teacher_logp": t("teacher_compute_log_prob"),
             "timeperf/recompute_logp": t(ACTOR_LOGP),
             "timeperf/critic_values": t(CRITIC_VALUES),
             "timeperf/compute_advantage": t(ADVANTAGES),
             "timeperf/train_step": t(ACTOR_UPDATE),
             "timeperf/critic_train_step": t(CRITIC_UPDATE),
             "timeperf/update_weights": t(WEIGHTS), "timeperf/save": t(CHECKPOINT),
             "timeperf/checkpoint_for_recover": t(CHECKPOINT),
             "timeperf/eval": t(VALIDATION), "timeperf/clear_batches": t(DATA),
             "timeperf/*_onload": t(OFFLOAD), "timeperf/*_offload": t(OFFLOAD),
             # the rollout's pause for training or the weight update (rl_trainer.py
             # l.553-569 with TMS offload; AWEX's untimed handover, l.770-774 and l.874,
             # measured by the adapter under the same names): a part named, not offload
             "timeperf/rollout_pause*": t(ROLLOUT_PAUSE),
             "timeperf/rollout_continue_generation": t(OFFLOAD),
             "timeperf/rollout_resume": t(OFFLOAD)},
    # its Chrome-trace events (traces-r{rank}.jsonl): the trainer loop's scopes, and the
    # actor's own work on each rank
    spans={"train.rollout": SpanRule(DRIVER, GENERATE),
           "train.compute_values": SpanRule(DRIVER, CRITIC_VALUES),
           "train.ref_logp": SpanRule(DRIVER, REF_LOGP),
           "train.teacher_logp": SpanRule(DRIVER, "teacher_compute_log_prob"),
           "train.recompute_logp": SpanRule(DRIVER, ACTOR_LOGP),
           "train.compute_advantage": SpanRule(DRIVER, ADVANTAGES),
           "train.ppo_update": SpanRule(DRIVER, ACTOR_UPDATE),
           "train.critic_ppo_update": SpanRule(DRIVER, CRITIC_UPDATE),
           "train.update_weights": SpanRule(DRIVER, WEIGHTS),
           "train.save": SpanRule(DRIVER, CHECKPOINT),
           "train.checkpoint": SpanRule(DRIVER, CHECKPOINT),
           "train.eval": SpanRule(DRIVER, VALIDATION),
           "train.clear_batches": SpanRule(DRIVER, DATA),
           "train.*_onload": SpanRule(DRIVER, OFFLOAD),
           "train.*_offload": SpanRule(DRIVER, OFFLOAD),
           "train.rollout_pause*": SpanRule(DRIVER, ROLLOUT_PAUSE),
           "train.rollout_continue_generation": SpanRule(DRIVER, OFFLOAD),
           "train.rollout_resume": SpanRule(DRIVER, OFFLOAD),
           "ppo_actor.ppo_update": SpanRule(RANK, ACTOR_UPDATE),
           "ppo_actor.compute_advantages": SpanRule(RANK, ADVANTAGES),
           "ppo_actor.compute_logp": SpanRule(RANK, ACTOR_LOGP),
           "ppo_critic.ppo_update": SpanRule(RANK, CRITIC_UPDATE),
           "ppo_critic.compute_values": SpanRule(RANK, CRITIC_VALUES),
           "fsdp_engine.update_weights_from_distributed": SpanRule(RANK, WEIGHTS),
           "fsdp_engine.update_weights_from_disk": SpanRule(RANK, WEIGHTS),
           "megatron_engine.update_weights_from_distributed": SpanRule(RANK, WEIGHTS),
           "megatron_engine.update_weights_from_disk": SpanRule(RANK, WEIGHTS)},
    rank_from=("rank", r"(\d+)"),
    step_from_attr="global_step",  # no step span: a step is its events' global_step
    key_prefixes=("ppo_actor/", "rollout/", "timeperf/", "eval-rollout/"),
    # its dashboard's first panels, its own keys:
    # areal/trainer/ppo/actor.py (scope ppo_actor), engine's train_batch
    headlines=(
        Headline("Task reward", "short", ("ppo_actor/task_reward/avg",)),
        Headline("Actor loss", "short", ("ppo_actor/update/actor_loss/avg",)),
        Headline("Clip ratio", "short", ("ppo_actor/update/clip_ratio/avg",)),
        Headline("Gradient norm and learning rate", "short",
                 ("ppo_actor/update/grad_norm", "ppo_actor/update/lr")),
        Headline("Sequence length", "short", ("ppo_actor/seq_len/avg",)),
    ),
)
