"""RL-Insight: monitoring for reinforcement-learning training of LLMs on Ray.

The client API, re-exported; see rl_insight/client/api.py.
"""

from rl_insight.client.agent_loop import agent_loop_session
from rl_insight.client.api import (
    enabled,
    finish,
    flush,
    init,
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
from rl_insight.client.registration import RolloutStatsDisabled, check_rollout_stats
from rl_insight.client.tracking import Tracking
from rl_insight.version import __version__

__all__ = [
    "RolloutStatsDisabled", "Tracking", "__version__", "agent_loop_session",
    "check_rollout_stats", "enabled",
    "finish", "flush", "init", "metric_count", "metric_gauge", "metric_histogram",
    "register_rollout_replicas", "register_transfer_queue", "trace_op", "trace_span",
    "trace_state", "update_prometheus_config",
]


def __getattr__(name: str):
    if name == "ray":  # `rl_insight.ray.attach(...)` without importing Ray for everyone
        import importlib

        return importlib.import_module("rl_insight.ray")
    raise AttributeError(f"module 'rl_insight' has no attribute {name!r}")
