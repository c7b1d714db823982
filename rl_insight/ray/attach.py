"""`rl_insight.ray.attach()`: the one call in a Ray entrypoint. It makes every worker
get the monitoring variables, starts or finds the hub, and says what it attached to."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from rl_insight.client import api
from rl_insight.client.configuration import ClientConfig, resolve
from rl_insight.client.core import (
    EXPERIMENT_ENV,
    PROJECT_ENV,
    SERVER_URL_ENV,
)
from rl_insight.client.handover import (  # noqa: F401 - their path since attach() came
    CLIENT_SETTING_ENVS,
    OTEL_HEADERS_ENV,
    OTEL_PROTOCOL_ENV,
    engine_exporter_env,
    env_vars,
    identity_env,
)
from rl_insight.client.transports import actor_config
from rl_insight.common.secret import TOKEN_ENV
from rl_insight.wire import paths
from rl_insight.wire.runconfig import MASK

log = logging.getLogger(__name__)

WORKER_SETUP_HOOK = "rl_insight.ray.hooks.worker_setup"


@dataclass
class Attachment:
    """What attach() found and did; ``ok`` is False when workers miss variables."""

    enabled: bool
    server_url: str = ""
    otlp_url: str = ""
    hub: Any = None
    namespace: str = ""
    env_vars: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.enabled and not self.missing


OTEL_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_RESOURCE_ENV = "OTEL_RESOURCE_ATTRIBUTES"


def framework_tracing_env(ours: Mapping[str, str], environ: Mapping[str, str] = os.environ
                          ) -> dict[str, str]:
    """For a framework that traces with OpenTelemetry itself (NeMo-RL's telemetry block):
    its exporter pointed at this server's ``/v1/traces`` over HTTP, with the token, and
    the run's names as resource attributes (``project``, ``experiment_name``), which the
    server files its spans under. The job's own values win; a resource attribute string
    it already has keeps its keys and gains the run's."""
    server = ours.get(SERVER_URL_ENV, "")
    if not server:
        return {}
    out = dict(engine_exporter_env(ours, environ))
    out[OTEL_ENDPOINT_ENV] = environ.get(OTEL_ENDPOINT_ENV) or \
        server.rstrip("/") + paths.TRACES
    pairs = [p for p in environ.get(OTEL_RESOURCE_ENV, "").split(",") if "=" in p]
    have = {p.split("=", 1)[0].strip() for p in pairs}
    for key, env in (("project", PROJECT_ENV), ("experiment_name", EXPERIMENT_ENV)):
        if key not in have and ours.get(env):
            pairs.append(f"{key}={quote(ours[env], safe='')}")
    if pairs:
        out[OTEL_RESOURCE_ENV] = ",".join(pairs)
    return out


def runtime_env(base: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] = os.environ,
                config: ClientConfig | None = None, *,
                from_client: bool = True) -> dict[str, Any]:
    """``base`` (a Ray runtime_env) with the monitoring variables added, from ``config``
    or (``from_client``) the configuration monitoring runs with here, ``attach``'s, else
    ``environ``; the job's own values win where both set one."""
    env = dict(base or {})
    merged = env_vars(environ, config or (api.configuration() if from_client else None))
    # the run this process named reaches its workers explicitly, also through the hook
    # (init(project, experiment_name) writes no variable of this process)
    merged.update({k: v for k, v in identity_env().items() if k not in merged})
    merged.update(env.get("env_vars") or {})
    if merged:
        env["env_vars"] = merged
    return env


def _submitted_job_env_vars() -> dict[str, str]:
    """The env_vars of `ray job submit --runtime-env`, seen from the entrypoint."""
    import json

    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return {}
    try:
        return dict((json.loads(raw).get("runtime_env") or {}).get("env_vars") or {})
    except (ValueError, AttributeError):
        return {}


def _missing(job_env: Mapping[str, Any], wanted: Mapping[str, str]) -> list[str]:
    have = (job_env or {}).get("env_vars") or {}
    return [k for k, v in wanted.items() if have.get(k) != v]


