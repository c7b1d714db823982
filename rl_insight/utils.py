"""``rl_insight.utils``: the module path upstream rl-insight 0.3.0 code imports its
helpers from (``update_prometheus_config`` and friends). The names and values are
upstream's (rl-insight 0.3.0 wheel, rl_insight/utils/constants.py and
prometheus_utils.py); the work is done by this package's own client."""

from __future__ import annotations

from rl_insight.client.api import update_prometheus_config
from rl_insight.client.core import OTLP_ENV, SERVER_URL_ENV
from rl_insight.wire.naming import PREFIX


class MonitorEnv:
    SERVER_URL = SERVER_URL_ENV
    # platform mode (upstream's "Platform Integration Without the RL-Insight Server",
    # tardis-key/rl-insight rl_insight/utils/constants.py at d6c4a843)
    OTLP_ENDPOINT = OTLP_ENV


class MonitorDefaults:
    NAMESPACE = PREFIX.removesuffix("_")  # the exported metric prefix, as here
    METRICS_REPORT_PORT = 9092


class MonitorServer:
    API_PREFIX = "/api/v1"


class PrometheusScrape:
    TRAINER_METRICS_JOB = "trainer_metrics"  # upstream hub's job (ours registers as "rollout")


def start_metrics_http_server(port: int, addr: str = "") -> None:
    """Serve this process's prometheus_client registry on ``addr:port`` (a thread)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr.strip("[]") if addr else "")


__all__ = ["MonitorDefaults", "MonitorEnv", "MonitorServer", "PrometheusScrape",
           "start_metrics_http_server", "update_prometheus_config"]
