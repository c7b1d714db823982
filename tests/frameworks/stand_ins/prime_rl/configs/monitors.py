"""FAKE prime_rl/configs/monitors.py (packages/prime-rl-configs, 559b4477 l.6-46): the
monitor configs as pydantic models (prime-rl's ``BaseConfig`` is pydantic-config's)."""

from pathlib import Path

from pydantic import BaseModel


class WandbMonitorConfig(BaseModel):
    project: str = "prime-rl"
    name: str | None = None


class FileMonitorConfig(BaseModel):
    path: Path = Path("metrics.jsonl")


class MonitorsConfig(BaseModel):
    wandb: WandbMonitorConfig | None = None
    file: FileMonitorConfig | None = FileMonitorConfig()
