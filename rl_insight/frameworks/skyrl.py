"""SkyRL's table: its timing/* keys, in its synchronous and fully-async trainers."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    ADVANTAGES,
    CHECKPOINT,
    CRITIC_UPDATE,
    DATA,
    REWARD,
)
from rl_insight.frameworks.table import (
    GENERATE,
    IDLE,
    WAITING_FOR_SAMPLES,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

TABLE = Framework(
    name="skyrl", title="SkyRL",
    source="NovaSky-AI/SkyRL a9564572 skyrl/train/trainer.py, fully_async_trainer.py "
           "(Timer names, logged as timing/<name>); the same in skyrl 0.3.0 on PyPI",
    # every call passes step= (the fully-async trainer's timings dict has no step key)
    step_time_key="timing/step",
    timings={"timing/generate": t(GENERATE),
             "timing/fwd_logprobs_values_reward": t(ACTOR_LOGP),
             "timing/compute_advantages_and_returns": t(ADVANTAGES),
             "timing/apply_reward_kl_penalty": t(REWARD),
             "timing/convert_to_training_input": t(DATA),
             "timing/postprocess_generator_output": t(DATA),
             "timing/policy_train": t(ACTOR_UPDATE),
             "timing/critic_train": t(CRITIC_UPDATE),
             "timing/sync_weights": t(WEIGHTS),
             "timing/save_checkpoints": t(CHECKPOINT),
             "timing/save_hf_model": t(CHECKPOINT),
             "timing/update_ref_with_policy": t("update_ref"),
             # the fully-async trainer waits for its generation buffer's next batch
             "timing/wait_for_generation_buffer": t(IDLE, WAITING_FOR_SAMPLES)},
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
    # its dashboard's first panels, its own keys:
    # skyrl/train/trainer.py, workers/worker.py
    headlines=(
        Headline("Reward", "short", ("reward/avg_raw_reward",)),
        Headline("Policy loss", "short", ("policy/policy_loss", "policy/final_loss")),
        Headline("Entropy", "short", ("policy/policy_entropy",)),
        Headline("Gradient norm and learning rate", "short",
                 ("policy/grad_norm", "policy/policy_lr")),
        Headline("Generated tokens", "short", ("generate/avg_num_tokens",)),
        Headline("Throughput", "short", ("trainer/tokens_per_second_per_gpu",)),
    ),
)
