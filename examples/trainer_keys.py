"""The per-step keys VeRL-Omni's trainers log, with plausible values, for the simulation
(examples/simulate_rl.py --trainer diffusion | diffusion-v1). Where each key comes from in
VeRL-Omni's source is listed in tests/verl_omni_keys.py, which holds the simulation to
these sets. (``--trainer omni`` runs verl's own LLM v1 trainer: the simulation's verl keys.)
"""

from __future__ import annotations

import math
import random

REWARDS = ("clap", "imagebind")
DATA_SOURCE = "ltx2_t2av"
# diffusion_metric_utils.compute_timing_metrics_diffusion: these sections per image
PER_IMAGE = ("gen", "ref", "old_log_prob", "adv", "update_actor")


def diffusion(trainer: str, step: int, timing: dict[str, float], images: int, gpus: int,
              rng: random.Random) -> dict[str, float]:
    """One step of ``PolicyGradientRayTrainer`` (``diffusion``) or
    ``PolicyGradientDiffusionTrainerV1`` (``diffusion-v1``): FlowGRPO with a KL loss, the
    multi-reward manager (clap, imagebind), rollout correction."""
    u = rng.uniform
    reward = 0.3 + 0.4 * (1 - math.exp(-step / 8)) + u(-0.02, 0.02)
    out: dict[str, float] = {"training/global_step": step, "training/epoch": step // 10}
    for key, mean, spread in (("critic/rewards", reward, 0.2), ("critic/advantages", 0.0, 1.5),
                              ("critic/returns", 0.0, 1.5)):
        out[f"{key}/mean"], out[f"{key}/max"], out[f"{key}/min"] = \
            mean, mean + spread, mean - spread
    out.update({"critic/rewards/zero_std_ratio": u(0, 0.15),
                "critic/rewards/std_mean": 0.08 + u(0, 0.02),
                "critic/rewards/group_size": 8.0})
    for r in REWARDS:
        out[f"critic/reward/{r}/mean"] = reward + u(-0.1, 0.1)
    out["critic/reward/clap/source_sample_rate/mean"] = 48000.0
    out["critic/reward/combined/mean"] = reward
    phases = ["step", "gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights"]
    phases += ["reward", "rollout_corr"] if trainer == "diffusion" else ["feed"]
    phases += ["save_checkpoint"] if "save_checkpoint" in timing else []
    for name in phases:
        out[f"timing_s/{name}"] = timing.get(name, u(0.01, 0.05))
    for name in PER_IMAGE:
        out[f"timing_per_image_ms/{name}"] = out[f"timing_s/{name}"] * 1000 / images
    out.update({"perf/total_num_images": images,
                "perf/time_per_step": out["timing_s/step"],
                "perf/throughput": images / max(out["timing_s/step"], 1e-6) / gpus,
                "perf/mfu/actor": 0.0,  # DiffusionFlopsCounter: 0 beyond Qwen-Image
                "actor/loss": -0.01 + u(-0.005, 0.005), "actor/grad_norm": 0.5 + u(0, 0.3),
                "actor/lr": 3e-4, "actor/ppo_kl": u(0, 1e-3),
                "actor/pg_clipfrac": u(0, 0.02), "actor/pg_clipfrac_higher": u(0, 0.01),
                "actor/pg_clipfrac_lower": u(0, 0.01), "actor/ratio_mean": 1 + u(-0.01, 0.01),
                "actor/ratio_std": u(0, 0.05), "actor/kl_loss": u(0, 0.01),
                "actor/kl_coef": 0.04})
    for key in ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl",
                "rollout_log_ppl", "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max",
                "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq"):
        out[f"rollout_corr/{key}"] = u(0, 0.05) + (1.0 if "ppl" in key else 0.0)
    # verl_omni/trainer/diffusion/rollout_correction.py, both trainers
    out["rollout_corr/logprob_abs_diff_mean"] = u(0, 0.02)
    out["rollout_corr/logprob_abs_diff_max"] = u(0.02, 0.1)
    if trainer == "diffusion":
        out["perf/mfu/actor_infer"] = 0.0
        for k in ("generate_sequences", "compute_score"):
            seconds = timing.get("gen", 1.0) * (0.9 if k == "generate_sequences" else 0.05)
            out.update({f"timing_s/agent_loop/{k}/min": seconds * 0.5,
                        f"timing_s/agent_loop/{k}/mean": seconds * 0.8,
                        f"timing_s/agent_loop/{k}/max": seconds})
    else:  # V1: trajectories tagged with the trainer step they were generated at
        for k, base in (("trajectory_spans", 1.0), ("trajectory_staleness", 0.0),
                        ("trajectory_staleness_worst", 1.0)):
            out[f"training/off_policy/{k}/mean"] = base + u(0, 0.5)
            out[f"training/off_policy/{k}/max"] = base + 1
            out[f"training/off_policy/{k}/min"] = base
        failed = rng.randint(0, 2)
        out.update({"training/off_policy/dropped_samples": float(failed * 8),
                    "training/off_policy/dropped_samples_staleness/mean": 9.0,
                    "training/off_policy/evicted_samples": float(failed * 8),
                    "training/filter_groups/evicted_samples": float(rng.randint(0, 16)),
                    "training/filter_groups/discarded_surplus_samples": float(
                        rng.randint(0, 8)),
                    "training/rollout_failure/evicted_groups": float(failed),
                    "training/rollout_failure/evicted_trajectories": float(failed * 8),
                    "training/rollout_failure/refilled_prompts": float(failed),
                    "training/rollout_failure/refill_rounds": float(min(failed, 1)),
                    "training/rollout_failure/evicted_samples": float(failed * 8)})
    return out


def diffusion_validation(step: int, seconds: float, rng: random.Random) -> dict[str, float]:
    """``_validate`` / ``_val_metrics_update``: the multi-reward manager's validation keys
    (core var ``reward``: no ``acc``), the agent loop's turns, the ``testing`` section."""
    reward = 0.35 + 0.4 * (1 - math.exp(-step / 8))
    out = {f"val-core/{DATA_SOURCE}/reward/mean@1": reward,
           "val-aux/num_turns/min": 1.0, "val-aux/num_turns/max": 1.0,
           "val-aux/num_turns/mean": 1.0, "timing_s/testing": seconds}
    for r in REWARDS:
        out[f"val-aux/{DATA_SOURCE}/reward/{r}/mean@1"] = reward + rng.uniform(-0.1, 0.1)
    return out
