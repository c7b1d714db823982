"""Hooks a cluster operator sets once, so every job reports without code changes.

- ``RAY_RUNTIME_ENV_HOOK=rl_insight.ray.hooks.runtime_env_hook`` (on the nodes where
  drivers run): every job's runtime_env gets the monitoring variables from the driver's
  environment, and the worker setup hook below.
- ``worker_process_setup_hook: rl_insight.ray.hooks.worker_setup`` (in a runtime_env):
  each worker enables monitoring at start and flushes at exit, and the frameworks whose
  tables name modules to patch (OpenRLHF's trainer) are patched when a worker imports
  them itself (rl_insight/integrations/onimport.py).
"""

from __future__ import annotations

import os
from typing import Any

from rl_insight.ray.attach import WORKER_SETUP_HOOK, runtime_env


def runtime_env_hook(env: dict[str, Any] | None) -> dict[str, Any]:
    """Ray calls this with the job's runtime_env and uses what it returns."""
    merged = runtime_env(env or {}, os.environ, from_client=False)  # the node's own
    if merged.get("env_vars") and "worker_process_setup_hook" not in merged:
        merged["worker_process_setup_hook"] = WORKER_SETUP_HOOK
    return merged


def worker_setup() -> None:
    """Runs at the start of every worker process of a job that set it."""
    from rl_insight.client import api
    from rl_insight.integrations import onimport

    api.init()
    onimport.install(onimport.framework_patches())
