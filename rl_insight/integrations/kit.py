"""What every framework adapter does the same way: name the run (the environment's names
as the client's configuration read them, then the framework's own, then its defaults)
and tell this process's rank."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable


def first(*candidates: object) -> str | None:
    """The first candidate that says something (not None, not empty)."""
    for c in candidates:
        if c not in (None, ""):
            return str(c)
    return None


def configured_names() -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` as this process's resolved
    configuration holds them (resolved now where nothing asked yet); empty when
    monitoring is off, where no name is used."""
    from rl_insight.client import api

    api.enabled()
    config = api.configuration()
    return config.names if config is not None else ("", "")


def run_names(projects: Iterable[object], experiments: Iterable[object], project: str,
              experiment: str) -> tuple[str, str]:
    """The environment's names where set, else the first of the framework's own names
    that says something, else its defaults."""
    env_project, env_experiment = configured_names()
    return (first(env_project, *projects) or project,
            first(env_experiment, *experiments) or experiment)


def process_rank() -> int:
    """This process's rank: torch.distributed's where the framework set it up (never
    imported here for it), else ``RANK``."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0
