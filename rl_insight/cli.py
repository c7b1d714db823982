"""`rl-insight`: parse the command line, call the module that does the work, print."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rl_insight import config as config_mod
from rl_insight import secret
from rl_insight.config import EXPERIMENT_ENV, PROJECT_ENV, SERVER_URL_ENV

USAGE = """\
RL-Insight: monitoring for reinforcement-learning training of LLMs on Ray.

One server on a monitoring host collects the trainer's scalars, every rollout
replica's engine metrics, TransferQueue, a timeline of replica and rank states and
the nodes' hardware, and shows them in Grafana over Prometheus and Tempo.

  rl-insight server install      fetch Prometheus, Tempo, Grafana (once)
  rl-insight server start        start the server and its services; prints the
                                 lines to export on the training cluster
  rl-insight doctor              what is wrong between a node and the dashboards"""
EPILOG = """\
In training: set RL_INSIGHT_SERVER_URL (and RL_INSIGHT_TOKEN when the server prints
one) on every node, then `import rl_insight; rl_insight.init(project, experiment)`,
or run verl with VERL_RL_INSIGHT_ENABLE=1. `rl-insight COMMAND --help` for more."""


def _settings(args: argparse.Namespace) -> config_mod.Settings:
    overrides = list(args.set or [])
    if getattr(args, "host", None):
        overrides.append(f"host={args.host}")
    if getattr(args, "port", None) is not None:
        overrides.append(f"server.port={args.port}")
    return config_mod.load(args.config, overrides)


SECRET_KEYS = ("server.token", "grafana.admin_password", "alertmanager.slack_api_url",
               "alertmanager.smtp_auth_password", "prometheus.remote_write_password",
               "prometheus.remote_write_bearer_token")


def _passthrough(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
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

    settings = _settings(args)
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

    settings = _settings(args)
    try:
        if args.detach:
            flags, secret_env = _passthrough(args)
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

    report, code = lifecycle.status(_settings(args))
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

    return lifecycle.stop(_settings(args))


def _client(args: argparse.Namespace):
    """The running server named by --server-url, RL_INSIGHT_SERVER_URL, or the run file."""
    import os

    from rl_insight import netaddr
    from rl_insight.api_client import ServerClient
    from rl_insight.server import lifecycle

    settings = _settings(args)
    url = getattr(args, "server_url", None) or os.environ.get(SERVER_URL_ENV)
    if not url:
        info = lifecycle.running_server(settings)
        url = info["url"] if info else netaddr.http_url(
            netaddr.local_host(settings.bind_host("server")), settings.server.port)
    return ServerClient(url, secret.client_token(settings))


def _api(call) -> int:
    from rl_insight.api_client import ApiError

    try:
        result = call()
    except ApiError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    if result is not None:
        print(result if isinstance(result, str) else json.dumps(result, indent=2))
    return 0


def cmd_targets_add(args: argparse.Namespace) -> int:
    """Register the targets of a YAML file: one registration body, a list of them, or
    upstream rl-insight's form (``jobs:`` holding the list)."""
    import yaml

    from rl_insight.server.ingest.bodies import parse_many
    from rl_insight.server.ingest.targets import TargetError

    try:
        data = yaml.safe_load(Path(args.file).read_text())
    except (OSError, yaml.YAMLError) as exc:
        print(f"rl-insight: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        data = data["jobs"]  # upstream rl-insight's targets file: jobs: [{job_name, ...}]
    bodies = data if isinstance(data, list) else [data]
    try:
        parse_many(bodies)  # validate all before sending any
    except TargetError as exc:
        print(f"rl-insight: {args.file}: {exc}", file=sys.stderr)
        return 2
    client = _client(args)

    def send() -> dict:
        done = [client.post("/api/v1/prometheus/targets", b) for b in bodies]
        return {"registered": sum(d["registered"] for d in done),
                "changed": sum(d["changed"] for d in done)}
    return _api(send)


def cmd_targets_list(args: argparse.Namespace) -> int:
    client = _client(args)
    return _api(lambda: client.get("/api/v1/prometheus/targets", project=args.project,
                                   experiment_name=args.experiment))


def cmd_experiments(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.action_exp == "list":
        def table() -> str:
            rows = client.get("/api/v1/experiments")["experiments"]
            lines = [f"{'PROJECT':<20} {'EXPERIMENT':<28} {'STATUS':<9} TARGETS GROUPS LANES"]
            for e in rows:
                lines.append(f"{e['project']:<20} {e['experiment_name']:<28} "
                             f"{e['status']:<9} {e['targets']:>7} {e['push_groups']:>6} "
                             f"{e['lanes']:>5}")
            return "\n".join(lines) if rows else "no experiments yet"
        return _api(table)
    if not args.project or not args.experiment:
        print("rl-insight: give --project and --experiment", file=sys.stderr)
        return 2
    if args.action_exp == "show":
        return _api(lambda: client.get("/api/v1/experiments/targets", project=args.project,
                                       experiment_name=args.experiment))
    body = {"project": args.project, "experiment_name": args.experiment}
    return _api(lambda: client.post(f"/api/v1/experiments/{args.action_exp}", body))


def cmd_ray_env(args: argparse.Namespace) -> int:
    """A runtime-env YAML with the monitoring variables written in."""
    import os

    import yaml

    from rl_insight import resources
    from rl_insight.ray.attach import WORKER_SETUP_HOOK, env_vars

    if args.path:  # the shipped file that reads the values from each node's environment
        print(resources.runtime_env_file())
        return 0
    environ = dict(os.environ)
    token = secret.client_token(config_mod.load())  # exported, configured, or made here
    if token:
        environ[secret.TOKEN_ENV] = token
    if args.server_url:
        environ[SERVER_URL_ENV] = args.server_url
    if args.project and args.experiment:
        environ[PROJECT_ENV], environ[EXPERIMENT_ENV] = args.project, args.experiment
    wanted = env_vars(environ)
    if args.otel:
        from rl_insight.ray.attach import framework_tracing_env

        wanted.update(framework_tracing_env(wanted, environ))
    if not wanted:
        print("rl-insight: no server URL: pass --server-url http://<server-ip>:18080 or set "
              f"{SERVER_URL_ENV}", file=sys.stderr)
        return 2
    doc = {"env_vars": wanted, "worker_process_setup_hook": WORKER_SETUP_HOOK}
    print("# ray job submit --runtime-env THIS_FILE -- python train.py")
    print(yaml.safe_dump(doc, sort_keys=False), end="")
    return 0


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d`` or plain seconds."""
    seconds = config_mod.duration_seconds(text)
    if seconds is None:
        raise config_mod.ConfigError(f"--since {text!r}: expected a duration like 15m or 2h")
    return seconds


def cmd_traces_export(args: argparse.Namespace) -> int:
    """The run's state timeline as a Chrome trace / Perfetto file."""
    from rl_insight.api_client import ApiError
    from rl_insight.export import timeline

    since = parse_duration(args.since) if args.since else 0.0
    client = _client(args)
    try:
        data = client.get("/api/v1/traces/recent", project=args.project,
                          experiment_name=args.experiment, since_s=since)
    except ApiError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    spans = data["spans"]
    if not spans:
        print(f"rl-insight: no state spans of {args.project}/{args.experiment} at the server"
              " (check the names with `rl-insight server experiments list`, and that the "
              "run reports spans)", file=sys.stderr)
        return 1
    trace = timeline.chrome_trace(spans, f"{args.project}/{args.experiment}",
                                  data.get("requests", ()))
    timeline.write(trace, args.output)
    lanes = len({s["lane"] for s in spans})
    print(f"wrote {len(spans)} states on {lanes} lanes to {args.output} ({args.format}: "
          "open it in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """The per-step table of a run's step anatomy (table, CSV or JSON)."""
    from rl_insight.export import report

    if args.last < 0:
        print("rl-insight: --last takes a number of steps (0: all)", file=sys.stderr)
        return 2
    client = _client(args)
    if args.changes:
        from rl_insight.anatomy import changes

        def what_changed() -> str:
            got = client.get("/api/v1/anatomy/changes", project=args.project,
                             experiment_name=args.experiment)
            return json.dumps(got, indent=2) if args.format == "json" else \
                changes.render(got).rstrip("\n")
        return _api(what_changed)
    if args.step is not None:
        from rl_insight.anatomy import explain

        def why() -> str:
            got = client.get("/api/v1/anatomy/explain", project=args.project,
                             experiment_name=args.experiment, step=args.step,
                             baseline=args.baseline)
            return json.dumps(got, indent=2) if args.format == "json" else \
                explain.render(got)
        return _api(why)

    def rows() -> str:
        got = client.get("/api/v1/anatomy", project=args.project,
                         experiment_name=args.experiment, last=args.last)["steps"]
        if not got and args.format == "table":
            return (f"no finished step of {args.project}/{args.experiment} yet: a step is "
                    "reported a few seconds after the trainer logs it")
        return report.render(got, args.format).rstrip("\n")
    return _api(rows)


def cmd_profile(args: argparse.Namespace) -> int:
    """Profile one trainer rank of a run (its node's lane actor runs py-spy)."""
    from rl_insight.commands import profile

    return profile.run(_client(args), args.project, args.experiment, args.rank,
                       args.seconds, args.wait, args.output)


def cmd_doctor(args: argparse.Namespace) -> int:
    from rl_insight import doctor

    settings = _settings(args)
    url = args.server_url or None
    if url is None and not __import__("os").environ.get(SERVER_URL_ENV):
        url = _client(args).url  # the server running here, if any
    import contextlib
    import sys

    # Ray prints its own warnings (worker start-up, raylet) on stdout from background
    # threads: they go to stderr while the checks run, and Ray is stopped before the report
    with contextlib.redirect_stdout(sys.stderr):
        checks = doctor.run(url, args.project, args.experiment,
                            token=secret.client_token(settings) or None, ray_probe=not args.no_ray)
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
    if args.json:
        print(json.dumps(doctor.as_json(checks), indent=2))
    else:
        print(doctor.render(checks))
    return 1 if any(c.status == doctor.PROBLEM for c in checks) else 0


def cmd_alerts(args: argparse.Namespace) -> int:
    """The alerts pending and firing; exit 1 when some fire, 2 when it cannot tell."""
    from rl_insight.api_client import ApiError
    from rl_insight.server.analyses.alerts import run_of

    try:
        got = _client(args).get("/api/v1/alerts", project=args.project,
                                experiment_name=args.experiment)
    except ApiError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(got, indent=2))
    else:
        for a in got["alerts"]:
            print(f"{a['state'].upper():<8} {a['name']:<30} {run_of(a['labels']):<36} "
                  f"{a['annotations'].get('summary', '')}")
        if not got["alerts"] and not got.get("error"):
            print("none firing")
        for key in ("prometheus", "alertmanager"):
            if got.get(key) not in (None, "ok"):
                print(f"note: {got[key]}", file=sys.stderr)
    if got.get("error"):
        print(f"rl-insight: {got['error']}", file=sys.stderr)
        return 2
    return 1 if any(a["state"] == "firing" for a in got["alerts"]) else 0


def cmd_prometheus_config(args: argparse.Namespace) -> int:
    """The scrape configs for a Prometheus of one's own (no managed one needed)."""
    import os

    from rl_insight.server.services.prometheus import external_config_text

    url = args.server_url or os.environ.get(SERVER_URL_ENV)
    if not url:
        print("rl-insight: no server URL: pass --server-url http://<server-ip>:18080 or set "
              f"{SERVER_URL_ENV}", file=sys.stderr)
        return 2
    from rl_insight.secret import loopback_only

    host = url.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if not args.token_file and not loopback_only(host):
        print("rl-insight: note: a server beyond loopback wants its token for reads too; "
              "put RL_INSIGHT_TOKEN in a file only Prometheus reads and pass --token-file "
              "PATH", file=sys.stderr)
    print(external_config_text(url, args.refresh_interval, args.token_file), end="")
    return 0


def _dashboard_mapping(args: argparse.Namespace, dashboards: dict) -> dict[str, str]:
    from rl_insight.dashboard_install import datasources
    from rl_insight.dashboard_mapping import parse_mapping

    return parse_mapping(args.datasource or [], datasources(dashboards))


def cmd_dashboards_install(args: argparse.Namespace) -> int:
    """The shipped dashboards into the user's own Grafana; credentials from the environment."""
    from rl_insight import dashboard_install as dash
    from rl_insight import grafana_api

    dashboards = dash.shipped()
    try:
        mapping = _dashboard_mapping(args, dashboards)
        dash.folder_uid(args.folder)
        auth = grafana_api.auth_from_env()
    except (ValueError, grafana_api.GrafanaError) as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    try:
        done = dash.install(args.grafana_url, auth, folder=args.folder, mapping=mapping,
                            overwrite=args.overwrite, dashboards=dashboards,
                            say=lambda s: print(s, flush=True),
                            warn=lambda s: print(s, file=sys.stderr, flush=True))
    except grafana_api.GrafanaError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 1
    counts = {s: sum(o.status == s for o in done) for s in ("created", "updated", "kept",
                                                            "failed")}
    print(f"{len(done)} dashboards in folder {args.folder!r}: "
          + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] else 0


def cmd_dashboards_export(args: argparse.Namespace) -> int:
    """The shipped dashboards, data sources mapped, as files for Git or file provisioning."""
    from rl_insight import dashboard_install as dash

    dashboards = dash.shipped()
    try:
        mapping = _dashboard_mapping(args, dashboards)
        written = dash.export(Path(args.directory).expanduser(), mapping,
                              dashboards=dashboards)
    except (ValueError, OSError) as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    print(f"{len(written)} dashboards in {args.directory} (Grafana's file provisioning "
          "reads them: a dashboards provider with options.path set to that folder)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """A framework's trace files into the server (once, or following them as they grow):
    AReaL's and NeMo-RL's Chrome traces, ROLL's OTLP/JSON lines."""
    import glob
    import time

    from rl_insight import frameworks
    from rl_insight.api_client import ApiError
    from rl_insight.integrations import tracefiles

    fw = frameworks.get(args.framework)
    if fw is None or not fw.spans:
        known = ", ".join(n for n, f in frameworks.FRAMEWORKS.items() if f.spans)
        print(f"rl-insight: no span table for framework {args.framework!r}; known: {known}",
              file=sys.stderr)
        return 2
    client = _client(args)
    run = tracefiles.Run(fw, args.project, args.experiment)

    def send(payload: bytes) -> bool:
        try:
            client.post_bytes("/v1/traces", payload, "application/x-protobuf")
            return True
        except ApiError as exc:
            print(f"rl-insight: {exc}", file=sys.stderr)
            return False

    if args.follow:
        followers = [tracefiles.Follower(p, run, send, args.anchor) for p in args.files]
        print(f"following {', '.join(args.files)} for {fw.title} into {client.url} "
              f"(run {args.project}/{args.experiment}); Ctrl-C stops")
        try:
            while True:
                n = sum(f.poll() for f in followers)
                if n:
                    print(f"{sum(f.spans_sent for f in followers)} spans sent", flush=True)
                for f in followers:
                    for path, why in list(f.bad.items()):
                        print(f"rl-insight: {path}: {why}; skipped", file=sys.stderr)
                        f.bad[path] = ""
                    f.bad = {k: v for k, v in f.bad.items() if v}
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0
    paths = sorted({p for pattern in args.files for p in glob.glob(pattern)})
    if not paths:
        print(f"rl-insight: no file matches {' '.join(args.files)}", file=sys.stderr)
        return 2
    total, failed = 0, 0
    for path in paths:
        sent = 0
        try:
            for _, payload, n in tracefiles.read_all([path], run, args.anchor):
                if not send(payload):
                    failed += 1
                    break
                sent += n
        except (OSError, ValueError) as exc:
            print(f"rl-insight: {path}: {exc}; is it a trace file of {fw.title}?",
                  file=sys.stderr)
            failed += 1
            continue
        total += sent
        print(f"{path}: {sent} spans")
    print(f"{total} spans of {len(paths)} files sent to {client.url} as "
          f"{args.project}/{args.experiment}" + (f"; {failed} failed" if failed else ""))
    if not failed and not args.running:  # the run's last step is made now, not at max_wait
        try:
            client.post("/api/v1/experiments/finish", {"project": args.project,
                                                       "experiment_name": args.experiment})
        except ApiError as exc:
            print(f"rl-insight: marking the run finished failed ({exc}); its last step "
                  "is reported within anatomy.max_wait_s", file=sys.stderr)
    return 1 if failed else 0


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    print(yaml.safe_dump(config_mod.as_dict(_settings(args)), sort_keys=False), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE",
                        help="YAML settings file (default $RL_INSIGHT_HOME/config.yaml)")
    common.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one setting, e.g. --set prometheus.port=9091")
    common.add_argument("--host", help="bind address for every server (setting `host`)")
    common.add_argument("--port", type=int, help="the server's port (setting server.port)")

    remote = argparse.ArgumentParser(add_help=False, parents=[common])
    remote.add_argument("--server-url", help="default: $RL_INSIGHT_SERVER_URL, else the "
                                             "server running from $RL_INSIGHT_HOME")

    parser = argparse.ArgumentParser(
        prog="rl-insight", description=USAGE, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"rl-insight {__import__('rl_insight').__version__}")
    top = parser.add_subparsers(dest="command", required=True)
    _add_server(top, common, remote)
    _add_run_tools(top, remote)
    _add_setup_tools(top, remote)
    _add_dashboards(top)
    return parser


def _add_server(top, common: argparse.ArgumentParser, remote: argparse.ArgumentParser) -> None:
    """`rl-insight server ...`: install, start, status, stop, and its stores."""
    server = top.add_parser("server", help="the monitoring server and its services")
    sub = server.add_subparsers(dest="action", required=True)

    p = sub.add_parser("install", parents=[common],
                       help="install Prometheus, Tempo, Grafana and Alertmanager")
    p.add_argument("services", nargs="*",
                   choices=["prometheus", "tempo", "grafana", "alertmanager", []],
                   help="which services (default: all)")
    p.add_argument("--local-archive", metavar="DIR",
                   help="take the upstream archives from DIR instead of downloading")
    p.add_argument("--install-dir", metavar="DIR",
                   help="where to put them (default $RL_INSIGHT_HOME/services)")
    p.add_argument("--force", action="store_true", help="reinstall even if present")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sha256", metavar="DIGEST",
                   help="the archive's sha256 as the download page shows it, checked "
                        "instead of the published checksum file (one service only)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("start", parents=[common], help="start the server and services")
    p.add_argument("--detach", action="store_true", help="run in the background")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser("status", parents=[common], help="what runs, what is ready")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("stop", parents=[common], help="stop the server and its services")
    p.set_defaults(func=cmd_stop)
    _add_server_stores(sub, common, remote)


def _add_server_stores(sub, common: argparse.ArgumentParser,
                       remote: argparse.ArgumentParser) -> None:
    """`rl-insight server config | prometheus-config | targets | experiments`."""
    p = sub.add_parser("config", parents=[common], help="print the effective settings")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("prometheus-config", parents=[common],
                       help="print the scrape configs for a Prometheus of your own")
    p.add_argument("--server-url", help="the server as that Prometheus reaches it "
                                        "(default: $RL_INSIGHT_SERVER_URL)")
    p.add_argument("--refresh-interval", default="30s",
                   help="how often it asks the server for targets (default 30s)")
    p.add_argument("--token-file", default="",
                   help="where that Prometheus keeps the server's token (a file holding "
                        "RL_INSIGHT_TOKEN): sent with the scrape and the target discovery")
    p.set_defaults(func=cmd_prometheus_config)

    targets = sub.add_parser("targets", help="registered scrape targets")
    tsub = targets.add_subparsers(dest="action_targets", required=True)
    p = tsub.add_parser("add", parents=[remote], help="register the targets in a YAML file")
    p.add_argument("file", help="YAML: {job_name, targets, labels, project, "
                                "experiment_name}, or a list of those")
    p.set_defaults(func=cmd_targets_add)
    p = tsub.add_parser("list", parents=[remote], help="list registered targets")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.set_defaults(func=cmd_targets_list)

    p = sub.add_parser("experiments", parents=[remote],
                       help="list, show, archive, restore or finish experiments")
    p.add_argument("action_exp", choices=["list", "show", "archive", "restore", "finish"])
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.set_defaults(func=cmd_experiments)


def _add_run_tools(top, remote: argparse.ArgumentParser) -> None:
    """What a run shows: `traces export`, `report`, `doctor`."""
    traces = top.add_parser("traces", help="the state timeline outside Grafana")
    tsub2 = traces.add_subparsers(dest="action_traces", required=True)
    p = tsub2.add_parser("export", parents=[remote],
                         help="write the state timeline as a Chrome trace / Perfetto file")
    p.add_argument("--format", choices=["chrome-json"], default="chrome-json",
                   help="the Chrome trace-event JSON, which Perfetto and chrome://tracing "
                        "open")
    p.add_argument("--project", required=True)
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True)
    p.add_argument("--since", help="only the last DURATION (e.g. 15m, 2h)")
    p.add_argument("-o", "--output", required=True, help="the file to write")
    p.set_defaults(func=cmd_traces_export)

    p = top.add_parser("report", parents=[remote],
                       help="a run's step anatomy: where each step's time went")
    p.add_argument("--project", required=True)
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True)
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--last", type=int, default=0, help="only the last N steps")
    p.add_argument("--step", type=int, default=None,
                   help="why this step was slow: its parts against the median of the "
                        "steps before it, the critical path down to its tail requests, "
                        "its goodput")
    p.add_argument("--baseline", type=int, default=10,
                   help="with --step: the steps before it to compare with")
    p.add_argument("--changes", action="store_true",
                   help="what changed over the run: its sustained regressions (onset, "
                        "size, the parts they live in) and what moved with each, ranked")
    p.set_defaults(func=cmd_report)

    p = top.add_parser("profile", parents=[remote],
                       help="profile a trainer rank's code (py-spy on its node): its top "
                            "frames, and a speedscope file")
    p.add_argument("--project", required=True)
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True)
    p.add_argument("--rank", required=True, help="the rank's number, as rank_<n>")
    p.add_argument("--seconds", type=float, default=None,
                   help="how long to sample (the server's profiles.default_seconds)")
    p.add_argument("--wait", type=float, default=120.0,
                   help="how long to wait for the capture")
    p.add_argument("-o", "--output", help="the speedscope file to write")
    p.set_defaults(func=cmd_profile)

    p = top.add_parser("doctor", parents=[remote],
                       help="check everything between this node and the dashboards")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-ray", action="store_true", help="skip the probe of Ray workers")
    p.set_defaults(func=cmd_doctor)


