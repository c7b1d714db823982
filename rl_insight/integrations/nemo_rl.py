"""NeMo-RL (NVIDIA-NeMo/RL): a backend in its logger's list.

NeMo-RL's ``Logger`` builds its backends from fixed ``*_enabled`` switches and calls each
one's ``log_metrics(metrics, step, prefix, step_metric, step_finished)`` positionally
(``nemo_rl/utils/logger.py``, 7ea279ab). Two ways in, one per entry script:

- ``examples/run_grpo.py`` builds its ``Logger`` in the driver (``setup()``); one line
  after ``setup()`` adds this backend::

      rl_insight.integrations.nemo_rl.attach(logger, master_config)

- ``examples/run_grpo_single_controller.py`` builds it inside the
  ``SingleControllerActor``, a Ray actor (``single_controller.py`` l.162-168: Logger
  backends cannot be pickled into it), out of reach of the driver. The command line is
  the one setting::

      python -m rl_insight.integrations.nemo_rl uv run examples/run_grpo_single_controller.py ...

  which runs it with the site hook on ``PYTHONPATH``; NeMo-RL's ``init_ray`` hands the
  driver's whole environment to every Ray worker, so the hook patches
  ``nemo_rl.utils.logger`` in the process that imports it (the table's ``on_import``),
  and every ``Logger`` built there gets this backend, named after its wandb project and
  run; the hyperparameters the actor logs next (its ``master_config``) are the run's
  configuration. The Ray worker setup hook patches the same (``RAY_RUNTIME_ENV_HOOK``
  where the driver runs, but Ray's uv hook takes its place under ``uv run``; ``ray job
  submit --runtime-env`` only with ``RAY_OVERRIDE_JOB_RUNTIME_ENV=1``: ``init_ray``'s
  ``env_vars`` name the same variables as the job's, which Ray refuses to merge).

Each call's keys go out with their prefix (``timing/train/policy_training``). A step
ends with its ``timing/train`` dict, the last each loop logs: with ``step_finished=True``
in ``grpo_train``, ``async_grpo_train`` and ``grpo_train_sync``, without it in the single
controller (l.1201-1206); so a step's mark falls at its end and its ``timing/train/*``
keys are its parts. The GPU monitor's calls (prefix ``ray``, its step wall-clock
seconds) and the single controller's watchdog (``rollout/*`` every interval at the
current step) are scalars only. With NeMo-RL's OpenTelemetry tracing
(``telemetry.enabled``; OTLP over HTTP through the ``OTEL_*`` variables ``rl-insight
ray-env --otel`` writes), its ``rl.grpo.*`` spans reach the server and its ``rl.bucket``
the goodput.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rl_insight import frameworks
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker

log = logging.getLogger(__name__)

FRAMEWORK = frameworks.named("nemo_rl")
NO_STEP_PREFIXES = ("ray",)  # the GPU monitor: its "step" is seconds since start
STEP_ENDS = "timing/train"  # the prefix of the dict that ends a step, in every loop
PATCHED = "_rl_insight"


def run_names(master_config: Mapping[str, Any] | None) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set, else the wandb
    project and name NeMo-RL's config holds (its logger section; a mapping, or the single
    controller's ``MasterConfig``), else defaults."""
    section = master_config.get("logger") if isinstance(master_config, Mapping) else \
        getattr(master_config, "logger", None)
    return logger_run_names(section)


def logger_run_names(logger_config: Any) -> tuple[str, str]:
    """The same from the logger section alone (what ``Logger(cfg)`` is given)."""
    wandb = (logger_config.get("wandb") if isinstance(logger_config, Mapping) else None) or {}
    return kit.run_names((wandb.get("project"),), (wandb.get("name"),), "nemo-rl", "grpo")


