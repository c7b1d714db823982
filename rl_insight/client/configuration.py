"""A process's monitoring configuration, resolved once into one object that ``init``,
``attach`` and the options pass explicitly (as OpenTelemetry's ``TracerProvider`` holds
its own). The environment is read, never written: the processes this one starts get its
values and the run it named as variables their starter passes (Ray's runtime env, the
site hook's command, ``rl_insight.child_env()``: rl_insight/client/handover.py).

Each value is taken from the first of, in this order:

1. the arguments: ``attach(server_url=..., token=..., project=..., experiment_name=...)``;
2. the environment: ``RL_INSIGHT_SERVER_URL``, ``RL_INSIGHT_OTLP_ENDPOINT``,
   ``RL_INSIGHT_TOKEN``, ``RL_INSIGHT_PROJECT`` with ``RL_INSIGHT_EXPERIMENT_NAME``, and
   ``RL_INSIGHT_CLIENT_*`` for the client's settings (``VERL_RL_INSIGHT_ENABLE=0`` turns
   monitoring off whatever else is set);
3. ``init(config=...)``: upstream's ``server.url``, ``otel.exporter.endpoint`` (the
   environment wins, as upstream's does), ``server.backend`` and ``push``, and this
   package's client settings;
4. the config file (``$RL_INSIGHT_CONFIG``, else ``$RL_INSIGHT_HOME/config.yaml``): its
   settings, and the same keys ``init(config)`` takes (upstream's monitor configuration
   file after 0.3.0, defaults < file < init(config) < environment:
   verl-project/rl-insight ``rl_insight/utils/monitor_config_loader.py`` at 99ae298f),
   and the token a server on this machine made;
5. the defaults (``rl_insight/config/settings.py``).

A server URL wins over an OTLP endpoint where both are set (with a warning). The
backend: ``RL_INSIGHT_SERVER_BACKEND`` (upstream main, verl-project/rl-insight#190), else
``server.backend`` as above, else ``ray``; ``push`` adds the user's sinks
(rl_insight/client/push/), beside the server path where a server URL or OTLP endpoint is
set, on their own where none is.

``resolve`` is the one place that reads any of these; what it returns is never changed
after (a later ``init(config=...)`` resolves a new one, which the client takes whole).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rl_insight import config as config_mod
from rl_insight.client.options import (
    InitConfig,
    merged,
    otlp_endpoint_from,
    read_init_config,
    server_url_from,
)
from rl_insight.client.push.shape import PushConfig, read_push
from rl_insight.common import secret
from rl_insight.config import (
    BACKEND_ENV,
    ENABLE_ENV,
    EXPERIMENT_ENV,
    OTLP_ENV,
    PROJECT_ENV,
    SERVER_URL_ENV,
)
from rl_insight.wire import paths
from rl_insight.wire.events import Identity

log = logging.getLogger(__name__)

__all__ = ["ENABLE_ENV", "EXPERIMENT_ENV", "OTLP_ENV", "PROJECT_ENV", "SERVER_URL_ENV",
           "ClientConfig", "endpoints", "env_identity", "environ_key", "load_settings",
           "resolve"]


@dataclass(frozen=True)
class ClientConfig:
    """Where this process's monitoring sends, with what credential, for which run, and
    the client's settings."""

    server_url: str = ""
    otlp_url: str = ""  # platform mode: spans to this OTLP/HTTP endpoint, no server
    token: str = ""
    identity: Identity | None = None  # the run named by arguments or the environment
    settings: config_mod.Settings = field(default_factory=config_mod.Settings)
    # RL_INSIGHT_PROJECT and RL_INSIGHT_EXPERIMENT_NAME, each or none: an adapter names
    # its run by them first (rl_insight/integrations/kit.py)
    names: tuple[str, str] = ("", "")
    # init(config=...)'s histogram bounds per metric name
    bucket_map: tuple[tuple[str, tuple[float, ...] | None], ...] = ()
    # what of the environment decides whether monitoring is on (environ_key), when
    # resolved: a bare init() resolves again only when it changed
    environ_key: tuple[str, ...] = ()
    backend: str = "ray"  # server.backend: ray, push or local (upstream's server's)
    push: PushConfig | None = None  # the push backend's sinks (backend push)

    @property
    def enabled(self) -> bool:
        return bool(self.server_url or self.otlp_url or self.push is not None)

    @property
    def sends(self) -> bool:
        """Whether events go to a server or an OTLP endpoint (not only to sinks)."""
        return bool(self.server_url or self.otlp_url)

    @property
    def client(self) -> config_mod.ClientSettings:
        return self.settings.client


