"""How settings are read: the defaults, then a YAML file (ours, or upstream rl-insight's
server config read as ours), then layers a caller gives (a training process's
``init(config=...)``), then the environment, then ``--set`` flags; each key checked
against its type, range and choices."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rl_insight.config.settings import (
    CONFIG_ENV,
    ConfigError,
    Settings,
)
from rl_insight.wire.runconfig import MASK

log = logging.getLogger(__name__)


# Documented short environment names; everything else is RL_INSIGHT_<SECTION>_<FIELD>.
_ENV_ALIASES = {
    "RL_INSIGHT_HOME": "home",
    "RL_INSIGHT_HOST": "host",
    "RL_INSIGHT_TOKEN": "server.token",
}


def _fields(obj: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj)}


def all_keys(settings: Settings | None = None) -> list[str]:
    """Every dotted setting name, e.g. ``prometheus.port``."""
    settings = settings or Settings()
    keys = []
    for name, f in _fields(settings).items():
        value = getattr(settings, name)
        if dataclasses.is_dataclass(value):
            keys += [f"{name}.{sub}" for sub in _fields(value)]
        else:
            keys.append(f.name)
    return keys


def env_name(key: str) -> str:
    """The environment variable that sets a dotted key."""
    for env, aliased in _ENV_ALIASES.items():
        if aliased == key:
            return env
    return "RL_INSIGHT_" + key.replace(".", "_").upper()


# Lower bounds of numeric settings whose zero or negative value would make a loop spin
# or a buffer useless (a batch of 0 wakes the sender millions of times a second)
MINIMUMS: dict[str, float] = {
    "client.buffer_max_events": 1, "client.batch_size": 1, "client.flush_interval_s": 0.01,
    "client.exit_flush_timeout_s": 0, "client.hub_push_interval_s": 0.05,
    "client.max_series_per_run": 1, "client.lane_exit_grace_s": 0,
    "client.forget_after_s": 0,
    "client.lane_flush_interval_s": 0.01, "client.lane_batch_size": 1,
    "client.lane_max_pending_spans": 1, "client.registration_retry_max_s": 0.1,
    "client.resend_max_events": 0, "server.max_intake_inflight": 1,
    "anatomy.settle_s": 0, "anatomy.max_wait_s": 0, "anatomy.keep_steps": 1,
    "anatomy.max_runs": 1, "anatomy.median_steps": 1, "anatomy.expose_s": 0,
    "anatomy.gpus_per_replica": 0, "anatomy.gpus_per_rank": 0,
    "anatomy.max_requests_per_run": 1, "traces.text_max_bytes": 0,
    "alerts.stall_factor": 1, "alerts.stall_min_s": 1, "alerts.state_stuck_factor": 1,
    "alerts.state_stuck_min_s": 1, "alerts.kv_cache_usage_max": 0.01,
    "alerts.preemptions_per_s_max": 0,
}


# settings that take one of a few words
CHOICES: dict[str, tuple[str, ...]] = {"traces.text_policy": ("off", "redacted", "full"),
                                     "client.profile_method": ("py-spy", "self")}


def _check_range(key: str, value: float) -> float:
    low = MINIMUMS.get(key)
    if low is not None and value < low:
        raise ConfigError(f"{key}: must be at least {low:g}, got {value:g}")
    return value


def _coerce(key: str, current: Any, raw: Any) -> Any:
    if isinstance(current, bool):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{key}: expected true or false, got {raw!r}")
    if isinstance(current, int):
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a whole number, got {raw!r}") from None
        if key.endswith("port") and not 0 <= value <= 65535:
            raise ConfigError(f"{key}: a port is 0..65535, got {value}")
        return _check_range(key, value)
    if isinstance(current, float):
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
        return _check_range(key, value)
    if isinstance(raw, (dict, list)):
        raise ConfigError(f"{key}: expected a single value, got {type(raw).__name__}")
    if key in CHOICES and str(raw).strip() not in CHOICES[key]:
        raise ConfigError(f"{key}: one of {', '.join(CHOICES[key])}, got {raw!r}")
    return str(raw).strip() if key in CHOICES else str(raw)


def coerce_key(key: str, raw: Any) -> Any:
    """``raw`` as the dotted setting ``key`` takes it (its type, range and choices), or
    ConfigError saying what was wrong: a caller that checks values one by one (init's
    config) keeps the good ones and warns of the rest."""
    section, _, name = key.rpartition(".")
    target: Any = Settings()
    for part in section.split(".") if section else ():
        target = getattr(target, part, None) if dataclasses.is_dataclass(target) else None
    if not dataclasses.is_dataclass(target) or name not in _fields(target) or \
            dataclasses.is_dataclass(getattr(target, name)):
        raise ConfigError(f"unknown setting {key!r}")
    return _coerce(key, getattr(target, name), raw)


def _checked(key: str, raw: Any) -> Any:
    """``coerce_key``, an unknown key's error listing the known ones (a typo in a file
    or a flag is found by reading them)."""
    try:
        return coerce_key(key, raw)
    except ConfigError as exc:
        if str(exc).startswith("unknown setting"):
            raise ConfigError(f"{exc}; known: {', '.join(all_keys())}") from None
        raise


def build(values: Mapping[str, Any], base: Settings | None = None) -> Settings:
    """One Settings: ``base`` (the defaults) with the dotted keys of ``values``, each
    checked and converted to its field's type. Settings are frozen: a changed value is
    a new object, so what one part of the program holds never changes under it."""
    base = Settings() if base is None else base
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key, raw in values.items():
        value = _checked(key, raw)
        section, _, name = key.rpartition(".")
        if section:
            sections.setdefault(section, {})[name] = value
        else:
            top[key] = value
    for section, changed in sections.items():
        top[section] = dataclasses.replace(getattr(base, section), **changed)
    return dataclasses.replace(base, **top) if top else base


def with_values(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """``settings`` with the dotted keys of ``values`` changed (a new object; the one
    given stays as it was)."""
    return build(values, settings)


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


# Upstream rl-insight 0.3.0's server config (its rl_insight/config/config.yaml): each
# key is read as the setting here that means the same, or ignored with a warning saying
# why; a value this server cannot honour is refused with what to write instead.
_UPSTREAM_SAME = {
    "server.enable": None, "server.backend": None, "service_root": None,
    "otel.otel_port": None,
    "prometheus.binary_path": "prometheus.binary", "prometheus.enable": "prometheus.enabled",
    "prometheus.install_version": "prometheus.version",
    "prometheus.prometheus_port": "prometheus.port",
    "prometheus.retention_time": "prometheus.retention",
    "tempo.binary_path": "tempo.binary", "tempo.enable": "tempo.enabled",
    "tempo.install_version": "tempo.version", "tempo.query_port": "tempo.port",
    "tempo.retention_time": "tempo.block_retention",
    "grafana.binary_path": "grafana.binary", "grafana.enable": "grafana.enabled",
    "grafana.install_version": "grafana.version",
    "prometheus.config_file": None, "tempo.config_file": None, "grafana.config_file": None,
    "grafana.provisioning_dir": None,
}
_UPSTREAM_WHY = {
    "server.enable": "this server is enabled by starting it",
    "server.backend": "this server runs its services itself, as upstream's `local`",
    "otel.otel_port": "spans come in on the server's own port (server.port) here",
    "service_root": "services live under $RL_INSIGHT_HOME here",
    "config_file": "this server writes its services' configs itself (under "
                   "$RL_INSIGHT_HOME/generated)",
    "provisioning_dir": "this server provisions Grafana itself",
}


# Upstream rl-insight's monitor configuration after 0.3.0 (its client's file named by
# RL_INSIGHT_CONFIG, layered under init(config): verl-project/rl-insight
# rl_insight/utils/monitor_config_loader.py at 99ae298f): keys a training process reads
# (monitor_layer, rl_insight/client/configuration.py), no setting of ours, so one file
# serves the server and the training processes alike
MONITOR_KEYS = ("server.url", "server.namespace", "otel.exporter",
                "prometheus.metrics_report_port", "push.sinks", "push.rollout",
                "push.metric_prefix", "push.trace_prefix")
CLIENT_BACKENDS = ("ray", "push")  # upstream's client backends (`local` is its server's)


def is_monitor_key(key: str, value: Any = None) -> bool:
    """Whether a dotted key of a config file is the training process's (upstream's
    monitor configuration) rather than a setting."""
    if key == "server.backend":
        return str(value).strip() in CLIENT_BACKENDS
    return any(key == k or key.startswith(k + ".") for k in MONITOR_KEYS)


def monitor_layer(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The monitor keys of the config file ``load`` reads (``$RL_INSIGHT_CONFIG``, else
    ``$RL_INSIGHT_HOME/config.yaml``), nested as written: the lowest layer of a training
    process's ``init(config)`` keys. {} when there is none or it cannot be read (``load``
    says why)."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("RL_INSIGHT_HOME") or Settings().home).expanduser()
    path = Path(environ.get(CONFIG_ENV) or home / "config.yaml").expanduser()
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, value in _flatten(data).items():
        if key == "server.backend" or is_monitor_key(key, value):
            node = out
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
    return out


def upstream_setting(key: str, value: Any) -> tuple[str | None, Any, str]:
    """(this project's key or None, the value, a note) for a key of upstream's server
    config; ConfigError for a value that cannot be honoured here."""
    target = _UPSTREAM_SAME.get(key, key)
    if key == "server.backend" and str(value) != "local":
        raise ConfigError(f"server.backend={value!r} (upstream rl-insight): write `local` "
                          "(upstream's server config: this server runs Prometheus, Tempo "
                          "and Grafana itself), or `ray` or `push` (a training process's "
                          "client backend, docs/client.md), or remove the key")
    if key == "server.enable" and str(value).lower() in ("false", "0", "no", "off"):
        raise ConfigError("server.enable=false (upstream rl-insight): there is nothing to "
                          "start then; remove the key and do not run `rl-insight server "
                          "start`")
    if key == "tempo.retention_time":  # upstream writes days (30d); Tempo takes hours
        m = re.fullmatch(r"\s*(\d+)\s*d\s*", str(value))
        value = f"{int(m.group(1)) * 24}h" if m else value
    if isinstance(value, str) and "${" in value:  # upstream's own interpolated defaults
        return None, value, "an upstream default path; this server chooses its own"
    if target is None:
        return None, value, _UPSTREAM_WHY.get(key, _UPSTREAM_WHY.get(key.rsplit(".", 1)[-1],
                                                                     "not needed here"))
    if key.endswith("binary_path") and not value:
        return None, value, "empty, so found as usual"
    return target, value, ""


def file_layer(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML file's settings as dotted keys, each checked: unknown keys are an error so
    typos do not pass silently; upstream's server keys read as ours, or said ignored."""
    p = Path(path).expanduser()
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist; check --config") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"config file {p} must hold a mapping of sections")
    notes, out = [], {}
    for key, value in _flatten(data).items():
        if is_monitor_key(key, value):  # a training process's (monitor_layer)
            continue
        try:
            if key in _UPSTREAM_SAME or (isinstance(value, str) and "${service_root}" in value):
                theirs = key
                key, value, note = upstream_setting(key, value)
                notes.append(f"{theirs} {'read as ' + key if key else 'ignored: ' + note}")
                if key is None:
                    continue
            out[key] = _checked(key, value)
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc}") from None
    if notes:
        log.warning("%s is upstream rl-insight's server config; %s", p, "; ".join(notes))
    return out


