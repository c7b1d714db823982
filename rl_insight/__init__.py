"""RL-Insight: monitoring for reinforcement-learning training of LLMs on Ray.

The client API, re-exported; see rl_insight/client/api.py.
"""

from rl_insight.client.api import (
    enabled,
    finish,
    flush,
    init,
    metric_count,
    metric_gauge,
    metric_histogram,
    trace_op,
    trace_span,
    trace_state,
)
from rl_insight.version import __version__

__all__ = [
    "__version__", "enabled", "finish", "flush", "init", "metric_count", "metric_gauge",
    "metric_histogram", "trace_op", "trace_span", "trace_state",
]


def __getattr__(name: str):
    if name == "ray":  # `rl_insight.ray.attach(...)` without importing Ray for everyone
        import importlib

        return importlib.import_module("rl_insight.ray")
    raise AttributeError(f"module 'rl_insight' has no attribute {name!r}")
