"""`rl-insight`: parse the command line, call the module that does the work, print."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rl_insight import config as config_mod
from rl_insight.commands import dashboards as dashboards_cmd
from rl_insight.commands import runs as runs_cmd
from rl_insight.commands import server as server_cmd
from rl_insight.commands.common import server_client, settings_of
from rl_insight.common import secret
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


def cmd_ray_env(args: argparse.Namespace) -> int:
    """A runtime-env YAML with the monitoring variables written in."""
    import os

    import yaml

    from rl_insight.common import resources
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


def cmd_profile(args: argparse.Namespace) -> int:
    """Profile one trainer rank of a run (its node's lane actor runs py-spy)."""
    from rl_insight.commands import profile

    return profile.run(server_client(args), args.project, args.experiment, args.rank,
                       args.seconds, args.wait, args.output)


def cmd_doctor(args: argparse.Namespace) -> int:
    from rl_insight.commands import doctor

    settings = settings_of(args)
    url = args.server_url or None
    if url is None and not __import__("os").environ.get(SERVER_URL_ENV):
        url = server_client(args).url  # the server running here, if any
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
    p.set_defaults(func=server_cmd.cmd_install)

    p = sub.add_parser("start", parents=[common], help="start the server and services")
    p.add_argument("--detach", action="store_true", help="run in the background")
    p.set_defaults(func=server_cmd.cmd_start)

    p = sub.add_parser("status", parents=[common], help="what runs, what is ready")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=server_cmd.cmd_status)

    p = sub.add_parser("stop", parents=[common], help="stop the server and its services")
    p.set_defaults(func=server_cmd.cmd_stop)
    _add_server_stores(sub, common, remote)