def endpoints(environ: Mapping[str, str] = os.environ, warn: bool = True,
              server_url: str = "", otlp_url: str = "") -> tuple[str, str]:
    """(server_url, otlp_url): the arguments, else the environment; the server wins, with
    a warning. The OTLP endpoint is the full trace URL (upstream's platform guide:
    ``https://collector:4318/v1/traces``), used as given; a bare ``scheme://host:port``
    gets OTLP/HTTP's standard ``/v1/traces``."""
    if environ.get(ENABLE_ENV, "").strip() == "0":
        return "", ""
    server = (server_url or environ.get(SERVER_URL_ENV, "")).strip()
    otlp = (otlp_url or environ.get(OTLP_ENV, "")).strip()
    if server and otlp:
        if warn:
            log.warning("rl-insight: both a server URL and an OTLP endpoint are set (%s, "
                        "%s, or init(config)'s server.url and otel.exporter.endpoint); "
                        "using the server (%s)", SERVER_URL_ENV, OTLP_ENV, server)
        otlp = ""
    if otlp and urlsplit(otlp).path in ("", "/"):
        otlp = otlp.rstrip("/") + paths.TRACES
    return server, otlp


def environ_key(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The variables that turn monitoring on or off, as they are now (a few lookups: a
    bare ``init()`` before every metric compares them)."""
    return (environ.get(SERVER_URL_ENV, ""), environ.get(OTLP_ENV, ""),
            environ.get(ENABLE_ENV, ""), environ.get(BACKEND_ENV, ""),
            environ.get(config_mod.CONFIG_ENV, ""))


def env_identity(environ: Mapping[str, str] = os.environ) -> Identity | None:
    p, e = environ.get(PROJECT_ENV, ""), environ.get(EXPERIMENT_ENV, "")
    return Identity(p, e) if p and e else None


def load_settings(environ: Mapping[str, str] | None = None,
                  init: InitConfig | None = None) -> config_mod.Settings:
    """Settings for a training process: the file's, ``init(config=...)``'s client
    settings, the environment's; a broken config file must not stop training."""
    layers = [init.settings] if init is not None and init.settings else []
    try:
        return config_mod.load(environ=environ, layers=layers)
    except config_mod.ConfigError as exc:
        log.warning("rl-insight: %s; using defaults", exc)
        return config_mod.Settings()


def backend_of(environ: Mapping[str, str], init: InitConfig | None) -> str:
    """``RL_INSIGHT_SERVER_BACKEND`` (blank: unset), else the layered ``server.backend``,
    else ``ray``."""
    chosen = environ.get(BACKEND_ENV, "").strip() or (init.backend if init else "") or "ray"
    return chosen.strip()


def resolve(*, server_url: str | None = None, otlp_url: str | None = None,
            token: str | None = None, project: str | None = None,
            experiment_name: str | None = None, init_config: Any = None,
            environ: Mapping[str, str] = os.environ, warn: bool = True) -> ClientConfig:
    """The configuration in the module's documented order; never raises."""
    from rl_insight.client.options import as_mapping

    # the file's monitor keys under init(config)'s, as upstream layers them
    mapping = merged(config_mod.monitor_layer(environ),
                     as_mapping(init_config) if init_config else {})
    init = read_init_config(mapping) if mapping else None
    off = environ.get(ENABLE_ENV, "").strip() == "0"
    server, otlp = endpoints(environ, warn, server_url or "", otlp_url or "")
    if not server and not otlp and mapping and not off:
        server, otlp = endpoints({}, warn, server_url_from(mapping),
                                 otlp_endpoint_from(mapping))
    settings = load_settings(environ, init)
    if server or otlp:  # RL_INSIGHT_TOKEN, the file's, or the one a local server made
        token = token or secret.client_token(settings)
    identity = Identity(str(project), str(experiment_name)) \
        if project and experiment_name else env_identity(environ)
    backend = backend_of(environ, init)
    if backend not in ("ray", "push", "local") and warn:
        log.warning("rl-insight: %s=%r is unknown; write ray, push or local; using 'ray'",
                    BACKEND_ENV if environ.get(BACKEND_ENV, "").strip() else
                    "server.backend", backend)
    push = read_push(init.push if init else None) if backend == "push" and not off else None
    return ClientConfig(server, otlp, token or "", identity, settings,
                        (environ.get(PROJECT_ENV, ""), environ.get(EXPERIMENT_ENV, "")),
                        init.bucket_map if init is not None else (), environ_key(environ),
                        backend, push)
