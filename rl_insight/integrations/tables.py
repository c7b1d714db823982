"""The frameworks' tables: each framework's step key, its timing keys as parts of a step,
and its own spans as lanes and states (rl_insight/integrations/table.py reads them).

Every key and span name is the framework's own, read from its source at the file and
commit its ``source`` names (docs/frameworks.md says what each table leaves out, and
why). State names are ours where ours exist, so a framework's ranks fill the same rows as
verl's: ``actor_update``, ``actor_compute_log_prob``, ``ref_compute_log_prob``,
``update_weights``; slime's also read as upstream's slime dashboard expects them.
"""

from __future__ import annotations

from rl_insight.integrations.table import (
    DRIVER,
    GENERATE,
    IDLE,
    RANK,
    STEP,
    WEIGHTS,
    Framework,
    SpanRule,
    Timing,
)

# our phase names (a rank lane's states in verl: DistProfiler.annotate's roles)
ACTOR_UPDATE = "actor_update"
ACTOR_LOGP = "actor_compute_log_prob"
REF_LOGP = "ref_compute_log_prob"
CRITIC_VALUES = "critic_compute_values"
CRITIC_UPDATE = "critic_update"
REWARD = "reward"
ADVANTAGES = "compute_advantage"
DATA = "data_processing"
VALIDATION = "validation"
CHECKPOINT = "save_checkpoint"
OFFLOAD = "offload"


def _t(part: str) -> Timing:
    return Timing(part)


VERL = Framework(
    name="verl", title="verl",
    source="verl 0.9.1 verl/trainer/ppo/ray_trainer.py (marked_timer names, logged as "
           "timing_s/<name> by compute_timing_metrics)",
    step_key="training/global_step", step_time_key="timing_s/step",
    timings={"timing_s/gen": _t(GENERATE), "timing_s/reward": _t(REWARD),
             "timing_s/old_log_prob": _t(ACTOR_LOGP), "timing_s/ref": _t(REF_LOGP),
             "timing_s/values": _t(CRITIC_VALUES), "timing_s/adv": _t(ADVANTAGES),
             "timing_s/update_critic": _t(CRITIC_UPDATE),
             "timing_s/update_actor": _t(ACTOR_UPDATE),
             "timing_s/update_weights": _t(WEIGHTS), "timing_s/testing": _t(VALIDATION),
             "timing_s/save_checkpoint": _t(CHECKPOINT)},
    key_prefixes=("actor/", "critic/", "timing_s/", "perf/", "response_length/"),
)

SLIME = Framework(
    name="slime", title="slime",
    source="THUDM/slime 624b824a slime/backends/megatron_utils/actor.py (Timer names, "
           "logged as perf/<name>_time by slime/observability/train_metric_utils.py "
           "log_perf_data), slime/observability/rollout_metrics.py (perf/rollout_time)",
    step_key="rollout/step", step_time_key="perf/step_time",
    # a rollout's dicts: the rollout manager's at its generation's end, then the training
    # rank's before its actor train and its perf dict at its end, which ends the step
    step_ends_with="perf/step_time",
    timings={"perf/rollout_time": _t(GENERATE),
             "perf/actor_train_time": _t(ACTOR_UPDATE),
             "perf/log_probs_time": _t(ACTOR_LOGP),
             "perf/ref_log_probs_time": _t(REF_LOGP),
             "perf/teacher_log_probs_time": _t("teacher_compute_log_prob"),
             "perf/data_preprocess_time": _t(DATA),
             "perf/wake_up_time": _t(OFFLOAD),
             # timed after the step before logged its perf dict: parts of this step, whose
             # perf/step_time (train_wait + train) holds them, as its window does
             "perf/update_weights_time": _t(WEIGHTS),
             "perf/save_model_time": _t(CHECKPOINT), "perf/sleep_time": _t(OFFLOAD),
             # the reference model's weights backed up from the actor's every
             # ref_update_interval rollouts, after the train timer and before the perf
             # dict (slime/backends/megatron_utils/actor.py l.554-562)
             "perf/ref_model_update_time": _t("update_ref")},
    # train_time holds the log-probs and the actor train; train_wait_time is the gap
    # between two train blocks (the rollout, the weight sync, the save)
    containers=frozenset({"perf/train_time", "perf/train_wait_time"}),
    key_prefixes=("train/", "rollout/", "perf/", "eval/", "multi_turn/", "passrate/"),
)

