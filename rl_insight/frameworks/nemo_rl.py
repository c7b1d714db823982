"""NeMo-RL's table: its timing/train/* keys, its rl.grpo.* spans and goodput buckets."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    ADVANTAGES,
    CHECKPOINT,
    DATA,
    OFFLOAD,
    REWARD,
    VALIDATION,
)
from rl_insight.frameworks.table import (
    DRIVER,
    GENERATE,
    IDLE,
    STEP,
    WAITING_FOR_SAMPLES,
    WAITING_FOR_SYNC,
    WEIGHTS,
    Framework,
    Headline,
    SpanRule,
    t,
)
from rl_insight.wire.attributes import STEP_STATE

RECOMPUTE_KV_SCALES = "recompute_kv_scales"  # a part of its own, named as NeMo-RL's timer

TABLE = Framework(
    name="nemo_rl", title="NeMo-RL",
    source="NVIDIA-NeMo/RL 7ea279ab nemo_rl/algorithms/grpo.py, grpo_sync.py, "
           "single_controller.py (Timer labels under prefix timing/train); spans: branch "
           "rajsin/lens-with-goodput ce32d420 nemo_rl/telemetry/instrumentation.py, grpo.py",
    step_time_key="timing/train/total_step_time",
    timings={"timing/train/generation": t(GENERATE),
             "timing/train/exposed_generation": t(GENERATE),
             "timing/train/prepare_for_generation/total": t(WEIGHTS),
             "timing/train/weight_sync": t(WEIGHTS),
             "timing/train/reward_calculation": t(REWARD),
             "timing/train/data_processing": t(DATA),
             "timing/train/logprob_inference_prep": t(ACTOR_LOGP),
             "timing/train/policy_and_reference_logprobs": t(ACTOR_LOGP),
             "timing/train/advantage_calculation": t(ADVANTAGES),
             "timing/train/training_prep": t(ACTOR_UPDATE),
             "timing/train/policy_training": t(ACTOR_UPDATE),
             "timing/train/checkpointing": t(CHECKPOINT),
             "timing/train/offload_before_refit": t(OFFLOAD),
             # FP8 KV-cache scales calibrated on the step's batch after the policy update,
             # for the next refit (grpo.py l.3339-3350, grpo_sync.py l.942-960; in the
             # single controller the same calibration is inside weight_sync,
             # single_controller.py l.1644-1661, untimed apart)
             "timing/train/recompute_kv_scales": t(RECOMPUTE_KV_SCALES),
             # grpo.py async_grpo_train at 7ea279ab: the buffer's starvation sleeps wait
             # for trajectories (l.4618), the refit bubble for the weight sync (l.4942-4976)
             "timing/train/idle/buffer_starvation": t(IDLE, WAITING_FOR_SAMPLES),
             "timing/train/idle/refit_bubble": t(IDLE, WAITING_FOR_SYNC),
             "timing/train/idle/*": t(IDLE)},
    # timers inside others in its async GRPO (grpo.py async_grpo_train at 7ea279ab; a
    # step logs each label's timings summed, l.5286-5288): the refit bubble (timer.start
    # l.4942 to timer.stop l.4976) holds the weight sync (l.4959-4974) and the wait for
    # the generation in flight before it (exposed_generation l.4946), whose label also
    # times the sampling from the buffer (l.4528-4654) and the colocated engine's pause
    # (l.4764): all of it is taken off, so the bubble's own share is a lower bound (its
    # logger-metrics call, l.4952-4955, falls to `other`); the sampling's exposed_generation
    # holds the buffer's starvation sleeps (l.4618, only there)
    encloses={"timing/train/idle/refit_bubble": ("timing/train/weight_sync",
                                                 "timing/train/exposed_generation"),
              "timing/train/exposed_generation": ("timing/train/idle/buffer_starvation",)},
    # dynamic_sampling (DAPO's filter, grpo.py l.1752) runs inside reward_calculation's
    # timer (l.3036-3089): a scalar, not a part of its own
    containers=frozenset({"timing/train/dynamic_sampling",
                          "timing/train/prepare_for_generation/transfer_and_update_weights",
                          "timing/train/get_logprobs/*", "timing/train/policy_training/*",
                          "timing/train/valid_tokens_per_sec_per_gpu",
                          "timing/train/init/total"}),
    spans={"rl.grpo.step": SpanRule(STEP, STEP_STATE, "rl.iteration"),
           "rl.grpo.collect_rollouts": SpanRule(DRIVER, GENERATE),
           "rl.grpo.compute_rewards": SpanRule(DRIVER, REWARD),
           "rl.grpo.data_processing": SpanRule(DRIVER, DATA),
           "rl.grpo.compute_logprobs": SpanRule(DRIVER, ACTOR_LOGP),
           "rl.grpo.compute_advantages": SpanRule(DRIVER, ADVANTAGES),
           "rl.grpo.policy_update": SpanRule(DRIVER, ACTOR_UPDATE),
           "rl.grpo.evaluate": SpanRule(DRIVER, VALIDATION),
           "rl.grpo.save_checkpoint": SpanRule(DRIVER, CHECKPOINT),
           "rl.idle.buffer_starvation": SpanRule(DRIVER, IDLE),
           "rl.idle.refit_bubble": SpanRule(DRIVER, IDLE),
           # its Chrome trace (branch youngeunk/ray-overhead 852f78df nemo_rl/utils/trace.py):
           # its step 0-based where its logger's is 1-based
           "step": SpanRule(STEP, STEP_STATE, "step", step_offset=1),
           "sample": SpanRule(DRIVER, GENERATE),
           "reward_calculation": SpanRule(DRIVER, REWARD),
           "data_processing": SpanRule(DRIVER, DATA),
           "policy_and_reference_logprobs": SpanRule(DRIVER, ACTOR_LOGP),
           "policy_training": SpanRule(DRIVER, ACTOR_UPDATE),
           "weight_sync": SpanRule(DRIVER, WEIGHTS),
           "checkpointing": SpanRule(DRIVER, CHECKPOINT)},
    scopes=frozenset({"nemo.lens", "nemo.lens.helpers"}),
    bucket_attr="rl.bucket",
    # rollout/: the single controller's watchdog (single_controller.py l.1257-1278)
    key_prefixes=("train/", "timing/train/", "performance/", "validation/", "efficiency/",
                  "rollout/"),
    # its dashboard's first panels, its own keys:
    # nemo_rl/algorithms/grpo.py (prefixes train, performance)
    headlines=(
        Headline("Reward", "short", ("train/reward",)),
        Headline("Loss", "short", ("train/loss",)),
        Headline("KL penalty and entropy", "short",
                 ("train/kl_penalty", "train/approx_entropy")),
        Headline("Gradient norm and learning rate", "short",
                 ("train/grad_norm", "train/lr")),
        Headline("Generated tokens per sample", "short",
                 ("train/mean_gen_tokens_per_sample",)),
        Headline("Throughput", "short", ("performance/tokens_per_sec",)),
    ),
    # its composite Logger, where a process builds one itself: the single controller's
    # Ray actor (single_controller.py l.162-168), out of reach of attach() in the driver
    on_import={"nemo_rl.utils.logger": "rl_insight.integrations.nemo_rl:patch_logger"},
)
