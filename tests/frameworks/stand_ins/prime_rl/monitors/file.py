"""FAKE prime_rl/monitors/file.py (559b4477 l.19-62): the JSON-lines file monitor, one
line per dict (``{"step", "time", **metrics}``, non-finite values dropped), line-buffered
in ``output_dir / config.path``; episodes go to per-step files (here: counted)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from prime_rl.monitors.base import Monitor


class FileMonitor(Monitor):
    async def init(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.path = output_dir / self.config.path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", buffering=1)  # noqa: SIM115
        self.episodes = 0

    async def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        sanitized = {k: v for k, v in metrics.items()
                     if not (isinstance(v, float) and not math.isfinite(v))}
        row = {"step": step, "time": time.time(), **sanitized}
        self.file.write(json.dumps(row) + "\n")

    async def log_episodes(self, episodes: list, step: int, kind: str, subset: str) -> None:
        self.episodes += len(episodes)
