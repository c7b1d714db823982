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

import inspect
from collections.abc import Mapping
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
    """``trainer.rl_insight`` of SkyRL's config (a dataclass, a dict, or skyrl_train's
    Hydra ``DictConfig``, a Mapping whose missing keys may raise), if any."""
    try:
        trainer = config.get("trainer") if isinstance(config, Mapping) else \
            getattr(config, "trainer", None)
        got = trainer.get("rl_insight") if isinstance(trainer, Mapping) else \
            getattr(trainer, "rl_insight", None)
    except Exception:  # a struct-mode DictConfig without the key
        return {}
    return _plain(got) if isinstance(got, Mapping) else {}


def _plain(m: Mapping) -> dict:
    return {str(k): _plain(v) if isinstance(v, Mapping) else v for k, v in m.items()}


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
                config = kwargs.get("config", args[1] if len(args) > 1 else None)
                backend = _Backend(project_name, experiment_name, config)
                if isinstance(self.logger, dict):  # skyrl_train: a backend per name
                    self.logger[NAME] = backend
                else:
                    self.logger = backend

        def __del__(self) -> None:
            # skyrl_train 0.3.1 has no finish(); its __del__ finishes the backends it
            # names only (skyrl_train/utils/tracking.py:83-98): ours is finished here
            try:
                super().__del__()
            finally:
                backends = getattr(self, "logger", None)
                if isinstance(backends, dict) and NAME in backends:
                    backends[NAME].finish()

    return RLInsightTracking


def get_tracker(exp: Any) -> Any:
    """``BasePPOExp.get_tracker`` with ``rl_insight`` allowed: return this from your
    experiment's ``get_tracker`` (``return rl_insight.integrations.skyrl.get_tracker(self)``)."""
    cfg = exp.cfg
    cls = tracking_class()
    params = inspect.signature(cls.__mro__[1].__init__).parameters
    if "backends" in params:  # skyrl_train 0.3.1: a list of backends, no tags
        return cls(project_name=cfg.trainer.project_name,
                   experiment_name=cfg.trainer.run_name, backends=cfg.trainer.logger,
                   config=cfg)
    return cls(project_name=cfg.trainer.project_name,
               experiment_name=cfg.trainer.run_name, backend=cfg.trainer.logger,
               config=cfg, tags=getattr(cfg.trainer, "tags", None))
