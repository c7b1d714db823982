"""`init(config=...)`: the framework's ``trainer.rl_insight`` mapping, passed unchanged.

Two kinds of keys are honoured. Upstream's nested keys, which existing configs carry:
``server.url`` (the environment variable wins: rl_insight/client/configuration.py),
``server.namespace``, ``server.backend`` (``ray``, ``push`` or ``local``),
``prometheus.metrics_report_port``, platform mode's ``otel.exporter.endpoint``
(``RL_INSIGHT_OTLP_ENDPOINT`` wins) and the push backend's ``push`` section
(rl_insight/client/push/shape.py). And this package's own
client settings, flat (``flush_interval_s: 1.0``) or under ``client:``. Anything else is
ignored with one warning that names it. The config file's monitor keys
(``rl_insight.config.monitor_layer``) are read the same way, under these.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from rl_insight import config as config_mod
from rl_insight.wire.naming import PREFIX

log = logging.getLogger(__name__)

# upstream's defaults (rl-insight 0.3.0, rl_insight/utils/constants.py, MonitorDefaults
# and MonitorBackend): the metric namespace; its client backends, `ray` and, after 0.3.0,
# `push` (verl-project/rl-insight rl_insight/client/__init__.py at a0c0a451), and `local`,
# the value its server config holds (rl_insight/config/config.yaml): the server runs
# the services on its host, so a training process sends as with `ray`
UPSTREAM_NAMESPACE = PREFIX.rstrip("_")
UPSTREAM_BACKENDS = ("ray", "push", "local")


def as_mapping(config: Any) -> dict[str, Any]:
    """A plain dict from a Mapping or an OmegaConf DictConfig (without importing it)."""
    if config is not None and not isinstance(config, Mapping):
        try:
            from omegaconf import OmegaConf

            return dict(OmegaConf.to_container(config, resolve=True) or {})
        except Exception:
            return {}
    out = {}
    for k, v in dict(config or {}).items():
        out[str(k)] = as_mapping(v) if isinstance(v, Mapping) or _is_dictconfig(v) else v
    return out


UPSTREAM_SECTIONS = ("server", "prometheus", "otel")
PUSH_SECTION = "push"


def merged(under: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``under`` as upstream layers its monitor configuration (OmegaConf's
    merge): mappings merged key by key, anything else (a list of sinks) replaced."""
    out = dict(under)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, Mapping) and \
            isinstance(out.get(k), Mapping) else v
    return out


def reads_as_options(config: Any) -> bool:
    """A mapping every key of which is an ``init(config=...)`` key (upstream's sections,
    ``client``, a client setting's name): the options, not a run's configuration, which
    ``Tracking(project, experiment_name, config)`` then takes as verl's and wandb's
    ``config`` (rl_insight/client/runconfig.py)."""
    if not isinstance(config, Mapping) and not _is_dictconfig(config):
        return False
    known = {f.name for f in dataclasses.fields(config_mod.ClientSettings)}
    known.update(UPSTREAM_SECTIONS, ("client", PUSH_SECTION))
    try:
        return all(str(k) in known for k in config.keys())
    except Exception:
        return False


def _is_dictconfig(value: Any) -> bool:
    return type(value).__name__ == "DictConfig"


def _nested(config: Mapping[str, Any], *path: str) -> str:
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return str(node).strip() if node not in (None, "") else ""


def server_url_from(config: Mapping[str, Any]) -> str:
    """``server.url`` of an init config; the caller applies it only when the environment
    sets none (upstream: the environment variable wins)."""
    return _nested(config, "server", "url")


def otlp_endpoint_from(config: Mapping[str, Any]) -> str:
    """``otel.exporter.endpoint`` of an init config: platform mode's trace endpoint
    (upstream's platform guide; RL_INSIGHT_OTLP_ENDPOINT wins)."""
    return _nested(config, "otel", "exporter", "endpoint")


def parse_buckets(spec: Any) -> tuple[float, ...] | None:
    """Histogram bounds from "0.1,1,10" or a list; None for the defaults."""
    if not spec:
        return None
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    bounds = sorted({float(x) for x in items if str(x).strip()})
    return tuple(b for b in bounds if b != float("inf")) or None


