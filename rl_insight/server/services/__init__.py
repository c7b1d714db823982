"""The managed services, by name, in start order."""

from rl_insight.server.services.base import Service
from rl_insight.server.services.grafana import Grafana
from rl_insight.server.services.prometheus import Prometheus
from rl_insight.server.services.tempo import Tempo

SERVICES: dict[str, Service] = {s.name: s for s in (Prometheus(), Tempo(), Grafana())}

__all__ = ["SERVICES", "Service"]
