"""The keys VeRL-Omni's trainers log per step, by trainer mode: what the simulation must
log (tests/test_dashboards.py holds it to these) and what the dashboards show.

VeRL-Omni is not installable here; these are read from its source, verl-project/verl-omni
main at a1139baf (2026-08-22), and the verl it pins (8a694930):
- diffusion, ``python -m verl_omni.trainer.main_diffusion``:
  ``PolicyGradientRayTrainer.fit`` (verl_omni/trainer/diffusion/ray_diffusion_trainer.py)
  with the helpers of verl_omni/trainer/diffusion/diffusion_metric_utils.py
  (compute_data_metrics_diffusion, compute_timing_metrics_diffusion: ``timing_per_image_ms``
  in ms per image, compute_throughput_metrics_diffusion: ``perf/throughput`` in images/s
  per GPU, compute_reward_extra_metrics_diffusion: ``critic/<extra>/mean``), the FlowGRPO
  loss of diffusion_algos.py, the MultiVisualRewardManager's ``reward/<key>`` extras
  (reward_loop/reward_manager/multi.py), verl's rollout_corr_helper.py;
- diffusion V1 with TransferQueue, ``python -m verl_omni.trainer.main_diffusion_v1
  trainer.use_v1=true``: ``PolicyGradientDiffusionTrainerV1`` (diffusion/v1/trainer_base.py
  ``_compute_metrics``; off-policy tags in trainer steps, ``training/rollout_failure/*``
  with drop_incomplete_groups) and verl's v1 replay buffer (verl main
  verl/trainer/ppo/v1/replay_buffer.py: ``training/filter_groups/*``,
  ``training/off_policy/evicted_samples*``; VeRL-Omni PR #404's metrics.py aggregates them);
- omni, ``python -m verl_omni.trainer.main_omni``: online RL runs verl's own LLM v1
  trainer (``OmniPPOTrainerSync``; verl/trainer/ppo/v1/trainer_base.py
  ``_compute_metrics``: token-based keys, ``perf/throughput`` in tokens/s per GPU); the
  offline omni DPO trainer (trainer/omni/ray_omni_trainer.py) logs the DPO keys and
  ``val/*`` per modality (GroupedMetricMean, utils/metrics_utils.py).
"""

from __future__ import annotations

REWARDS = ("clap", "imagebind")  # the multi-reward example's functions (minimax_h3)
DATA_SOURCE = "ltx2_t2av"  # a VeRL-Omni data set's data_source (text to audio-video)

_ROLLOUT_CORR = tuple(f"rollout_corr/{k}" for k in (
    "training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl",
    "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio",
    "chi2_token", "chi2_seq"))
_DIFFUSION_DATA = (
    "critic/rewards/mean", "critic/rewards/max", "critic/rewards/min",
    "critic/rewards/zero_std_ratio", "critic/rewards/std_mean", "critic/rewards/group_size",
    "critic/advantages/mean", "critic/advantages/max", "critic/advantages/min",
    "critic/returns/mean", "critic/returns/max", "critic/returns/min")
_IMAGES = ("perf/total_num_images", "perf/time_per_step", "perf/throughput",
           "perf/mfu/actor")
_PER_IMAGE = tuple(f"timing_per_image_ms/{t}" for t in
                   ("gen", "old_log_prob", "ref", "adv", "update_actor"))
_FLOW_GRPO = ("actor/loss", "actor/grad_norm", "actor/lr", "actor/ppo_kl",
              "actor/pg_clipfrac", "actor/pg_clipfrac_higher", "actor/pg_clipfrac_lower",
              "actor/ratio_mean", "actor/ratio_std", "actor/kl_loss", "actor/kl_coef")
_REWARD_EXTRAS = (*(f"critic/reward/{r}/mean" for r in REWARDS),
                  "critic/reward/clap/source_sample_rate/mean", "critic/reward/combined/mean")
_VALIDATION = (f"val-core/{DATA_SOURCE}/reward/mean@1",
               *(f"val-aux/{DATA_SOURCE}/reward/{r}/mean@1" for r in REWARDS),
               "val-aux/num_turns/min", "val-aux/num_turns/max", "val-aux/num_turns/mean",
               "timing_s/testing")
