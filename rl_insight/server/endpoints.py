"""Where the server reaches the services it runs, and with which credential: the managed
Prometheus and Alertmanager (their password beyond loopback: doors.py), Tempo's OTLP
receiver for the relay. One place, below the routes, analyses and services that use it."""

from __future__ import annotations

from rl_insight.common import netaddr
from rl_insight.common.secret import loopback_only
from rl_insight.config import ConfigError, Settings
from rl_insight.server import doors
from rl_insight.wire import paths

# Tempo checks no credential on any port (its HTTP API and OTLP receivers take anything
# from anyone), so all of them listen on loopback, whatever `host` says: spans arrive
# through the server's /v1/traces (its token) and its relay; Grafana queries it locally
LOOPBACK = "127.0.0.1"


def tempo_host(settings: Settings) -> str:
    """Where Tempo listens: loopback; a ``tempo.host`` beyond it is refused, saying why."""
    own = settings.tempo.host
    if own and not loopback_only(own):
        raise ConfigError(f"tempo.host={own}: Tempo checks no credential, so it listens "
                          "on loopback only; training processes send spans to the server "
                          "(its /v1/traces, with the token) and Grafana reads Tempo on "
                          "this machine. Remove tempo.host")
    return own or LOOPBACK


def relay_url(settings: Settings) -> str:
    """Where the relay sends the spans it took: Tempo's OTLP/HTTP receiver, or
    ``traces.relay_url``."""
    if settings.traces.relay_url:
        return settings.traces.relay_url
    return netaddr.http_url(tempo_host(settings), settings.tempo.otlp_http_port,
                            paths.TRACES)


def prometheus_url(settings: Settings, path: str = "") -> str:
    """The managed Prometheus, as the server, Grafana and Tempo reach it."""
    return netaddr.http_url(netaddr.local_host(settings.bind_host("prometheus")),
                            settings.prometheus.port, path)


def prometheus_auth(settings: Settings) -> tuple[str, str] | None:
    """What a request to the managed Prometheus carries."""
    return doors.basic_auth(settings, "prometheus")


def alertmanager_url(settings: Settings) -> str:
    return netaddr.http_url(netaddr.local_host(settings.bind_host("alertmanager")),
                            settings.alertmanager.port)


def alertmanager_auth(settings: Settings) -> tuple[str, str] | None:
    """What a request to the managed Alertmanager carries."""
    return doors.basic_auth(settings, "alertmanager")
