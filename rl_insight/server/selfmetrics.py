"""The server's own metrics, collected at scrape time from the supervisor's state."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class ServicesCollector(Collector):
    """`rl_insight_service_up`, `..._ready` and `..._restarts_total` per managed service."""

    def __init__(self, report: Callable[[], dict]) -> None:
        self.report = report

    def collect(self) -> Iterator:
        up = GaugeMetricFamily("rl_insight_service_up",
                               "1 when the managed service's process runs", labels=["service"])
        ready = GaugeMetricFamily("rl_insight_service_ready",
                                  "1 when the managed service answers its readiness check",
                                  labels=["service"])
        restarts = CounterMetricFamily("rl_insight_service_restarts",
                                       "Times the supervisor restarted the service",
                                       labels=["service"])
        for s in self.report()["services"]:
            if s["state"] in ("disabled", "not installed"):
                continue
            up.add_metric([s["name"]], 1.0 if s.get("pid") else 0.0)
            ready.add_metric([s["name"]], 1.0 if s.get("ready") else 0.0)
            restarts.add_metric([s["name"]], float(s.get("restarts") or 0))
        yield from (up, ready, restarts)
