"""The commands that read or feed a run through the server's API: targets, experiments,
traces, the report, alerts, importing trace files."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rl_insight import config as config_mod
from rl_insight.commands.common import api_call, mark_finished, server_client
from rl_insight.wire import paths


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
    client = server_client(args)

    def send() -> dict:
        done = [client.post(paths.TARGETS, b) for b in bodies]
        return {"registered": sum(d["registered"] for d in done),
                "changed": sum(d["changed"] for d in done)}
    return api_call(send)


def cmd_targets_list(args: argparse.Namespace) -> int:
    client = server_client(args)
    return api_call(lambda: client.get(paths.TARGETS, project=args.project,
                                   experiment_name=args.experiment))


def cmd_experiments(args: argparse.Namespace) -> int:
    client = server_client(args)
    if args.action_exp == "list":
        def table() -> str:
            rows = client.get(paths.EXPERIMENTS)["experiments"]
            lines = [f"{'PROJECT':<20} {'EXPERIMENT':<28} {'STATUS':<9} TARGETS GROUPS LANES"]
            for e in rows:
                lines.append(f"{e['project']:<20} {e['experiment_name']:<28} "
                             f"{e['status']:<9} {e['targets']:>7} {e['push_groups']:>6} "
                             f"{e['lanes']:>5}")
            return "\n".join(lines) if rows else "no experiments yet"
        return api_call(table)
    if not args.project or not args.experiment:
        print("rl-insight: give --project and --experiment", file=sys.stderr)
        return 2
    if args.action_exp == "show":
        return api_call(lambda: client.get(paths.EXPERIMENT_TARGETS, project=args.project,
                                       experiment_name=args.experiment))
    body = {"project": args.project, "experiment_name": args.experiment}
    return api_call(lambda: client.post(paths.EXPERIMENT_ACTIONS[args.action_exp], body))


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h``, ``1d`` or plain seconds."""
    seconds = config_mod.duration_seconds(text)
    if seconds is None:
        raise config_mod.ConfigError(f"--since {text!r}: expected a duration like 15m or 2h")
    return seconds


def cmd_traces_export(args: argparse.Namespace) -> int:
    """The run's state timeline as a Chrome trace / Perfetto file."""
    from rl_insight.commands.api_client import ApiError
    from rl_insight.export import timeline

    since = parse_duration(args.since) if args.since else 0.0
    client = server_client(args)
    try:
        data = client.get(paths.TRACES_RECENT, project=args.project,
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


def cmd_compare(args: argparse.Namespace) -> int:
    """Run B against run A (text, JSON or CSV)."""
    from rl_insight.anatomy import compare

    client = server_client(args)

    def answer() -> str:
        got = client.get(paths.COMPARE, project=args.project,
                         experiment_name=args.experiment, against=args.against,
                         project_b=args.project_b, steps=args.steps, steps_b=args.steps_b,
                         align=args.align)
        if args.format == "json":
            return json.dumps(got, indent=2)
        return compare.to_csv(got).rstrip("\n") if args.format == "csv" else \
            compare.render(got)
    return api_call(answer)


def cmd_report(args: argparse.Namespace) -> int:
    """The per-step table of a run's step anatomy (table, CSV or JSON)."""
    from rl_insight.export import report

    if args.last < 0:
        print("rl-insight: --last takes a number of steps (0: all)", file=sys.stderr)
        return 2
    client = server_client(args)
    if getattr(args, "bound", False):
        from rl_insight.anatomy import boundreport

        def bound() -> str:
            got = client.get(paths.ANATOMY_BOUND, project=args.project,
                             experiment_name=args.experiment, last=args.last,
                             add_replicas=args.add_replicas,
                             trainer_speedup=args.trainer_speedup, steps=args.steps)
            return json.dumps(got, indent=2) if args.format == "json" else \
                boundreport.render(got, args.project, args.experiment)
        return api_call(bound)
    if args.changes:
        from rl_insight.anatomy import changes

        def what_changed() -> str:
            got = client.get(paths.ANATOMY_CHANGES, project=args.project,
                             experiment_name=args.experiment)
            return json.dumps(got, indent=2) if args.format == "json" else \
                changes.render(got).rstrip("\n")
        return api_call(what_changed)
    if args.step is not None:
        from rl_insight.anatomy import explain

        def why() -> str:
            got = client.get(paths.ANATOMY_EXPLAIN, project=args.project,
                             experiment_name=args.experiment, step=args.step,
                             baseline=args.baseline)
            return json.dumps(got, indent=2) if args.format == "json" else \
                explain.render(got)
        return api_call(why)

    def rows() -> str:
        got = client.get(paths.ANATOMY, project=args.project,
                         experiment_name=args.experiment, last=args.last)["steps"]
        if not got and args.format == "table":
            return (f"no finished step of {args.project}/{args.experiment} yet: a step is "
                    "reported a few seconds after the trainer logs it")
        return report.render(got, args.format).rstrip("\n")
    return api_call(rows)


def cmd_alerts(args: argparse.Namespace) -> int:
    """The alerts pending and firing; exit 1 when some fire, 2 when it cannot tell."""
    from rl_insight.commands.api_client import ApiError
    from rl_insight.server.analyses.alerts import run_of

    try:
        got = server_client(args).get(paths.ALERTS, project=args.project,
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


def cmd_import(args: argparse.Namespace) -> int:
    """A framework's trace files into the server (once, or following them as they grow):
    AReaL's and NeMo-RL's Chrome traces, ROLL's OTLP/JSON lines; a profiler's files
    (``--profiler``) in rl_insight/commands/profimport.py."""
    import glob
    import time

    if getattr(args, "profiler", None):
        from rl_insight.commands.profimport import cmd_import_profiler

        return cmd_import_profiler(args)

    from rl_insight import frameworks
    from rl_insight.commands.api_client import ApiError
    from rl_insight.integrations import tracefiles

    fw = frameworks.get(args.framework)
    if fw is None or not fw.spans:
        known = ", ".join(n for n, f in frameworks.FRAMEWORKS.items() if f.spans)
        print(f"rl-insight: no span table for framework {args.framework!r}; known: {known}",
              file=sys.stderr)
        return 2
    client = server_client(args)
    run = tracefiles.Run(fw, args.project, args.experiment)

    def send(payload: bytes) -> bool:
        try:
            client.post_bytes(paths.TRACES, payload, "application/x-protobuf")
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
    found = sorted({p for pattern in args.files for p in glob.glob(pattern)})
    if not found:
        print(f"rl-insight: no file matches {' '.join(args.files)}", file=sys.stderr)
        return 2
    total, failed = 0, 0
    for path in found:
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
    print(f"{total} spans of {len(found)} files sent to {client.url} as "
          f"{args.project}/{args.experiment}" + (f"; {failed} failed" if failed else ""))
    if not failed and not args.running:  # the run's last step is made now, not at max_wait
        mark_finished(client, args.project, args.experiment)
    return 1 if failed else 0