def _add_setup_tools(top, remote: argparse.ArgumentParser) -> None:
    """Getting a run's data in: `ray-env`, `import`; and `alerts`."""
    p = top.add_parser("ray-env", help="print a runtime-env YAML for `ray job submit`")
    p.add_argument("--server-url", help="default: $RL_INSIGHT_SERVER_URL")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.add_argument("--path", action="store_true",
                   help="print the path of the shipped runtime-env file whose values come "
                        "from each node's environment (ray job submit --runtime-env PATH)")
    p.add_argument("--otel", action="store_true",
                   help="also point the job's own OpenTelemetry tracers (NeMo-RL's) at the "
                        "server: endpoint, token, and the run as resource attributes "
                        "(give --project and --experiment-name)")
    p.set_defaults(func=cmd_ray_env)

    from rl_insight import frameworks  # data only: the tables name who traces

    traced = [fw for fw in frameworks.FRAMEWORKS.values() if fw.spans]
    p = top.add_parser("import", parents=[remote],
                       help="a framework's trace files into the server (Chrome traces, "
                            "OTLP/JSON lines) of " + ", ".join(fw.title for fw in traced))
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="files or shell patterns (quoted with --follow: new files count)")
    p.add_argument("--framework", required=True, metavar="NAME",
                   help=", ".join(fw.name.replace("_", "-") for fw in traced))
    p.add_argument("--project", required=True)
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True)
    p.add_argument("--anchor", type=float, default=None, metavar="UNIX_SECONDS",
                   help="the unix time of the trace clock's zero (default: the last "
                        "event ends when the file was last written)")
    p.add_argument("--follow", action="store_true",
                   help="keep reading the files as they grow, until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between reads")
    p.add_argument("--running", action="store_true",
                   help="the run goes on: do not mark it finished after the files are in "
                        "(a one-off import marks it finished, so its last step is final)")
    p.set_defaults(func=cmd_import)

    p = top.add_parser("alerts", parents=[remote],
                       help="the alerts now firing or pending (exit code 1 when some fire)")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_alerts)


