"""SkyRL (NovaSky-AI/SkyRL; ``skyrl`` 0.3.0 on PyPI, ``skyrl_train`` before it):
``trainer.logger=rl_insight``.

SkyRL's ``Tracking`` takes a backend name and refuses one it does not list
(``skyrl/train/utils/tracking.py``, a9564572); its experiment builds the tracker in
``BasePPOExp.get_tracker()`` inside a Ray worker. :class:`RLInsightTracking` is that
``Tracking`` with ``rl_insight`` listed: an experiment whose ``get_tracker`` returns it
(``RLInsightExp``, or one line in your own ``BasePPOExp`` subclass) logs every step's
payload here, the step from ``trainer/global_step``, the anatomy from ``timing/*``; the
experiment's ``cfg`` (what SkyRL hands wandb as ``config``) is the run's configuration.

SkyRL forwards only the variables it names to its workers: pass ``RL_INSIGHT_*`` in
your runtime env (``rl-insight ray-env``) or export them before ``ray start``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

import rl_insight
from rl_insight import frameworks
from rl_insight.integrations.tracker import FrameworkTracker
from rl_insight.runconfig.section import options_section

log = logging.getLogger(__name__)

NAME = "rl_insight"
FRAMEWORK = frameworks.named("skyrl")


class _Backend:
    """What SkyRL's ``Tracking`` calls on its backend: ``log(data=, step=)``, ``finish``
    (twice: the trainer's, then ``Tracking.__del__``'s)."""

    def __init__(self, project: str, experiment_name: str, config: Any) -> None:
        self.tracker = FrameworkTracker(FRAMEWORK, project, experiment_name,
                                        _rl_insight_config(config), run_config=config)
        self.exp: Any = None  # the experiment, once get_tracker hands it over
        self.engines_registered = False

    def log(self, data: dict, step: int | None = None, **_: Any) -> None:
        if not self.engines_registered and self.exp is not None:
            self.engines_registered = True  # once: the trainer is built by its first log
            register_engines(self.exp)
        self.tracker.log(data, step)

    def finish(self, *_: Any, **__: Any) -> None:
        self.tracker.finish()


def _rl_insight_config(config: Any) -> dict:
    """``trainer.rl_insight`` of SkyRL's config (a dataclass, a dict, or skyrl_train's
    Hydra ``DictConfig``, a Mapping whose missing keys may raise), if any."""
    got = options_section(config)
    return _plain(got) if got is not None else {}


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
    experiment's ``get_tracker`` (``return rl_insight.integrations.skyrl.get_tracker(self)``).
    Its inference engines are registered when the trainer first logs."""
    cfg = exp.cfg
    cls = tracking_class()
    params = inspect.signature(cls.__mro__[1].__init__).parameters
    if "backends" in params:  # skyrl_train 0.3.1: a list of backends, no tags
        tracker = cls(project_name=cfg.trainer.project_name,
                      experiment_name=cfg.trainer.run_name, backends=cfg.trainer.logger,
                      config=cfg)
    else:
        tracker = cls(project_name=cfg.trainer.project_name,
                      experiment_name=cfg.trainer.run_name, backend=cfg.trainer.logger,
                      config=cfg, tags=getattr(cfg.trainer, "tags", None))
    logger = tracker.logger.get(NAME) if isinstance(tracker.logger, dict) else tracker.logger
    if isinstance(logger, _Backend):
        logger.exp = exp
    return tracker


def engine_addresses(exp: Any) -> list[str]:
    """SkyRL's vLLM servers: the inference client's ``server_urls`` (a9564572: every
    engine an HTTP server, ``inference_servers/remote_inference_client.py``), or the
    remote engines its config names (skyrl_train 0.3.1 ``remote_inference_engine_urls``)."""
    client = getattr(getattr(exp, "trainer", None), "inference_engine_client", None)
    urls = list(getattr(client, "server_urls", None) or [])
    if not urls:
        gen = getattr(getattr(exp, "cfg", None), "generator", None)
        urls = list(getattr(gen, "remote_inference_engine_urls", None) or [])
    return [str(u).split("://", 1)[-1].rstrip("/") for u in urls if u]


def register_engines(exp: Any) -> None:
    """Each engine's ``/metrics`` as a vLLM replica (job ``vllm``, label ``replica``).
    With SkyRL's ``enable_ray_prometheus_stats`` (its default) vLLM's engine series go to
    Ray's metrics port instead (``ray_vllm_*``): docs/frameworks.md."""
    try:
        addresses = engine_addresses(exp)
        if addresses:
            rl_insight.update_prometheus_config(
                addresses, "vllm", [{"replica": i} for i in range(len(addresses))])
    except Exception:
        log.warning("rl-insight: registering SkyRL's engines failed", exc_info=True)
