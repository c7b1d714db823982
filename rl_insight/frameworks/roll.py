"""ROLL's table: its time/* keys and its own spans (driver and worker scopes), in its RLVR
and agentic pipelines."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    ADVANTAGES,
    CRITIC_UPDATE,
    CRITIC_VALUES,
    DATA,
    OFFLOAD,
    REF_LOGP,
    REWARD,
    VALIDATION,
)
from rl_insight.frameworks.table import (
    DRIVER,
    GENERATE,
    RANK,
    STEP,
    WEIGHTS,
    Framework,
    Headline,
    SpanRule,
    t,
)
from rl_insight.wire.attributes import STEP_STATE

LOGGING = "logging"  # the agentic step's own log: trajectories decoded and printed
# the agentic pipeline's batch transfer (alibaba/ROLL 8eb27cc2 agentic_pipeline.py l.304-305:
# from the rollout scheduler's return, rollout_scheduler.py l.692, to the driver), inside
# its rollout timer (l.297-312)
BATCH_TRANSFER = "time/get_batch_cost_train"

TABLE = Framework(
    name="roll", title="ROLL",
    source="alibaba/ROLL 8eb27cc2 roll/pipeline/rlvr/rlvr_pipeline.py, "
           "roll/pipeline/agentic/agentic_pipeline.py, rlvr_vlm_pipeline.py (time/* timers), "
           "roll/utils/telemetry.py, roll/distributed/scheduler/decorator.py (spans)",
    step_key="system/step",
    # the agentic pipeline's pipeline_step_total timer, the step's own (agentic_pipeline.py
    # l.236, set at l.616 after the step and logged with it, l.617); RLVR logs the step
    # before's under the same key (rlvr_pipeline.py l.476-496, l.842): below, outside_step
    step_time_key="time/step_total",
    timings={"time/step_generate": t(GENERATE), "time/step_rollout": t(GENERATE),
             "time/step_model_update": t(WEIGHTS),
             "time/ref_log_probs_values": t(REF_LOGP),
             "time/step_ref_log_probs_values_reward": t(REF_LOGP),
             "time/old_log_probs": t(ACTOR_LOGP),
             "time/step_old_log_probs_values": t(ACTOR_LOGP),
             "time/step_train": t(ACTOR_UPDATE), "time/val_step": t(VALIDATION),
             "time/step_val": t(VALIDATION), "time/step_adv": t(ADVANTAGES),
             "*/time/compute_advantage": t(ADVANTAGES),
             "*/time/reward_postprocess": t(REWARD),
             "*/time/get_token_reward": t(REWARD),
             "time/step_cal_token_reward": t(REWARD),
             "time/step_cal_norm_rewards": t(REWARD),
             "time/step_stop_server": t(OFFLOAD),
             # the sample-level mask of each domain's batch (rlvr_pipeline.py l.685-689:
             # per domain; rlvr_vlm_pipeline.py l.492-496: the batch's)
             "*/time/get_sample_level_mask": t(DATA),
             "time/get_sample_level_mask": t(DATA),
             # the agentic pipeline's (agentic_pipeline.py run(), 8eb27cc2): the sampler
             # shrunk off the training GPUs in partial-GPU mode (l.343-358), the
             # response-level mask (l.470-475), the data metrics (l.552-556), the step's
             # log (l.567-614), the batch's transfer (enclosed below)
             "time/step_shrink": t(OFFLOAD),
             "time/step_cal_response_level_mask": t(DATA),
             "time/step_compute_data_metrics": t(DATA),
             "time/step_log": t(LOGGING),
             BATCH_TRANSFER: t(DATA)},
    # RLVR's dicts (rlvr_pipeline.py l.566, rlvr_vlm_pipeline.py l.430; never the agentic
    # pipeline's) carry the step before's time/step_total: no step time there
    outside_step={"time/step_generate": frozenset({"time/step_total"})},
    encloses={"time/step_rollout": (BATCH_TRANSFER,)},
    spans={"pipeline_step": SpanRule(STEP, STEP_STATE, "global_step"),
           "generate": SpanRule(DRIVER, GENERATE), "rollout": SpanRule(DRIVER, GENERATE),
           "model_update": SpanRule(DRIVER, WEIGHTS),
           "ref_log_probs": SpanRule(DRIVER, REF_LOGP),
           "cal_ref_log_probs": SpanRule(DRIVER, REF_LOGP),
           "old_log_probs_and_values": SpanRule(DRIVER, ACTOR_LOGP),
           "cal_old_log_probs_values": SpanRule(DRIVER, ACTOR_LOGP),
           "compute_advantage": SpanRule(DRIVER, ADVANTAGES),
           "compute_token_reward": SpanRule(DRIVER, REWARD),
           "reward_postprocess": SpanRule(DRIVER, REWARD),
           "cal_token_reward": SpanRule(DRIVER, REWARD),
           "train": SpanRule(DRIVER, ACTOR_UPDATE),
           "validation": SpanRule(DRIVER, VALIDATION), "val": SpanRule(DRIVER, VALIDATION),
           "val_generate": SpanRule(DRIVER, VALIDATION),
           "stop_server": SpanRule(DRIVER, OFFLOAD),  # the rollout's servers stopped
           "get_sample_level_mask": SpanRule(DRIVER, DATA),
           # the agentic pipeline's driver spans (agentic_pipeline.py, 8eb27cc2)
           "shrink_sampler": SpanRule(DRIVER, OFFLOAD),  # l.343-344
           "cal_response_level_mask": SpanRule(DRIVER, DATA),  # l.470-471
           "cal_response_norm_rewards": SpanRule(DRIVER, REWARD),  # l.478-479
           "compute_data_metrics": SpanRule(DRIVER, DATA),  # l.552-553
           "driver:log": SpanRule(DRIVER, LOGGING),  # l.567-568
           # each rank's own work, its cluster in the resource's service.name
           "actor_train:worker.train_step": SpanRule(RANK, ACTOR_UPDATE),
           "actor_train:worker.compute_log_probs": SpanRule(RANK, ACTOR_LOGP),
           "reference:worker.compute_log_probs": SpanRule(RANK, REF_LOGP),
           "critic:worker.compute_values": SpanRule(RANK, CRITIC_VALUES),
           "critic:worker.train_step": SpanRule(RANK, CRITIC_UPDATE)},
    scopes=frozenset({"driver", "worker", "scheduler", "env_manager"}),
    # service.instance.id "{cluster}-{rank}-G{gpus}" (roll/distributed/executor/cluster.py)
    rank_from=("service.instance.id", r"[^-]+-(\d+)-G.*"),
    key_prefixes=("actor/", "critic/", "time/", "token/", "system/", "val_correct/"),
    # its dashboard's first panels, its own keys:
    # roll/utils/metrics/metrics_manager.py, pipeline/rlvr/actor_worker.py
    headlines=(
        Headline("Score and reward", "short", ("critic/score/mean", "critic/rewards/mean")),
        Headline("Policy loss", "short", ("actor/pg_loss", "actor/kl_loss")),
        Headline("Clip fraction", "short", ("actor/clipfrac",)),
        Headline("Gradient norm and learning rate", "short",
                 ("actor_train/grad_norm", "actor/lr")),
        Headline("Response length", "short", ("token/response_length/mean",)),
    ),
)