def env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings the environment sets, as dotted keys: the full RL_INSIGHT_* names,
    the documented short aliases over them."""
    out: dict[str, Any] = {}
    for key in all_keys():
        full = "RL_INSIGHT_" + key.replace(".", "_").upper()
        for name in dict.fromkeys([full, env_name(key)]):  # the short alias wins
            if name in environ:
                out[key] = _checked(key, environ[name])
    return out


def overrides_layer(overrides: Sequence[str]) -> dict[str, Any]:
    """``section.field=value`` strings from the command line, as dotted keys."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected section.field=value")
        out[key.strip()] = _checked(key.strip(), value)
    return out


def load(
    config_file: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    layers: Sequence[Mapping[str, Any]] = (),
) -> Settings:
    """Defaults, then a file (explicit, $RL_INSIGHT_CONFIG, or $HOME/config.yaml), then
    ``layers`` (dotted key -> value: a training process's ``init(config=...)``), then the
    environment, then flags: each layer's keys over the one before, built once into one
    frozen Settings."""
    environ = os.environ if environ is None else environ
    # The home decides where the default config file lives, so read it first.
    home = Settings(home=environ.get("RL_INSIGHT_HOME", Settings().home))
    path = config_file or environ.get(CONFIG_ENV)
    if not path and (home.home_path / "config.yaml").is_file():
        path = home.home_path / "config.yaml"
    values: dict[str, Any] = {"home": home.home}
    if path:
        values.update(file_layer(path))
    for layer in layers:
        values.update({key: _checked(key, value) for key, value in layer.items()})
    values.update(env_layer(environ))
    values.update(overrides_layer(overrides))
    return build(values)


def as_dict(settings: Settings, *, redact: bool = True) -> dict[str, Any]:
    """Plain data for display; secrets are masked unless asked otherwise."""
    data = dataclasses.asdict(settings)
    if redact:
        if data["server"]["token"]:
            data["server"]["token"] = MASK
        if data["grafana"]["admin_password"]:
            data["grafana"]["admin_password"] = MASK
        for key in ("slack_api_url", "smtp_auth_password"):
            if data["alertmanager"][key]:
                data["alertmanager"][key] = MASK
        for key in ("remote_write_password", "remote_write_bearer_token"):
            if data["prometheus"][key]:
                data["prometheus"][key] = MASK
    return data
