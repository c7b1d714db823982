"""``rl_insight.api``: the module path upstream 0.3.0 code imports the client API from."""

from rl_insight.client.api import (
    finish,
    flush,
    init,
    metric_count,
    metric_gauge,
    metric_histogram,
    trace_op,
    trace_span,
    trace_state,
    update_prometheus_config,
)

__all__ = ["finish", "flush", "init", "metric_count", "metric_gauge", "metric_histogram",
           "trace_op", "trace_span", "trace_state", "update_prometheus_config"]
