"""NeMo-RL (NVIDIA-NeMo/RL): a backend in its logger's list.

NeMo-RL's ``Logger`` builds its backends from fixed ``*_enabled`` switches and calls each
one's ``log_metrics(metrics, step, prefix, step_metric, step_finished)`` positionally
(``nemo_rl/utils/logger.py``, 7ea279ab). One line after ``setup()`` in the entry script
(``examples/run_grpo.py``) adds this one:

    rl_insight.integrations.nemo_rl.attach(logger, master_config)

Each call's keys go out with their prefix (``timing/train/policy_training``); the step
is the one of the call that finishes it (``step_finished=True``: the ``timing/train``
dict, its last), so a step's mark falls at its end, and its ``timing/train/*`` keys are
its parts. The GPU monitor's calls (prefix ``ray``, its step wall-clock seconds) are
scalars only. ``master_config`` (what NeMo-RL logs as its hyperparameters) is the run's
configuration, handed over. With NeMo-RL's OpenTelemetry tracing (``telemetry.enabled``; OTLP over
HTTP through the ``OTEL_*`` variables ``rl-insight ray-env --otel`` writes), its
``rl.grpo.*`` spans reach the server and its ``rl.bucket`` the goodput.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rl_insight import frameworks
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker

FRAMEWORK = frameworks.named("nemo_rl")
NO_STEP_PREFIXES = ("ray",)  # the GPU monitor: its "step" is seconds since start


def run_names(master_config: Mapping[str, Any] | None) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set, else the wandb
    project and name NeMo-RL's config holds (its logger section), else defaults."""
    wandb = ((master_config or {}).get("logger") or {}).get("wandb") or {}
    return kit.run_names((wandb.get("project"),), (wandb.get("name"),), "nemo-rl", "grpo")


class RLInsightLogger:
    """A NeMo-RL ``LoggerInterface``: ``log_metrics``, ``log_hyperparams``,
    ``log_histogram``, ``log_plot``, ``finish``."""

    def __init__(self, project: str | None = None, experiment_name: str | None = None,
                 master_config: Mapping[str, Any] | None = None) -> None:
        if project is None or experiment_name is None:
            project, experiment_name = run_names(master_config)
        self.tracker = FrameworkTracker(FRAMEWORK, project, experiment_name,
                                        run_config=master_config)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str | None = "",
                    step_metric: str | None = None, step_finished: bool = False) -> None:
        data = {f"{prefix}/{k}" if prefix else k: v for k, v in (metrics or {}).items()
                if k != step_metric}
        keep_step = step_finished and (prefix or "") not in NO_STEP_PREFIXES
        self.tracker.log(data, step if keep_step else None)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Nothing: NeMo-RL logs its hyperparameters before ``attach`` (setup()), and the
        run's configuration was handed over from ``master_config`` there; a later call's
        part would replace the whole."""

    def log_histogram(self, histogram: list, step: int, name: str) -> None:
        """Nothing: the histograms' summaries come as scalars."""

    def log_plot(self, figure: Any, step: int, name: str) -> None:
        """Nothing: a figure is no time series."""

    def finish(self) -> None:
        self.tracker.finish()


def attach(logger: Any, master_config: Mapping[str, Any] | None = None) -> RLInsightLogger:
    """Add the backend to a NeMo-RL ``Logger`` (its ``loggers`` list) and return it."""
    backend = RLInsightLogger(master_config=master_config)
    logger.loggers.append(backend)
    return backend
