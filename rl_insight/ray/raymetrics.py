"""The hub's and the lane actors' counters as Ray metrics (``ray.util.metrics``), so they
show where Ray users look: Ray's metrics endpoint and its Grafana, beside the actor in
Ray's dashboard. Where Ray's metrics are off this does nothing."""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)

HUB = ("events_received", "events_applied", "events_dropped", "batches", "pushes",
       "push_failures", "runs", "series", "lanes", "jobs")
LANES = ("lanes", "spans_received", "spans_sent", "spans_dropped", "spans_pending")


class RayGauges:
    """One Ray gauge per counter, tagged with the actor's name; set from its stats()."""

    def __init__(self, prefix: str, keys: tuple[str, ...], actor: str) -> None:
        self.actor = actor
        self.gauges: dict[str, object] = {}
        try:
            from ray.util.metrics import Gauge

            for key in keys:
                self.gauges[key] = Gauge(f"{prefix}_{key}", f"rl-insight {prefix}: {key}",
                                         tag_keys=("actor",))
        except Exception as exc:  # Ray without its metrics: nothing to export to
            log.info("rl-insight: Ray metrics are off here (%s)", exc)
            self.gauges = {}

    def update(self, stats: Mapping[str, object]) -> None:
        for key, gauge in self.gauges.items():
            value = stats.get(key)
            if isinstance(value, (int, float)):
                try:
                    gauge.set(float(value), tags={"actor": self.actor})
                except Exception:  # never let Ray's side stop a tick
                    log.debug("rl-insight: could not set Ray metric %s", key, exc_info=True)
