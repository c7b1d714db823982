"""FAKE prime_rl/monitors/base.py (559b4477 l.16-55): ``Monitor`` with ``init``, ``log``
(a dict to ``log_metrics``, episodes to ``log_episodes``) and ``finalize``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class Monitor(ABC):
    def __init__(self, config: Any):
        self.config = config

    async def init(self, **kwargs: Any) -> None:  # noqa: B027 (as prime-rl has it)
        """Initialize run."""

    async def log(self, data, step: int, kind: str = "train", subset: str = "effective"):
        if isinstance(data, dict):
            await self.log_metrics(data, step=step)
        else:
            episodes = data if isinstance(data, list) else [data]
            await self.log_episodes(episodes, step=step, kind=kind, subset=subset)

    @abstractmethod
    async def log_metrics(self, metrics: dict[str, Any], step: int) -> None: ...

    @abstractmethod
    async def log_episodes(self, episodes: list, step: int, kind: str, subset: str) -> None: ...

    async def finalize(self) -> None:  # noqa: B027
        """Finalize run."""
