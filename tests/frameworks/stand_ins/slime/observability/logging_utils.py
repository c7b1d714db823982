"""FAKE slime/observability/logging_utils.py (624b824a): ``log(args, metrics, step_key)``
is what every slime process logs through (rollout_metrics.py, train_metric_utils.py,
megatron_utils/model.py call it as the module's attribute). With wandb and TensorBoard
off (``args.use_wandb``/``use_tensorboard`` false), slime's own does nothing; this one
keeps what it was given, for the replay's ground truth."""

LOGGED: list[tuple[str, dict]] = []


def log(args, metrics, step_key):
    LOGGED.append((step_key, dict(metrics)))
