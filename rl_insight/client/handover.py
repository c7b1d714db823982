"""What a process started from this one needs to report into this process's run, handed
to it explicitly as variables the starter passes: Ray's runtime_env
(``rl_insight.ray.runtime_env()``, ``attach``, the operator's runtime-env hook), a
framework's command run with the site hook (rl_insight/integrations/kit.py), or a user's
own ``subprocess.Popen(cmd, env={**os.environ, **rl_insight.child_env()})``.

``init(project, experiment_name)`` used to write the run's name into this process's
environment for its children; it writes nothing now: a child started without these
variables inherits the environment this process was given, and a Ray worker the run of
its job from the hub (``init()`` with no arguments).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

from rl_insight import config as config_mod
from rl_insight.client.configuration import ClientConfig
from rl_insight.client.runtime import RUNTIME
from rl_insight.common.secret import TOKEN_ENV
from rl_insight.config import ENABLE_ENV, EXPERIMENT_ENV, OTLP_ENV, PROJECT_ENV, SERVER_URL_ENV

# RL_INSIGHT_CLIENT_*: the client's settings, as config.py names them
CLIENT_SETTING_ENVS = tuple(config_mod.env_name(k) for k in config_mod.all_keys()
                            if k.startswith("client."))
OTEL_HEADERS_ENV = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
OTEL_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"


def env_vars(environ: Mapping[str, str] = os.environ,
             config: ClientConfig | None = None) -> dict[str, str]:
    """The variables every worker needs: where to send, the token and the run from
    ``config`` (this process's resolved configuration) or else ``environ``, and the
    client settings set in ``environ`` (a worker reads its own environment, not the
    driver's: a tick set as short as the scrape interval must reach every process)."""
    out = {}
    if config is not None:
        ident = config.identity
        given = {SERVER_URL_ENV: config.server_url, OTLP_ENV: config.otlp_url,
                 TOKEN_ENV: config.token, PROJECT_ENV: ident.project if ident else "",
                 EXPERIMENT_ENV: ident.experiment_name if ident else ""}
        out.update({k: v for k, v in given.items() if v})
    else:
        names = (SERVER_URL_ENV, OTLP_ENV, TOKEN_ENV, PROJECT_ENV, EXPERIMENT_ENV)
        out.update({k: environ[k] for k in names if environ.get(k)})
    # and the monitor file and backend (upstream's push backend: a worker's sinks come
    # from the file RL_INSIGHT_CONFIG names, which must exist on the worker's node too)
    for name in (*CLIENT_SETTING_ENVS, config_mod.CONFIG_ENV, config_mod.BACKEND_ENV):
        if environ.get(name):
            out[name] = environ[name]
    if out.get(SERVER_URL_ENV) or out.get(OTLP_ENV):
        out[ENABLE_ENV] = environ.get(ENABLE_ENV) or "1"
    out.update(engine_exporter_env(out, environ))
    return out


def engine_exporter_env(ours: Mapping[str, str], environ: Mapping[str, str]
                        ) -> dict[str, str]:
    """The OpenTelemetry exporter's own variables, for the engines' request spans (vLLM's
    ``--otlp-traces-endpoint``, SGLang's ``--enable-trace``) to reach this server: OTLP
    over HTTP (vLLM's default is gRPC, which the server does not take), with the write
    token as its ``Authorization`` header. The job's own values win."""
    out = {}
    if ours.get(SERVER_URL_ENV):
        out[OTEL_PROTOCOL_ENV] = environ.get(OTEL_PROTOCOL_ENV) or "http/protobuf"
        if ours.get(TOKEN_ENV) and not environ.get(OTEL_HEADERS_ENV):
            # the OTel spec's form: comma-separated key=value, values URL-encoded
            out[OTEL_HEADERS_ENV] = f"Authorization=Bearer%20{quote(ours[TOKEN_ENV], safe='')}"
    if environ.get(OTEL_HEADERS_ENV):
        out[OTEL_HEADERS_ENV] = environ[OTEL_HEADERS_ENV]
    return out


def child_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables a process started from this one needs to report into this one's
    run, as monitoring runs here: where it sends, the token, the run this process named
    (``init(project, experiment_name)``) and the client settings ``environ`` sets; {}
    while monitoring is off here. Merge them over the child's environment (they win over
    what this process was given: an ``init`` argument wins over a variable). Never
    raises."""
    try:
        config = RUNTIME.configuration()
        return env_vars(environ, config) if config is not None else {}
    except Exception:
        RUNTIME.failed("child_env")
        return {}


def identity_env() -> dict[str, str]:
    """The run this process named (``init(project, experiment_name)``) as the two
    variables a child reads it from; {} when it named none."""
    c = RUNTIME.client
    ident = c.identity if c is not None and c.owner else None
    if ident is None:
        return {}
    return {PROJECT_ENV: ident.project, EXPERIMENT_ENV: ident.experiment_name}
