"""What every CLI command shares: the settings its flags name, the running server it
talks to, an API call's answer printed (or its error said, with what to do)."""

from __future__ import annotations

import argparse
import json
import sys

from rl_insight import config as config_mod
from rl_insight.common import secret
from rl_insight.config import SERVER_URL_ENV
from rl_insight.wire import paths


def settings_of(args: argparse.Namespace) -> config_mod.Settings:
    """The settings a command's ``--config``, ``--set``, ``--host`` and ``--port`` name."""
    overrides = list(args.set or [])
    if getattr(args, "host", None):
        overrides.append(f"host={args.host}")
    if getattr(args, "port", None) is not None:
        overrides.append(f"server.port={args.port}")
    return config_mod.load(args.config, overrides)


def server_client(args: argparse.Namespace):
    """The running server named by --server-url, RL_INSIGHT_SERVER_URL, or the run file."""
    import os

    from rl_insight.commands.api_client import ServerClient
    from rl_insight.common import netaddr
    from rl_insight.server import lifecycle

    settings = settings_of(args)
    url = getattr(args, "server_url", None) or os.environ.get(SERVER_URL_ENV)
    if not url:
        info = lifecycle.running_server(settings)
        url = info["url"] if info else netaddr.http_url(
            netaddr.local_host(settings.bind_host("server")), settings.server.port)
    return ServerClient(url, secret.client_token(settings))


def api_call(call) -> int:
    """Run one API call: print its answer (exit 0) or its error, which says what to do
    (exit 1)."""
    from rl_insight.commands.api_client import ApiError

    try:
        result = call()
    except ApiError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    if result is not None:
        print(result if isinstance(result, str) else json.dumps(result, indent=2))
    return 0


def mark_finished(client, project: str, experiment: str) -> None:
    """An imported run marked finished, so its last step is final now (said, not
    raised, when the server refuses: the step comes within anatomy.max_wait_s)."""
    from rl_insight.commands.api_client import ApiError

    try:
        client.post(paths.FINISH, {"project": project,
                                                   "experiment_name": experiment})
    except ApiError as exc:
        print(f"rl-insight: marking the run finished failed ({exc}); its last step "
              "is reported within anatomy.max_wait_s", file=sys.stderr)
