"""RL-Insight: monitoring for reinforcement-learning training of LLMs on Ray.

The client API, re-exported; see rl_insight/client/api.py. Loaded on first use, so that
`import rl_insight` (and the CLI, the server, node agents) does not pull in the client and
OpenTelemetry stack until a client call needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rl_insight.common.version import __version__ as __version__

_EXPORTS = {
    "agent_loop_session": "rl_insight.client.agent_loop",
    "agent_loop_lane_id": "rl_insight.client.agent_loop",
    "RolloutStatsDisabled": "rl_insight.client.registration",
    "check_rollout_stats": "rl_insight.client.registration",
    "Tracking": "rl_insight.client.tracking",
    **{name: "rl_insight.client.api" for name in (
        "child_env", "enabled", "finish", "flush", "init", "is_platform_mode", "log_config",
        "metric_count",
        "metric_gauge",
        "metric_histogram", "register_rollout_replicas", "register_transfer_queue",
        "trace_op", "trace_span", "trace_state", "update_prometheus_config")},
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:  # for type checkers and IDEs: the names as they resolve
    from rl_insight.client.agent_loop import (  # noqa: F401
        agent_loop_lane_id,
        agent_loop_session,
    )
    from rl_insight.client.api import (  # noqa: F401
        child_env,
        enabled,
        finish,
        flush,
        init,
        is_platform_mode,
        log_config,
        metric_count,
        metric_gauge,
        metric_histogram,
        register_rollout_replicas,
        register_transfer_queue,
        trace_op,
        trace_span,
        trace_state,
        update_prometheus_config,
    )
    from rl_insight.client.registration import (  # noqa: F401
        RolloutStatsDisabled,
        check_rollout_stats,
    )
    from rl_insight.client.tracking import Tracking  # noqa: F401


def __getattr__(name: str) -> Any:
    """The client API on first use (then cached as a module global: no further cost);
    `rl_insight.ray` without importing Ray for everyone."""
    if name == "ray":
        return importlib.import_module("rl_insight.ray")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rl_insight' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