def _add_dashboards(top) -> None:
    """`rl-insight dashboards install | export`: for a Grafana of your own."""
    dashboards = top.add_parser("dashboards", help="the shipped Grafana dashboards, for "
                                                   "a Grafana of your own")
    dsub = dashboards.add_subparsers(dest="action_dashboards", required=True)
    mapping = argparse.ArgumentParser(add_help=False)
    mapping.add_argument("--datasource", action="append", metavar="NAME=UID",
                         help="point the dashboards' data source NAME (prometheus, tempo) "
                              "at your data source's uid; repeatable")
    p = dsub.add_parser("install", parents=[mapping],
                        help="upload the dashboards through Grafana's HTTP API (token from "
                             "GRAFANA_TOKEN or RL_INSIGHT_GRAFANA_TOKEN, or GRAFANA_USER "
                             "and GRAFANA_PASSWORD)")
    p.add_argument("--grafana-url", required=True, metavar="URL",
                   help="your Grafana, e.g. https://grafana.example.com (with its sub-path)")
    p.add_argument("--folder", default="RL-Insight",
                   help="the folder to put them in, found or created (default RL-Insight)")
    p.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=True,
                   help="replace dashboards already there (default); --no-overwrite keeps "
                        "them")
    p.set_defaults(func=cmd_dashboards_install)
    p = dsub.add_parser("export", parents=[mapping],
                        help="write the dashboards as DIR/<uid>.json (GitOps, Grafana's file "
                             "provisioning)")
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(func=cmd_dashboards_export)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except config_mod.ConfigError as exc:
        print(f"rl-insight: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
