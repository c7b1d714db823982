"""SkyRL (NovaSky-AI/SkyRL; ``skyrl`` 0.3.0 on PyPI, ``skyrl_train`` before it):
``trainer.logger=rl_insight``.

SkyRL's ``Tracking`` takes a backend name and refuses one it does not list
(``skyrl/train/utils/tracking.py``, a9564572); its experiment builds the tracker in
``BasePPOExp.get_tracker()`` inside a Ray worker. :class:`RLInsightTracking` is that
``Tracking`` with ``rl_insight`` listed: an experiment whose ``get_tracker`` returns it
(``RLInsightExp``, or one line in your own ``BasePPOExp`` subclass) logs every step's
payload here, the step from ``trainer/global_step``, the anatomy from ``timing/*``.

SkyRL forwards only the variables it names to its workers: pass ``RL_INSIGHT_*`` in
your runtime env (``rl-insight ray-env``) or export them before ``ray start``.
"""

from __future__ import annotations

from typing import Any

from rl_insight.integrations import tables
from rl_insight.integrations.tracker import FrameworkTracker

NAME = "rl_insight"
FRAMEWORK = tables.SKYRL


class _Backend:
    """What SkyRL's ``Tracking`` calls on its backend: ``log(data=, step=)``, ``finish``
    (twice: the trainer's, then ``Tracking.__del__``'s)."""

    def __init__(self, project: str, experiment_name: str, config: Any) -> None:
        self.tracker = FrameworkTracker(FRAMEWORK, project, experiment_name,
                                        _rl_insight_config(config))

    def log(self, data: dict, step: int | None = None, **_: Any) -> None:
        self.tracker.log(data, step)

    def finish(self, *_: Any, **__: Any) -> None:
        self.tracker.finish()


def _rl_insight_config(config: Any) -> dict:
    """``trainer.rl_insight`` of SkyRL's config (a dataclass or a mapping), if any."""
    trainer = config.get("trainer") if isinstance(config, dict) else \
        getattr(config, "trainer", None)
    got = trainer.get("rl_insight") if isinstance(trainer, dict) else \
        getattr(trainer, "rl_insight", None)
    return dict(got) if isinstance(got, dict) else {}


def tracking_class() -> type:
    """SkyRL's ``Tracking`` with ``rl_insight`` among its backends (either package)."""
    try:
        from skyrl.train.utils.tracking import Tracking
    except ImportError:
        from skyrl_train.utils.tracking import Tracking

    class RLInsightTracking(Tracking):
        supported_backends = [*Tracking.supported_backends, NAME]

        def __init__(self, project_name: str, experiment_name: str, *args: Any,
                     **kwargs: Any) -> None:
            super().__init__(project_name, experiment_name, *args, **kwargs)
            chosen = kwargs.get("backend", kwargs.get("backends", args[0] if args else ""))
            names = [chosen] if isinstance(chosen, str) else list(chosen or [])
            if NAME in names:
                backend = _Backend(project_name, experiment_name, kwargs.get("config"))
                if isinstance(self.logger, dict):  # skyrl_train: a backend per name
                    self.logger[NAME] = backend
                else:
                    self.logger = backend

    return RLInsightTracking


def get_tracker(exp: Any) -> Any:
    """``BasePPOExp.get_tracker`` with ``rl_insight`` allowed: return this from your
    experiment's ``get_tracker`` (``return rl_insight.integrations.skyrl.get_tracker(self)``)."""
    cfg = exp.cfg
    cls = tracking_class()
    try:
        return cls(project_name=cfg.trainer.project_name,
                   experiment_name=cfg.trainer.run_name, backend=cfg.trainer.logger,
                   config=cfg, tags=getattr(cfg.trainer, "tags", None))
    except TypeError:  # skyrl_train 0.3.1: backends=, no tags
        return cls(project_name=cfg.trainer.project_name,
                   experiment_name=cfg.trainer.run_name, backends=cfg.trainer.logger,
                   config=cfg)
