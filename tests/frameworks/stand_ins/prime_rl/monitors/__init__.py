"""FAKE prime_rl/monitors/__init__.py (559b4477): the monitors of a process, built once
by ``setup`` (rank 0 only, l.59-61; here the file monitor alone: W&B and the platform are
off, as prime-rl's defaults have them, configs/monitors.py l.36-46), and the module-level
fan-out ``log`` / ``finalize`` that never raises (l.101-122). Both processes call these
through the module (``from prime_rl import monitors``; ``monitors.setup(...)``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prime_rl.monitors.base import Monitor
from prime_rl.monitors.file import FileMonitor

__all__ = ["Monitor", "FileMonitor", "setup", "get", "log", "finalize"]

MONITORS: list[Monitor] = []


async def setup(wandb=None, prime=None, file=None, *, output_dir: Path, run_config=None,
                train_env_names: list[str] | None = None,
                eval_env_names: list[str] | None = None, overview_flavor: str = "rl") -> None:
    assert not MONITORS, "Monitors already set up. Call `setup` only once per process."
    rank = int(os.environ.get("RANK", os.environ.get("DP_RANK", "0")))
    if rank != 0:
        return
    monitors: list[tuple[Monitor, dict[str, Any]]] = []
    if file is not None:
        monitors.append((FileMonitor(file), dict(output_dir=output_dir)))
    for monitor, init_kwargs in monitors:
        await monitor.init(**init_kwargs)
        MONITORS.append(monitor)


def get(monitor_cls: type) -> Monitor | None:
    return next((m for m in MONITORS if isinstance(m, monitor_cls)), None)


async def log(data, step: int, kind: str = "train", subset: str = "effective") -> None:
    for monitor in MONITORS:
        try:
            await monitor.log(data, step=step, kind=kind, subset=subset)
        except Exception as e:
            print(f"Failed to log to {monitor.__class__.__name__}: {e}")


async def finalize() -> None:
    for monitor in MONITORS:
        try:
            await monitor.finalize()
        except Exception as e:
            print(f"Failed to finalize {monitor.__class__.__name__}: {e}")