_OFF_POLICY = tuple(f"training/off_policy/{k}/{s}" for k in
                    ("trajectory_spans", "trajectory_staleness", "trajectory_staleness_worst")
                    for s in ("mean", "max", "min"))

DIFFUSION = (
    "training/global_step", "training/epoch", *_DIFFUSION_DATA, *_REWARD_EXTRAS,
    *(f"timing_s/{t}" for t in ("step", "gen", "reward", "old_log_prob", "rollout_corr",
                                "ref", "adv", "update_actor", "update_weights")),
    *_PER_IMAGE, *_IMAGES, "perf/mfu/actor_infer", *_FLOW_GRPO, *_ROLLOUT_CORR,
    "rollout_corr/logprob_abs_diff_mean", "rollout_corr/logprob_abs_diff_max",
    *(f"timing_s/agent_loop/{k}/{s}" for k in ("generate_sequences", "compute_score")
      for s in ("min", "max", "mean")))
DIFFUSION_V1 = (
    "training/global_step", "training/epoch", *_DIFFUSION_DATA, *_REWARD_EXTRAS,
    *(f"timing_s/{t}" for t in ("step", "feed", "gen", "old_log_prob", "ref", "adv",
                                "update_actor", "update_weights")),
    *_PER_IMAGE, *_IMAGES, *_FLOW_GRPO, *_ROLLOUT_CORR, *_OFF_POLICY,
    "rollout_corr/logprob_abs_diff_mean", "rollout_corr/logprob_abs_diff_max",
    "training/off_policy/dropped_samples", "training/off_policy/dropped_samples_staleness/mean",
    "training/off_policy/evicted_samples", "training/filter_groups/evicted_samples",
    "training/filter_groups/discarded_surplus_samples",
    *(f"training/rollout_failure/{k}" for k in ("evicted_groups", "evicted_trajectories",
                                                "refilled_prompts", "refill_rounds",
                                                "evicted_samples")))
OMNI = (  # online omni RL: verl's LLM v1 trainer
    "training/global_step", "training/epoch",
    *(f"critic/{k}/{s}" for k in ("score", "rewards", "advantages", "returns")
      for s in ("mean", "max", "min")),
    *(f"{k}/{s}" for k in ("response_length", "response_length_non_aborted", "prompt_length")
      for s in ("mean", "max", "min", "clip_ratio")),
    "response/aborted_ratio",
    *(f"global_seqlen/{s}" for s in ("min", "max", "minmax_diff", "balanced_min",
                                     "balanced_max", "mean")),
    "actor/entropy", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl",
    "actor/pg_clipfrac_lower", "actor/loss", "actor/grad_norm", "actor/lr", "perf/mfu/actor",
    *(f"training/rollout_probs_diff_{s}" for s in ("valid", "max", "mean", "std")),
    "training/rollout_actor_probs_pearson_corr",
    *(f"timing_s/{t}" for t in ("step", "gen", "old_log_prob", "ref", "adv", "update_actor",
                                "update_weights")),
    *(f"timing_per_token_ms/{t}" for t in ("gen", "ref", "adv", "update_actor")),
    "perf/total_num_tokens", "perf/time_per_step", "perf/throughput",
    "training/num_turns/mean", "training/num_turns/max", "training/num_turns/min",
    *_OFF_POLICY)
# the offline omni DPO trainer (and diffusion DPO / DiffusionNFT): not simulated
OMNI_DPO = ("actor/dpo_loss", "actor/chosen_rewards", "actor/rejected_rewards",
            "actor/reward_accuracy", "actor/reward_margin", "val/num_samples", "val/dpo_loss",
            "val/reward_accuracy", "val/reward_margin", "val/chosen_rewards",
            "val/rejected_rewards", "val/audio/dpo_loss", "val/image/reward_accuracy",
            "old_policy/update_applied", "old_policy/copy_update", "old_policy/ema_update",
            "old_policy/decay", "actor/policy_loss", "actor/positive_loss",
            "actor/negative_loss", "actor/ref_kl_loss", "actor/total_loss",
            "actor/implicit_acc")
MODES = {"diffusion": DIFFUSION, "diffusion-v1": DIFFUSION_V1, "omni": OMNI}
VALIDATION = _VALIDATION  # every mode, on validation steps (test_freq)
