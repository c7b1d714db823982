"""The managed services, by name, in start order."""

from rl_insight.server.services.alertmanager import Alertmanager
from rl_insight.server.services.base import Service
from rl_insight.server.services.grafana import Grafana
from rl_insight.server.services.prometheus import Prometheus
from rl_insight.server.services.tempo import Tempo

# Alertmanager, optional, last: nothing else waits for it, and Prometheus queues alerts
# until it answers
SERVICES: dict[str, Service] = {s.name: s for s in (Prometheus(), Tempo(), Grafana(),
                                                    Alertmanager())}

__all__ = ["SERVICES", "Service"]
