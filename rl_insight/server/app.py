"""The server's HTTP application (FastAPI, so every route is in the OpenAPI schema).

Routes read from a :class:`ServerState`; they never start or stop processes.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

from fastapi import FastAPI, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from rl_insight import netaddr
from rl_insight.config import Settings
from rl_insight.server.selfmetrics import ServicesCollector
from rl_insight.server.supervisor import Supervisor
from rl_insight.version import __version__


@dataclass
class ServiceInfo:
    """What the server knows about a service before and beside supervision."""

    name: str
    enabled: bool
    installed: bool
    version: str = ""
    binary: str = ""
    source: str = ""
    url: str = ""
    message: str = ""


@dataclass
class ServerState:
    settings: Settings
    supervisor: Supervisor
    services: dict[str, ServiceInfo] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    advertise_host: str = ""

    def client_urls(self) -> dict[str, str]:
        base = netaddr.http_url(self.advertise_host, self.settings.server.port)
        t = self.settings.tempo
        return {
            "server_url": base,
            "metrics_push": base + "/metrics/job/",
            "otlp_traces": base + "/v1/traces",
            "tempo_otlp_http": netaddr.http_url(self.advertise_host, t.otlp_http_port),
            "tempo_otlp_grpc": netaddr.join_host_port(self.advertise_host, t.otlp_grpc_port),
        }

    def services_report(self) -> dict:
        """Plain data for `status`: one entry per service, and whether all are ready."""
        running = {c.name: c for c in self.supervisor.status()}
        out = []
        for info in self.services.values():
            entry = asdict(info)
            child = running.get(info.name)
            if child is not None:
                entry.update(asdict(child))
            else:
                entry.update(state="disabled" if not info.enabled else "not installed",
                             pid=None, ready=False, restarts=0, last_exit_code=None,
                             port=None, log="")
            out.append(entry)
        needed = [e for e in out if e["state"] not in ("disabled", "not installed")]
        return {
            "server": {
                "version": __version__,
                "pid": os.getpid(),
                "port": self.settings.server.port,
                "ready": True,
                "uptime_s": round(time.time() - self.started_at, 1),
            },
            "services": out,
            "clients": self.client_urls(),
            "all_ready": all(e["ready"] for e in needed),
        }


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="RL-Insight server", version=__version__,
                  description="The one address an RL training cluster talks to.")

    registry = CollectorRegistry(auto_describe=True)
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)
    registry.register(ServicesCollector(state.services_report))

    @app.get("/metrics", summary="Prometheus exposition of the server's own metrics",
             response_class=Response)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", summary="Liveness of the server process")
    def healthz() -> dict:
        return {"status": "ok", "version": __version__}

    @app.get("/api/v1/services", summary="Managed services, their state and client URLs")
    def services() -> dict:
        return state.services_report()

    return app