def attach(server_url: str | None = None, *, token: str | None = None,
           project: str | None = None, experiment_name: str | None = None,
           runtime_env_base: Mapping[str, Any] | None = None,
           hardware: bool = False, **ray_init_kwargs: Any) -> Attachment:
    """Call in the Ray entrypoint, before or after ``ray.init``. Never raises."""
    try:
        return _attach(server_url, token, project, experiment_name, runtime_env_base,
                       hardware, ray_init_kwargs)
    except Exception as exc:  # monitoring never stops training
        log.warning("rl-insight: attach failed (%s); training continues unmonitored", exc,
                    exc_info=True)
        return Attachment(False, message=f"attach failed: {exc}")


def _attach(server_url, token, project, experiment_name, base, hardware, init_kwargs):
    import ray

    # the arguments, then RL_INSIGHT_*, the config file, the token a server here made
    config = resolve(server_url=server_url, token=token, project=project,
                     experiment_name=experiment_name)
    active = api.configuration()  # init(config=...)'s endpoint, say, in no variable
    if not config.enabled and active is not None:
        config = dataclasses.replace(active, identity=config.identity or active.identity)
    server, otlp = config.server_url, config.otlp_url
    if not config.enabled:
        msg = (f"monitoring is off: set {SERVER_URL_ENV}=http://<server-ip>:18080 (or pass "
               f"server_url=), as `rl-insight server start` prints")
        log.warning("rl-insight: %s", msg)
        return Attachment(False, message=msg)
    api.enable(config)  # this process's client, from what was resolved here
    wanted = env_vars(config=config)
    missing: list[str] = []
    if not ray.is_initialized():
        env = runtime_env(base, config=config)
        job = _submitted_job_env_vars()
        if job:  # a submitted job: Ray merges envs and fails on a conflicting key
            mine = env.get("env_vars", {})
            env["env_vars"] = {k: v for k, v in mine.items() if k not in job}
            if not env["env_vars"]:
                env.pop("env_vars")
        ray.init(runtime_env=env, **init_kwargs)
    else:
        job_env = ray.get_runtime_context().runtime_env or {}
        missing = _missing(job_env, wanted)
        if missing:
            log.warning(
                "rl-insight: this Ray job's workers will not get %s. Fix one of: pass "
                "runtime_env=rl_insight.ray.runtime_env() to ray.init (or call attach() "
                "before ray.init); submit with `ray job submit --runtime-env "
                "\"$(rl-insight ray-env --path)\"`; or set RAY_RUNTIME_ENV_HOOK=%s on the "
                "cluster. Values: %s", ", ".join(missing), "rl_insight.ray.hooks."
                "runtime_env_hook", {k: (MASK if k == TOKEN_ENV else wanted[k])
                                     for k in missing})
    api.init(project, experiment_name) if project and experiment_name else api.init()
    settings = config.settings
    cfg = actor_config(settings.client, server, config.token, otlp)
    from rl_insight.ray import actors

    if project and experiment_name:  # named in the hub's repr, if this starts it
        cfg["run"] = f"{project}/{experiment_name}"
    hub = actors.get_hub(cfg)
    hub.configure.remote(cfg)
    if project and experiment_name:
        job_id = ray.get_runtime_context().get_job_id()
        ray.get(hub.register_run.remote(job_id, project, experiment_name), timeout=30)
    if hardware and server:
        from rl_insight.ray import hardware as hw

        hw_cfg = {**cfg, "hardware": dataclasses.asdict(settings.hardware)}
        _, nodes = hw.start(hw_cfg, cfg["namespace"])
        log.info("rl-insight: hardware on %d node(s): %s", len(nodes),
                 {s["node"]: sorted(s["exporters"]) for s in nodes.values()})
    elif hardware:
        log.warning("rl-insight: hardware collection needs the server (no server URL)")
    log.info("rl-insight: attached to %s (hub %s/%s)", server or otlp,
             cfg["namespace"], actors.HUB_NAME)
    return Attachment(True, server, otlp, hub, cfg["namespace"], wanted, missing,
                      "ok" if not missing else "workers miss " + ", ".join(missing))


def hub_stats(timeout: float = 10.0) -> dict | None:
    """The hub's counters (events received, applied, pushed, dropped; lanes; runs)."""
    import ray

    from rl_insight.ray import actors

    hub = actors.find_hub()
    return ray.get(hub.stats.remote(), timeout=timeout) if hub else None