def _add_server_stores(sub, common: argparse.ArgumentParser,
                       remote: argparse.ArgumentParser) -> None:
    """`rl-insight server config | prometheus-config | targets | experiments`."""
    p = sub.add_parser("config", parents=[common], help="print the effective settings")
    p.set_defaults(func=server_cmd.cmd_config)

    p = sub.add_parser("prometheus-config", parents=[common],
                       help="print the scrape configs for a Prometheus of your own")
    p.add_argument("--server-url", help="the server as that Prometheus reaches it "
                                        "(default: $RL_INSIGHT_SERVER_URL)")
    p.add_argument("--refresh-interval", default="30s",
                   help="how often it asks the server for targets (default 30s)")
    p.add_argument("--token-file", default="",
                   help="where that Prometheus keeps the server's token (a file holding "
                        "RL_INSIGHT_TOKEN): sent with the scrape and the target discovery")
    p.set_defaults(func=server_cmd.cmd_prometheus_config)

    targets = sub.add_parser("targets", help="registered scrape targets")
    tsub = targets.add_subparsers(dest="action_targets", required=True)
    p = tsub.add_parser("add", parents=[remote], help="register the targets in a YAML file")
    p.add_argument("file", help="YAML: {job_name, targets, labels, project, "
                                "experiment_name}, or a list of those")
    p.set_defaults(func=runs_cmd.cmd_targets_add)
    p = tsub.add_parser("list", parents=[remote], help="list registered targets")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.set_defaults(func=runs_cmd.cmd_targets_list)

    p = sub.add_parser("experiments", parents=[remote],
                       help="list, show, archive, restore or finish experiments")
    p.add_argument("action_exp", choices=["list", "show", "archive", "restore", "finish"])
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.set_defaults(func=runs_cmd.cmd_experiments)


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
    p.set_defaults(func=runs_cmd.cmd_traces_export)

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
    p.add_argument("--bound", action="store_true",
                   help="which side bounds the run: GPU-seconds by role and cause, the "
                        "verdict (with --last N: of the last N steps), and what a change "
                        "would buy (more replicas, a faster trainer, a free weight sync, "
                        "a shorter tail)")
    p.add_argument("--add-replicas", type=int, default=1, metavar="N",
                   help="with --bound: the what-if's N more rollout replicas (negative: "
                        "fewer)")
    p.add_argument("--trainer-speedup", type=float, default=2.0, metavar="K",
                   help="with --bound: the what-if's trainer K times as fast")
    p.add_argument("--steps", default="", metavar="A:B",
                   help="with --bound: only steps A to B (a warm-up left out)")
    p.set_defaults(func=runs_cmd.cmd_report)

    p = top.add_parser("compare", parents=[remote],
                       help="run against run: what differs between two runs, ranked by "
                            "what it cost, with their configurations side by side")
    p.add_argument("--project", required=True, help="run A's project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True,
                   help="run A")
    p.add_argument("--against", required=True, metavar="EXPERIMENT", help="run B")
    p.add_argument("--project-b", default="", help="run B's project (default: A's)")
    p.add_argument("--steps", default="", metavar="A:B", help="only these steps (of both)")
    p.add_argument("--steps-b", default="", metavar="A:B", help="B's steps, where they differ")
    p.add_argument("--align", choices=["step", "samples"], default="step",
                   help="samples: over the same samples consumed (runs whose batch differs)")
    p.add_argument("--format", choices=["text", "json", "csv"], default="text")
    p.set_defaults(func=runs_cmd.cmd_compare)

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
                       help="a run's profiler files (--profiler torch|nvtx|mstx: verl's "
                            "torch traces, Nsight's NVTX JSON lines, Ascend's MSTX) or a "
                            "framework's trace files (--framework: Chrome traces, "
                            "OTLP/JSON lines of " + ", ".join(fw.title for fw in traced)
                            + ") into the server")
    p.add_argument("files", nargs="+", metavar="PATH",
                   help="files, directories (--profiler) or shell patterns (quoted with "
                        "--follow: new files count)")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--profiler", choices=("torch", "nvtx", "mstx"),
                      help="the profiler that wrote the files: each rank becomes a lane "
                           "of the run with its stages and steps (docs/importing.md)")
    kind.add_argument("--framework", metavar="NAME",
                      help=", ".join(fw.name.replace("_", "-") for fw in traced))
    p.add_argument("--project", required=True)
    p.add_argument("--experiment-name", "--experiment", dest="experiment", required=True)
    p.add_argument("--timeline", metavar="FILE",
                   help="--profiler: also write every rank's ranges and device work to "
                        "FILE, a Chrome trace Perfetto opens (one process per rank)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="--profiler: read N files at a time, in N processes (each holds "
                        "one file's events: memory N times the largest file's)")
    p.add_argument("--rank-from", metavar="FILE",
                   help="--profiler nvtx: each report's rank where its process's "
                        "environment tells none, lines `<file name, host:pid or pid> "
                        "<rank>`")
    p.add_argument("--settle", type=float, default=10.0, metavar="SECONDS",
                   help="--profiler --follow: a file is read once it stopped growing for "
                        "this long, a step marked once no file of it came for this long")
    p.add_argument("--anchor", type=float, default=None, metavar="UNIX_SECONDS",
                   help="--framework: the unix time of the trace clock's zero (default: "
                        "the last event ends when the file was last written)")
    p.add_argument("--follow", action="store_true",
                   help="keep reading the files as they grow or appear, until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between reads")
    p.add_argument("--running", action="store_true",
                   help="the run goes on: do not mark it finished after the files are in "
                        "(a one-off import marks it finished, so its last step is final; "
                        "a run the server sees active is never marked)")
    p.set_defaults(func=runs_cmd.cmd_import)

    p = top.add_parser("alerts", parents=[remote],
                       help="the alerts now firing or pending (exit code 1 when some fire)")
    p.add_argument("--project")
    p.add_argument("--experiment-name", "--experiment", dest="experiment")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=runs_cmd.cmd_alerts)


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
    p.set_defaults(func=dashboards_cmd.cmd_dashboards_install)
    p = dsub.add_parser("export", parents=[mapping],
                        help="write the dashboards as DIR/<uid>.json (GitOps, Grafana's file "
                             "provisioning)")
    p.add_argument("directory", metavar="DIR")
    p.set_defaults(func=dashboards_cmd.cmd_dashboards_export)


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
