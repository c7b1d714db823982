"""TRL's table: its profiling contexts' times, as its callback hands them over."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_UPDATE,
    REF_LOGP,
    REWARD,
)
from rl_insight.frameworks.table import (
    GENERATE,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

TABLE = Framework(
    name="trl", title="TRL",
    source="trl 1.16.0 trl/extras/profiling.py (ProfilingContext names, "
           "<the trainer's class>.<name>), trl/trainer/grpo_trainer.py (logs: step_time)",
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
             "profiling/*.ref_logps": t(REF_LOGP)},
    # step_time: training_step's wall time without the optimizer step; _prepare_inputs
    # holds the generation, the rewards and the reference log-probs
    containers=frozenset({"step_time", "profiling/*._prepare_inputs",
                          "profiling/*._get_per_token_logps_and_entropies"}),
    key_prefixes=("rewards/", "completions/", "clip_ratio/", "profiling/"),
    # its dashboard's first panels, its own keys:
    # trl/trainer/grpo_trainer.py GRPOTrainer.log; transformers' Trainer
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