ROLL = Framework(
    name="roll", title="ROLL",
    source="alibaba/ROLL 8eb27cc2 roll/pipeline/rlvr/rlvr_pipeline.py, "
           "roll/pipeline/agentic/agentic_pipeline.py, rlvr_vlm_pipeline.py (time/* timers), "
           "roll/utils/telemetry.py, roll/distributed/scheduler/decorator.py (spans)",
    step_key="system/step",  # its time/step_total is the step before's in RLVR: not used
    timings={"time/step_generate": _t(GENERATE), "time/step_rollout": _t(GENERATE),
             "time/step_model_update": _t(WEIGHTS),
             "time/ref_log_probs_values": _t(REF_LOGP),
             "time/step_ref_log_probs_values_reward": _t(REF_LOGP),
             "time/old_log_probs": _t(ACTOR_LOGP),
             "time/step_old_log_probs_values": _t(ACTOR_LOGP),
             "time/step_train": _t(ACTOR_UPDATE), "time/val_step": _t(VALIDATION),
             "time/step_val": _t(VALIDATION), "time/step_adv": _t(ADVANTAGES),
             "*/time/compute_advantage": _t(ADVANTAGES),
             "*/time/reward_postprocess": _t(REWARD),
             "*/time/get_token_reward": _t(REWARD),
             "time/step_cal_token_reward": _t(REWARD),
             "time/step_cal_norm_rewards": _t(REWARD),
             "time/step_stop_server": _t(OFFLOAD),
             # the sample-level mask of each domain's batch (rlvr_pipeline.py l.685-689:
             # per domain; rlvr_vlm_pipeline.py l.492-496: the batch's)
             "*/time/get_sample_level_mask": _t(DATA),
             "time/get_sample_level_mask": _t(DATA)},
    spans={"pipeline_step": SpanRule(STEP, "train_step", "global_step"),
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
)

NEMO_RL = Framework(
    name="nemo_rl", title="NeMo-RL",
    source="NVIDIA-NeMo/RL 7ea279ab nemo_rl/algorithms/grpo.py (Timer labels under "
           "prefix timing/train); spans: branch rajsin/lens-with-goodput ce32d420 "
           "nemo_rl/telemetry/instrumentation.py, grpo.py",
    step_time_key="timing/train/total_step_time",
    timings={"timing/train/generation": _t(GENERATE),
             "timing/train/exposed_generation": _t(GENERATE),
             "timing/train/prepare_for_generation/total": _t(WEIGHTS),
             "timing/train/weight_sync": _t(WEIGHTS),
             "timing/train/reward_calculation": _t(REWARD),
             "timing/train/data_processing": _t(DATA),
             "timing/train/logprob_inference_prep": _t(ACTOR_LOGP),
             "timing/train/policy_and_reference_logprobs": _t(ACTOR_LOGP),
             "timing/train/advantage_calculation": _t(ADVANTAGES),
             "timing/train/training_prep": _t(ACTOR_UPDATE),
             "timing/train/policy_training": _t(ACTOR_UPDATE),
             "timing/train/checkpointing": _t(CHECKPOINT),
             "timing/train/offload_before_refit": _t(OFFLOAD),
             "timing/train/idle/*": _t(IDLE)},
    # dynamic_sampling (DAPO's filter, grpo.py l.1752) runs inside reward_calculation's
    # timer (l.3036-3089): a scalar, not a part of its own
    containers=frozenset({"timing/train/dynamic_sampling",
                          "timing/train/prepare_for_generation/transfer_and_update_weights",
                          "timing/train/get_logprobs/*", "timing/train/policy_training/*",
                          "timing/train/valid_tokens_per_sec_per_gpu",
                          "timing/train/init/total"}),
    spans={"rl.grpo.step": SpanRule(STEP, "train_step", "rl.iteration"),
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
           "step": SpanRule(STEP, "train_step", "step", step_offset=1),
           "sample": SpanRule(DRIVER, GENERATE),
           "reward_calculation": SpanRule(DRIVER, REWARD),
           "data_processing": SpanRule(DRIVER, DATA),
           "policy_and_reference_logprobs": SpanRule(DRIVER, ACTOR_LOGP),
           "policy_training": SpanRule(DRIVER, ACTOR_UPDATE),
           "weight_sync": SpanRule(DRIVER, WEIGHTS),
           "checkpointing": SpanRule(DRIVER, CHECKPOINT)},
    scopes=frozenset({"nemo.lens", "nemo.lens.helpers"}),
    bucket_attr="rl.bucket",
    key_prefixes=("train/", "timing/train/", "performance/", "validation/", "efficiency/"),
)

SKYRL = Framework(
    name="skyrl", title="SkyRL",
    source="NovaSky-AI/SkyRL a9564572 skyrl/train/trainer.py, fully_async_trainer.py "
           "(Timer names, logged as timing/<name>); the same in skyrl 0.3.0 on PyPI",
    # every call passes step= (the fully-async trainer's timings dict has no step key)
    step_time_key="timing/step",
    timings={"timing/generate": _t(GENERATE),
             "timing/fwd_logprobs_values_reward": _t(ACTOR_LOGP),
             "timing/compute_advantages_and_returns": _t(ADVANTAGES),
             "timing/apply_reward_kl_penalty": _t(REWARD),
             "timing/convert_to_training_input": _t(DATA),
             "timing/postprocess_generator_output": _t(DATA),
             "timing/policy_train": _t(ACTOR_UPDATE),
             "timing/critic_train": _t(CRITIC_UPDATE),
             "timing/sync_weights": _t(WEIGHTS),
             "timing/save_checkpoints": _t(CHECKPOINT),
             "timing/save_hf_model": _t(CHECKPOINT),
             "timing/update_ref_with_policy": _t("update_ref"),
             "timing/wait_for_generation_buffer": _t(IDLE)},
    # the fully-async trainer (fully_async_trainer.py l.505-600, skyrl 0.3.0) saves its
    # checkpoints after its step timer ends, the synchronous one (trainer.py l.340-491)
    # inside it: told by the fully-async trainer's own timer, run_training
    outside_step={"timing/run_training": frozenset({"timing/save_checkpoints",
                                                    "timing/save_hf_model"})},
    # eval runs outside the step's timer (before training, then after the step)
    containers=frozenset({"timing/train_critic_and_policy", "timing/run_training",
                          "timing/cleanup_old_checkpoints", "timing/eval",
                          "timing/policy_critic_overlap_train"}),
    key_prefixes=("policy/", "critic/", "reward/", "generate/", "loss/", "timing/",
                  "trainer/", "eval/", "vllm/"),
)

TRL = Framework(
    name="trl", title="TRL",
    source="trl 1.16.0 trl/extras/profiling.py (ProfilingContext names, "
           "<the trainer's class>.<name>), trl/trainer/grpo_trainer.py (logs: step_time)",
    # profiling/<name> keys are what RLInsightCallback adds to the step's logs from
    # TRL's own profiling contexts (TRL sends those to wandb, mlflow and trackio only); the
    # trainer's class is GRPOTrainer, or a subclass of it with its own name
    timings={"profiling/*.transformers.generate": _t(GENERATE),
             "profiling/*.vLLM.generate": _t(GENERATE),
             "profiling/*.transformers.generate_batch": _t(GENERATE),
             "profiling/*._calculate_rewards": _t(REWARD),
             "profiling/*.compute_loss": _t(ACTOR_UPDATE),
             "profiling/optimizer_step": _t(ACTOR_UPDATE),
             "profiling/*.sync_weights": _t(WEIGHTS),
             "profiling/*.ref_logps": _t(REF_LOGP)},
    # step_time: training_step's wall time without the optimizer step; _prepare_inputs
    # holds the generation, the rewards and the reference log-probs
    containers=frozenset({"step_time", "profiling/*._prepare_inputs",
                          "profiling/*._get_per_token_logps_and_entropies"}),
    key_prefixes=("rewards/", "completions/", "clip_ratio/", "profiling/"),
)

AREAL = Framework(
    name="areal", title="AReaL",
    source="areal-project/AReaL v2.0.0 fee938ea (moved from inclusionAI/AReaL; its "
           "names the same as at 4aef98d8 = areal 1.0.4 on PyPI, which has no 2.x) "
           "areal/trainer/rl_trainer.py (stats_tracker.record_timing keys, logged as "
           "timeperf/<key>; perf_tracer.trace_scope names), areal/utils/perf_tracer.py",
    timings={"timeperf/rollout": _t(GENERATE), "timeperf/ref_logp": _t(REF_LOGP),
             "timeperf/teacher_logp": _t("teacher_compute_log_prob"),
             "timeperf/recompute_logp": _t(ACTOR_LOGP),
             "timeperf/critic_values": _t(CRITIC_VALUES),
             "timeperf/compute_advantage": _t(ADVANTAGES),
             "timeperf/train_step": _t(ACTOR_UPDATE),
             "timeperf/critic_train_step": _t(CRITIC_UPDATE),
             "timeperf/update_weights": _t(WEIGHTS), "timeperf/save": _t(CHECKPOINT),
             "timeperf/checkpoint_for_recover": _t(CHECKPOINT),
             "timeperf/eval": _t(VALIDATION), "timeperf/clear_batches": _t(DATA),
             "timeperf/*_onload": _t(OFFLOAD), "timeperf/*_offload": _t(OFFLOAD),
             "timeperf/rollout_pause*": _t(OFFLOAD),
             "timeperf/rollout_continue_generation": _t(OFFLOAD),
             "timeperf/rollout_resume": _t(OFFLOAD)},
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
           "train.rollout_pause*": SpanRule(DRIVER, OFFLOAD),
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
)