@dataclasses.dataclass(frozen=True)
class InitConfig:
    """What an ``init(config=...)`` mapping says, read once and checked: the client
    settings it sets (dotted keys, values converted), per-metric histogram bounds, the
    keys it has that mean nothing here."""

    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bucket_map: tuple[tuple[str, tuple[float, ...] | None], ...] = ()
    unknown: tuple[str, ...] = ()
    backend: str = ""  # server.backend as given ("" when not)
    push: Mapping[str, Any] | None = None  # the push section as given


def _upstream(section: str, key: str, value: Any, out: dict[str, Any]) -> bool:
    """Read one upstream key into ``out``; False when it is not one."""
    if (section, key) in (("server", "url"), ("otel", "exporter.endpoint")):
        return True  # resolved with the environment (client/configuration.py)
    if section == "otel" and key == "otel_port":
        return True  # upstream's older client: spans go to the server's own port here
    if section == "server" and key == "namespace":
        if value and str(value) != UPSTREAM_NAMESPACE:
            log.warning("rl-insight: init(config): server.namespace=%r is not used: "
                        "metrics are named %s* and spans carry service.name %s, which "
                        "the dashboards query", value, PREFIX, UPSTREAM_NAMESPACE)
        return True
    if section == "server" and key == "backend":
        if value and str(value).strip() not in UPSTREAM_BACKENDS:
            log.warning("rl-insight: server.backend=%r is unknown; write ray (the hub "
                        "inside Ray, the server directly outside), push (your sinks: "
                        "push.sinks, docs/client.md) or local; using 'ray'", value)
        return True
    if section == "prometheus" and key == "metrics_report_port":
        _take("metrics_port", value, out)
        return True
    return False


def _dotted(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        if isinstance(v, Mapping):
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _take(name: str, value: Any, out: dict[str, Any]) -> None:
    """One client setting, checked as the configuration checks it; a bad value is left
    out with a warning (the other sources' value holds)."""
    key = f"client.{name}"
    try:
        out[key] = config_mod.coerce_key(key, value)
    except config_mod.ConfigError as exc:
        log.warning("rl-insight: init(config): %s; ignored", exc)


def read_init_config(mapping: Any) -> InitConfig:
    """Read an ``init(config=...)`` mapping (a Mapping or an OmegaConf DictConfig); warns
    once of the keys it ignores. Never raises."""
    known = {f.name for f in dataclasses.fields(config_mod.ClientSettings)}
    settings: dict[str, Any] = {}
    buckets: list[tuple[str, tuple[float, ...] | None]] = []
    unknown: list[str] = []
    mapping = as_mapping(mapping)
    push = mapping.get(PUSH_SECTION)
    for key, value in mapping.items():
        if key == PUSH_SECTION and isinstance(value, Mapping):
            continue  # read as a whole (rl_insight/client/push/shape.py)
        if key in UPSTREAM_SECTIONS and isinstance(value, Mapping):
            for sub, v in _dotted(value).items():
                if not _upstream(key, sub, v, settings):
                    unknown.append(f"{key}.{sub}")
            continue
        items = value.items() if key == "client" and isinstance(value, Mapping) \
            else [(key, value)]
        for name, v in items:
            if name not in known:
                unknown.append(f"client.{name}" if key == "client" else str(name))
            elif name == "histogram_buckets":
                _buckets(v, settings, buckets)
            else:
                _take(name, v, settings)
    if unknown:
        log.warning("rl-insight: init(config) ignores unknown keys: %s (known: server.url, "
                    "server.namespace, server.backend, prometheus.metrics_report_port, "
                    "otel.exporter.endpoint, push, %s)",
                    ", ".join(sorted(unknown)), ", ".join(sorted(known)))
    backend = _nested(mapping, "server", "backend")
    return InitConfig(settings, tuple(buckets), tuple(unknown), backend,
                      push if isinstance(push, Mapping) else None)


def _buckets(value: Any, settings: dict[str, Any], per_metric: list) -> None:
    """A list (or "0.1,1,10"): the default bounds; a mapping: bounds per metric name."""
    try:
        if isinstance(value, Mapping):
            per_metric.extend((str(k), parse_buckets(v)) for k, v in value.items())
        else:
            bounds = parse_buckets(value)
            settings["client.histogram_buckets"] = ",".join(map(str, bounds or ()))
    except (TypeError, ValueError) as exc:
        log.warning("rl-insight: init(config): histogram_buckets %r: %s; keeping the "
                    "defaults", value, exc)
