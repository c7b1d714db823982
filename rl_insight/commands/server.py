"""`rl-insight server ...`: install, start (in the foreground or detached), status, stop,
the Prometheus config of one's own, the settings as they resolve."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rl_insight import config as config_mod
from rl_insight.commands.common import settings_of
from rl_insight.config import SERVER_URL_ENV

SECRET_KEYS = ("server.token", "grafana.admin_password", "alertmanager.slack_api_url",
               "alertmanager.smtp_auth_password", "prometheus.remote_write_password",
               "prometheus.remote_write_bearer_token")


def passthrough(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The flags a detached server must be started with to see the same settings, and
    the secrets among them as environment (a command line is visible to every user)."""
    out, env = [], {}
    if args.config:
        out += ["--config", str(Path(args.config).expanduser().resolve())]
    for item in args.set or []:
        key = item.partition("=")[0].strip()
        if key in SECRET_KEYS:
            env[config_mod.env_name(key)] = item.partition("=")[2]
            continue
        out += ["--set", item]
    if args.host:
        out += ["--host", args.host]
    if args.port is not None:
        out += ["--port", str(args.port)]
    return out, env


def cmd_install(args: argparse.Namespace) -> int:
    from rl_insight.server.services.installer import Installer, InstallError

    settings = settings_of(args)
    if args.sha256 and len(args.services or []) != 1:
        print("rl-insight: --sha256 is one archive's digest: name that one service, e.g. "
              "`rl-insight server install grafana --sha256 <digest>`", file=sys.stderr)
        return 2
    try:
        results = Installer(
            settings,
            local_archive=Path(args.local_archive).expanduser() if args.local_archive else None,
            install_dir=Path(args.install_dir).expanduser() if args.install_dir else None,
            force=args.force, progress=not args.no_progress,
            expected_sha256=args.sha256 or "",
        ).install(args.services)
    except InstallError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    failed = [r for r in results if r.status == "failed"]
    if failed:
        print(f"rl-insight: could not install {', '.join(r.service for r in failed)}; "
              "the rest is in place. Fix the cause above and run the same command again.",
              file=sys.stderr)
        return 1
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    from rl_insight.server import lifecycle

    settings = settings_of(args)
    try:
        if args.detach:
            flags, secret_env = passthrough(args)
            return lifecycle.start_detached(settings, flags, secret_env)
        logging.basicConfig(level=getattr(logging, settings.server.log_level.upper(),
                                          logging.INFO),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return lifecycle.run(settings, say=lambda s: print(s, flush=True))
    except lifecycle.StartError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr, flush=True)
        return 1


def cmd_status(args: argparse.Namespace) -> int:
    from rl_insight.server import lifecycle

    report, code = lifecycle.status(settings_of(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    w = max(len(svc["name"]) for svc in report["services"]) if report["services"] else 6
    if not report["running"]:
        print(f"{'server':<{w}} {report['message']} (start it with `rl-insight server start`)")
    else:
        s = report["server"]
        print(f"{'server':<{w}} ready  pid {s['pid']}  port {s['port']}  version "
              f"{s['version']}  up {s['uptime_s']:.0f}s  {report['clients']['server_url']}")
    for svc in report["services"]:
        cols = [f"{svc['name']:<{w}} {svc['state']}"]
        if svc.get("pid"):
            cols.append(f"pid {svc['pid']}")
        if svc.get("port"):
            cols.append(f"port {svc['port']}")
        if svc.get("version"):
            cols.append(f"version {svc['version']} ({svc.get('source', '')})")
        if report["running"] and svc["state"] not in ("not installed", "disabled"):
            cols.append(f"restarts {svc.get('restarts', 0)}")
        if svc["state"] == "not installed":
            cols.append("-> run `rl-insight server install`")
        elif svc.get("message"):
            cols.append(svc["message"])
        if svc.get("log") and not svc.get("ready"):
            cols.append(f"log {svc['log']}")
        print("  ".join(cols))
    return code


def cmd_stop(args: argparse.Namespace) -> int:
    from rl_insight.server import lifecycle

    return lifecycle.stop(settings_of(args))


def cmd_prometheus_config(args: argparse.Namespace) -> int:
    """The scrape configs for a Prometheus of one's own (no managed one needed)."""
    import os

    from rl_insight.server.services.prometheus import external_config_text

    url = args.server_url or os.environ.get(SERVER_URL_ENV)
    if not url:
        print("rl-insight: no server URL: pass --server-url http://<server-ip>:18080 or set "
              f"{SERVER_URL_ENV}", file=sys.stderr)
        return 2
    from rl_insight.common.secret import loopback_only

    host = url.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if not args.token_file and not loopback_only(host):
        print("rl-insight: note: a server beyond loopback wants its token for reads too; "
              "put RL_INSIGHT_TOKEN in a file only Prometheus reads and pass --token-file "
              "PATH", file=sys.stderr)
    print(external_config_text(url, args.refresh_interval, args.token_file), end="")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    print(yaml.safe_dump(config_mod.as_dict(settings_of(args)), sort_keys=False), end="")
    return 0
