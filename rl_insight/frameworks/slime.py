"""slime's table: its perf/*_time keys, its Timer's states, its dashboard's keys."""

from __future__ import annotations

from rl_insight.frameworks.phases import (
    ACTOR_LOGP,
    ACTOR_UPDATE,
    CHECKPOINT,
    DATA,
    OFFLOAD,
    REF_LOGP,
)
from rl_insight.frameworks.table import (
    GENERATE,
    WEIGHTS,
    Framework,
    Headline,
    t,
)

TABLE = Framework(
    name="slime", title="slime",
    source="THUDM/slime 624b824a slime/backends/megatron_utils/actor.py (Timer names, "
           "logged as perf/<name>_time by slime/observability/train_metric_utils.py "
           "log_perf_data), slime/observability/rollout_metrics.py (perf/rollout_time)",
    step_key="rollout/step", step_time_key="perf/step_time",
    # a rollout's dicts: the rollout manager's at its generation's end, then the training
    # rank's before its actor train and its perf dict at its end, which ends the step
    step_ends_with="perf/step_time",
    timings={"perf/rollout_time": t(GENERATE),
             "perf/actor_train_time": t(ACTOR_UPDATE),
             "perf/log_probs_time": t(ACTOR_LOGP),
             "perf/ref_log_probs_time": t(REF_LOGP),
             "perf/teacher_log_probs_time": t("teacher_compute_log_prob"),
             "perf/data_preprocess_time": t(DATA),
             "perf/wake_up_time": t(OFFLOAD),
             # timed after the step before logged its perf dict: parts of this step, whose
             # perf/step_time (train_wait + train) holds them, as its window does
             "perf/update_weights_time": t(WEIGHTS),
             "perf/save_model_time": t(CHECKPOINT), "perf/sleep_time": t(OFFLOAD),
             # the reference model's weights backed up from the actor's every
             # ref_update_interval rollouts, after the train timer and before the perf
             # dict (slime/backends/megatron_utils/actor.py l.554-562)
             "perf/ref_model_update_time": t("update_ref")},
    # timers inside others (slime/backends/megatron_utils/actor.py at 624b824a; its Timer
    # adds up a name's timings until log_perf_data resets it): save_model (@timer l.570)
    # wakes the offloaded model and puts it back to sleep inside it (l.577, l.593, with
    # --offload-train, the only setting that times wake_up and sleep), as train() does
    # outside any part (l.379, l.392): all of them are taken off, so the save's own share
    # is a lower bound by one wake-up and sleep. update_weights (l.595) holds them only
    # with a critic on engines of its own (l.614-655): not declared, or a colocated run's
    # weight sync would lose train()'s wake-up and sleep
    encloses={"perf/save_model_time": ("perf/wake_up_time", "perf/sleep_time")},
    # train_time holds the log-probs and the actor train; train_wait_time is the gap
    # between two train blocks (the rollout, the weight sync, the save)
    containers=frozenset({"perf/train_time", "perf/train_wait_time"}),
    key_prefixes=("train/", "rollout/", "perf/", "eval/", "multi_turn/", "passrate/"),
    # its Timer's names (slime/backends/megatron_utils/actor.py) -> a rank lane's state,
    # the names upstream's slime dashboard reads (slime_training_with_sglang.json). Its
    # `train` timer holds the others (and train_wait the time between): no state of its
    # own, or a step's parts would count its phases twice
    timers={"actor_train": ACTOR_UPDATE, "log_probs": ACTOR_LOGP, "ref_log_probs": REF_LOGP,
            "teacher_log_probs": "teacher_compute_log_prob", "update_weights": WEIGHTS,
            "save_model": CHECKPOINT, "data_preprocess": DATA, "sleep": OFFLOAD,
            "wake_up": OFFLOAD},
    # its dashboard's first panels, its own keys:
    # slime/backends/megatron_utils/loss.py, model.py; observability/*.py
    headlines=(
        Headline("Reward", "short", ("rollout/rewards", "rollout/raw_reward")),
        Headline("Policy loss", "short", ("train/loss", "train/pg_loss")),
        Headline("KL and clip fraction", "short", ("train/ppo_kl", "train/pg_clipfrac")),
        Headline("Entropy", "short", ("train/entropy_loss",)),
        Headline("Gradient norm and learning rate", "short",
                 ("train/grad_norm", "train/lr-pg_0")),
        Headline("Response length", "short", ("rollout/response_len/mean",)),
        Headline("Truncated responses", "percentunit", ("rollout/truncated_ratio",)),
        Headline("Rollout throughput", "short", ("perf/tokens_per_gpu_per_sec",)),
    ),
    engines="sglang",  # the adapter registers the SGLang engines behind its router
)
