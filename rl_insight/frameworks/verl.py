"""verl's table: the timing keys verl 0.9.1's trainer logs (its lanes tell the rest)."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    ADVANTAGES,
    CHECKPOINT,
    CRITIC_UPDATE,
    CRITIC_VALUES,
    REF_LOGP,
    REWARD,
    VALIDATION,
)
from rl_insight.frameworks.table import (
    GENERATE,
    WEIGHTS,
    Framework,
    t,
)

TABLE = Framework(
    name="verl", title="verl",
    source="verl 0.9.1 verl/trainer/ppo/ray_trainer.py (marked_timer names, logged as "
           "timing_s/<name> by compute_timing_metrics)",
    step_key="training/global_step", step_time_key="timing_s/step",
    timings={"timing_s/gen": t(GENERATE), "timing_s/reward": t(REWARD),
             "timing_s/old_log_prob": t(ACTOR_LOGP), "timing_s/ref": t(REF_LOGP),
             "timing_s/values": t(CRITIC_VALUES), "timing_s/adv": t(ADVANTAGES),
             "timing_s/update_critic": t(CRITIC_UPDATE),
             "timing_s/update_actor": t(ACTOR_UPDATE),
             "timing_s/update_weights": t(WEIGHTS), "timing_s/testing": t(VALIDATION),
             "timing_s/save_checkpoint": t(CHECKPOINT)},
    key_prefixes=("actor/", "critic/", "timing_s/", "perf/", "response_length/"),
    # verl's own logger calls this package; patched in the process that imports it (the
    # TaskRunner), it hands the run's whole config over too
    on_import={"verl.utils.tracking": "rl_insight.integrations.verl:patch_tracking"},
)