class RLInsightLogger:
    """A NeMo-RL ``LoggerInterface``: ``log_metrics``, ``log_hyperparams``,
    ``log_histogram``, ``log_plot``, ``finish``. Made without ``master_config`` (a
    ``Logger`` patched where it was built), the first hyperparameters it is given are the
    run's configuration."""

    def __init__(self, project: str | None = None, experiment_name: str | None = None,
                 master_config: Mapping[str, Any] | None = None) -> None:
        if project is None or experiment_name is None:
            project, experiment_name = run_names(master_config)
        self.tracker = FrameworkTracker(FRAMEWORK, project, experiment_name,
                                        run_config=master_config)
        self.config_handed = master_config is not None

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str | None = "",
                    step_metric: str | None = None, step_finished: bool = False) -> None:
        data = {f"{prefix}/{k}" if prefix else k: v for k, v in (metrics or {}).items()
                if k != step_metric}
        ends = step_finished or prefix == STEP_ENDS
        keep_step = ends and (prefix or "") not in NO_STEP_PREFIXES
        self.tracker.log(data, step if keep_step else None)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The run's configuration, once: where ``attach`` handed ``master_config`` over
        (``setup()`` logs the hyperparameters before it), nothing; a later call's part
        would replace the whole."""
        if self.config_handed or params is None:
            return
        self.config_handed = True
        from rl_insight.client import api

        api.log_config(params, source=FRAMEWORK.name)

    def log_histogram(self, histogram: list, step: int, name: str) -> None:
        """Nothing: the histograms' summaries come as scalars."""

    def log_plot(self, figure: Any, step: int, name: str) -> None:
        """Nothing: a figure is no time series."""

    def finish(self) -> None:
        self.tracker.finish()


def _ours(logger: Any) -> RLInsightLogger | None:
    return next((b for b in getattr(logger, "loggers", None) or ()
                 if isinstance(b, RLInsightLogger)), None)


def attach(logger: Any, master_config: Mapping[str, Any] | None = None) -> RLInsightLogger:
    """Add the backend to a NeMo-RL ``Logger`` (its ``loggers`` list) and return it; a
    logger that has it already (built where the hook patched ``Logger``) keeps its own,
    given ``master_config`` as the run's configuration."""
    backend = _ours(logger)
    if backend is not None:
        if master_config is not None and not backend.config_handed:
            backend.log_hyperparams(master_config)
        return backend
    backend = RLInsightLogger(master_config=master_config)
    logger.loggers.append(backend)
    return backend


def patch_logger(module: Any) -> bool:
    """The table's ``on_import`` for ``nemo_rl.utils.logger``: every ``Logger`` built
    afterwards in this process, with monitoring on, gets the backend (once), named after
    its logger section's wandb names. Returns whether the class was found."""
    cls = getattr(module, "Logger", None)
    init = getattr(cls, "__init__", None)
    if cls is None or not callable(init):
        log.warning("rl-insight: %s has no Logger; NeMo-RL's single controller is not "
                    "monitored (read against NVIDIA-NeMo/RL 7ea279ab)",
                    getattr(module, "__name__", module))
        return False
    if getattr(cls, PATCHED, False):
        return True

    @functools.wraps(init)
    def __init__(self, cfg: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        init(self, cfg, *args, **kwargs)
        try:
            from rl_insight.client import api

            if api.enabled() and _ours(self) is None:
                self.loggers.append(RLInsightLogger(*logger_run_names(cfg)))
        except Exception:
            log.warning("rl-insight: NeMo-RL's Logger was built without the rl_insight "
                        "backend; training goes on unmonitored", exc_info=True)

    cls.__init__ = __init__
    setattr(cls, PATCHED, True)
    return True


USAGE = ("usage: python -m rl_insight.integrations.nemo_rl COMMAND [ARGS...]\n"
         "  e.g. python -m rl_insight.integrations.nemo_rl uv run "
         "examples/run_grpo_single_controller.py --config CONFIG\n"
         "runs NeMo-RL's COMMAND with the site hook on PYTHONPATH, which NeMo-RL's init_ray "
         "hands every Ray worker: the Logger its single controller builds gets the "
         "rl_insight backend")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rl_insight.integrations.nemo_rl COMMAND``: NeMo-RL's command in this
    process's place, the site hook on its ``PYTHONPATH``. NeMo-RL's ``init_ray`` gives
    every Ray worker the driver's whole environment (``virtual_cluster.py`` l.306-311 at
    7ea279ab), so the single controller's actor starts with the hook and its ``Logger``
    is patched (the table's ``on_import``) whether NeMo-RL runs under ``uv run`` (where
    Ray's own uv hook takes the place of ``RAY_RUNTIME_ENV_HOOK``) or not."""
    return kit.exec_with_site_hook(
        sys.argv[1:] if argv is None else argv, USAGE, "NeMo-RL",
        "run this where NeMo-RL's command runs (`uv run python -m "
        "rl_insight.integrations.nemo_rl python examples/run_grpo_single_controller.py ...`)")


if __name__ == "__main__":
    sys.exit(main())
