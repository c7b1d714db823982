"""Pictures of two dashboards drawn from Prometheus query results, for the README (Grafana
cannot run on the machines this project is built on). The queries are the dashboards'
own, from panels.py, with the variables substituted.

    python -m dashboards.render --prometheus URL --project P --experiment E \\
        --start T0 --end T1 --out docs/img

`make pictures` runs a simulated RL run and then this.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import requests

try:
    from dashboards import panels as P
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dashboards import panels as P


def substitute(expr: str, project: str, experiment: str, rate: str = "20s") -> str:
    return (expr.replace("$experiment_name", experiment).replace("$project", project)
            .replace("$replica", ".*").replace("$node", ".*").replace("$lane_role", ".*")
            .replace("$role", ".*")
            .replace("$__rate_interval", rate).replace("$__range", "1h"))


def legend(fmt: str, labels: dict) -> str:
    out = fmt
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out if fmt else ",".join(f"{k}={v}" for k, v in labels.items())


def query_range(prom: str, expr: str, start: float, end: float, step: str) -> list:
    r = requests.get(prom.rstrip("/") + "/api/v1/query_range",
                     params={"query": expr, "start": start, "end": end, "step": step},
                     timeout=30).json()
    if r.get("status") != "success":
        raise RuntimeError(f"{expr}: {r.get('error')}")
    return r["data"]["result"]


def training_overview(prom, project, experiment, start, end, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wanted = ["Reward and score", "Policy loss", "KL and clip fraction", "Response length",
              "Step time by phase", "Throughput"]
    chosen = [p for p in P.TRAINING if p.title in wanted]
    fig, axes = plt.subplots(3, 2, figsize=(13, 9), constrained_layout=True)
    fig.suptitle(f"RL-Insight · Training overview — {project}/{experiment}", fontsize=13)
    for ax, panel in zip(axes.flat, chosen, strict=False):
        series_all = []
        for q in panel.queries:
            for s in query_range(prom, substitute(q.expr, project, experiment), start, end,
                                 "2s"):
                xs = [datetime.fromtimestamp(float(t)) for t, _ in s["values"]]
                ys = [float(v) for _, v in s["values"]]
                series_all.append((legend(q.legend, s["metric"]), xs, ys))
        if panel.stack and series_all:
            ax.stackplot(series_all[0][1], *[ys for _, xs, ys in series_all
                                             if len(ys) == len(series_all[0][2])],
                         labels=[n for n, xs, ys in series_all
                                 if len(ys) == len(series_all[0][2])], alpha=0.8)
        else:
            for name, xs, ys in series_all:
                ax.plot(xs, ys, label=name, linewidth=1.4)
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if series_all:
            ax.legend(fontsize=6, loc="best")
        if panel.unit == "s":
            ax.set_ylabel("seconds", fontsize=7)
    path = out / "training-overview.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def state_timeline(prom, project, experiment, start, end, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panel = P.TIMELINE_PROM[0]
    expr = substitute(panel.queries[0].expr, project, experiment)
    series = query_range(prom, expr, start, end, "1s")
    states = sorted({s["metric"]["state_name"] for s in series})
    colors = dict(zip(states, plt.get_cmap("tab10").colors, strict=False))

    def lane_key(lane: str) -> tuple:
        kind, _, n = lane.partition("_")
        return (0 if kind == "replica" else 1, int(n) if n.isdigit() else 0)

    lanes = sorted({s["metric"]["state_lane_id"] for s in series}, key=lane_key)
    fig, ax = plt.subplots(figsize=(13, 0.45 * len(lanes) + 1.6), constrained_layout=True)
    for s in series:
        y = lanes.index(s["metric"]["state_lane_id"])
        times = [float(t) for t, v in s["values"] if float(v) > 0]
        spans, run_start, prev = [], None, None
        for t in times:  # contiguous 1 s samples form one bar
            if run_start is None or t - prev > 1.5:
                if run_start is not None:
                    spans.append((run_start, prev - run_start + 1))
                run_start = t
            prev = t
        if run_start is not None:
            spans.append((run_start, prev - run_start + 1))
        ax.broken_barh([(a - start, w) for a, w in spans], (y - 0.38, 0.76),
                       color=colors[s["metric"]["state_name"]])
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run started", fontsize=8)
    ax.set_title(f"RL-Insight · State timeline (from Prometheus) — {project}/{experiment}",
                 fontsize=11, loc="left")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[s]) for s in states],
              labels=states, fontsize=7, ncol=min(len(states), 6), loc="upper center",
              bbox_to_anchor=(0.5, -0.12 if len(lanes) > 4 else -0.3))
    ax.grid(axis="x", alpha=0.3)
    path = out / "state-timeline.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _explained(server: str, project: str, experiment: str, step: int):
    """(pyplot, the run's rows, step's explanation, `report --step N` as it prints)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rl_insight.anatomy import explain

    params = {"project": project, "experiment_name": experiment}
    rows = requests.get(server + "/api/v1/anatomy", params=params, timeout=10).json()["steps"]
    e = requests.get(server + "/api/v1/anatomy/explain", params={**params, "step": step},
                     timeout=10).json()
    return plt, rows, e, explain.render(e)


def why_step(server: str, project: str, experiment: str, step: int, out: Path) -> Path:
    """A slow step explained down to its tail request: every step's time (the slow one
    marked, the median of those before it), the slow step's request phases against the
    baseline's, and `rl-insight report --step N` as it prints."""
    plt, rows, e, text = _explained(server, project, experiment, step)
    fig, grid = _over_text(plt, text, 4.2)
    ax = fig.add_subplot(grid[0, 0])
    steps = [r["step"] for r in rows]
    ax.bar(steps, [r["duration_s"] for r in rows],
           color=["tab:red" if s == step else "tab:blue" for s in steps])
    if e["baseline_duration_s"] is not None:
        ax.axhline(e["baseline_duration_s"], color="gray", linestyle="--",
                   label=f"median of steps {e['baseline_steps'][0]}-"
                         f"{e['baseline_steps'][-1]}")
        ax.legend(fontsize=7)
    ax.set_title("Step time (s): the slow step in red", fontsize=10, loc="left")
    ax.set_xlabel("step", fontsize=8)
    ax = fig.add_subplot(grid[0, 1])
    cp = e.get("critical_path") or {}
    tail = cp.get("longest") or {}
    phases = ("queue", "prefill", "decode")
    base = [(cp.get("requests") or {}).get(p, {}).get("baseline_mean_s") or 0 for p in phases]
    last = [tail.get(f"{p}_s") or 0 for p in phases]
    x = range(len(phases))
    ax.bar([i - 0.2 for i in x], base, width=0.4, label="a request of the earlier steps "
           "(mean)")
    ax.bar([i + 0.2 for i in x], last, width=0.4, color="tab:red",
           label=f"{tail.get('request_id', '?')}: {tail.get('completion_tokens') or 0:,} "
                 "tokens")
    ax.set_xticks(list(x), phases)
    ax.set_title(f"Step {step}'s critical path: replica {cp.get('slowest_replica')}'s "
                 "longest request (s)", fontsize=10, loc="left")
    ax.legend(fontsize=7)
    _command(fig, grid, f"rl-insight report --project {project} --experiment-name "
                        f"{experiment} --step {step}", text)
    path = out / "why-step.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _over_text(plt, text: str, height: float):
    """A figure of two plots over a command's printed lines: (figure, its grid)."""
    lines = len(text.splitlines())
    fig = plt.figure(figsize=(13, height + 0.17 * lines), constrained_layout=True)
    return fig, fig.add_gridspec(2, 2, height_ratios=[1.0, 0.12 * lines])


def _command(fig, grid, command: str, text: str) -> None:
    """The command and what it printed, under the plots."""
    ax = fig.add_subplot(grid[1, :])
    ax.axis("off")
    ax.text(0, 1, f"$ {command}\n" + text, family="monospace", fontsize=7.5, va="top")


def what_changed(server: str, project: str, experiment: str, out: Path) -> Path:
    """The What changed section as it reads after a drifting run: each step's time
    against the baseline its change is measured from (the onset and the finding marked),
    the first thing that moved with it, and `rl-insight report --changes` as it prints."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rl_insight.anatomy import changes

    params = {"project": project, "experiment_name": experiment}
    rows = requests.get(server + "/api/v1/anatomy", params=params, timeout=10).json()["steps"]
    report = requests.get(server + "/api/v1/anatomy/changes", params=params,
                          timeout=60).json()
    text = changes.render(report)
    fig, grid = _over_text(plt, text, 4.0)
    ax = fig.add_subplot(grid[0, 0])
    steps = [r["step"] for r in rows]
    change = report["changes"][0] if report["changes"] else None
    onset = change["onset_step"] if change else max(steps) + 1
    ax.bar(steps, [r["duration_s"] for r in rows],
           color=["tab:red" if s >= onset else "tab:blue" for s in steps])
    if change:
        ax.axhline(change["baseline"], color="gray", linestyle="--",
                   label=f"baseline {change['baseline']:.2f} s")
        ax.axvline(change["detected_step"], color="black", linestyle=":",
                   label=f"found at step {change['detected_step']}")
        ax.legend(fontsize=7)
    ax.set_title("Step time (s): since the onset in red", fontsize=10, loc="left")
    ax.set_xlabel("step", fontsize=8)
    ax = fig.add_subplot(grid[0, 1])
    first = change["candidates"][0] if change and change["candidates"] else None
    if first:
        where = ", ".join(f"{k} {v}" for k, v in first["labels"].items())
        ax.bar(["before the onset", "since"], [first["before"], first["after"]],
               color=["tab:blue", "tab:red"])
        ax.set_title(f"What moved first: {first['name']}{' (' + where + ')' if where else ''}",
                     fontsize=10, loc="left")
    _command(fig, grid, f"rl-insight report --changes --project {project} "
                        f"--experiment-name {experiment}", text)
    path = out / "what-changed.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def culprit_step(server: str, project: str, experiment: str, step: int, out: Path) -> Path:
    """A slow step traced to its rank and its code: each rank's compute and wait per step
    (the culprit's steps marked), the culprit's profile's top frames, and `rl-insight
    report --step N` as it prints."""
    plt, rows, e, text = _explained(server, project, experiment, step)
    fig, grid = _over_text(plt, text, 4.2)
    ax = fig.add_subplot(grid[0, 0])
    from rl_insight.anatomy.ranks import frame_label

    ranks = sorted({r for row in rows for r in row.get("ranks", {})}, key=int)
    width = 0.8 / max(1, len(ranks))
    for i, rank in enumerate(ranks):
        xs = [row["step"] + (i - (len(ranks) - 1) / 2) * width for row in rows]
        got = [row.get("ranks", {}).get(rank, {}) for row in rows]
        compute = [g.get("compute_s", 0) for g in got]
        wait = [g.get("wait_s", 0) for g in got]
        ax.bar(xs, compute, width, color=f"C{i}", label=f"rank {rank} computing")
        ax.bar(xs, wait, width, bottom=compute, color=f"C{i}", alpha=0.3, hatch="//",
               label=f"rank {rank} waiting")
    peak = 0.0
    for row in rows:
        top = max((sum(v.values()) for v in row.get("ranks", {}).values()), default=0.0)
        peak = max(peak, top)
        c = row.get("culprit")
        if c:
            ax.annotate(f"r{c['rank']}\n{c['kind']}", (row["step"], top), ha="center",
                        va="bottom", fontsize=6, color="tab:red")
    ax.set_ylim(0, peak * 1.3 or 1)
    ax.set_title("Each rank's actor update per step (s): computing, then waiting (hatched); "
                 "the culprit above", fontsize=9, loc="left")
    ax.set_xlabel("step", fontsize=8)
    ax.legend(fontsize=6, ncol=len(ranks), loc="upper left")
    ax = fig.add_subplot(grid[0, 1])
    frames = (e.get("profile") or {}).get("top_frames", [])[:6]
    ax.barh([frame_label(f) for f in frames][::-1],
            [100 * f["self_share"] for f in frames][::-1], color="tab:red")
    c = e.get("culprit") or {}
    ax.set_title(f"Rank {c.get('rank', '?')}'s code: share of its samples (%), py-spy",
                 fontsize=10, loc="left")
    ax.tick_params(labelsize=7)
    _command(fig, grid, f"rl-insight report --project {project} --experiment-name "
                        f"{experiment} --step {step}", text)
    path = out / "culprit-rank.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def imported_run(server: str, project: str, experiment: str, step: int, timeline: Path,
                 out: Path) -> Path:
    """An imported run's step: every rank's stages and collectives from the merged
    timeline `rl-insight import --timeline` wrote (the rank the step waited for marked),
    and `rl-insight report --step N` as it prints."""
    import json

    plt, rows, e, text = _explained(server, project, experiment, step)
    row = next(r for r in rows if r["step"] == step)
    events = [ev for ev in json.loads(timeline.read_text())["traceEvents"]
              if ev.get("ph") == "X" and (ev.get("args") or {}).get("step") == step]
    fig, grid = _over_text(plt, text, 2.4)
    ax = fig.add_subplot(grid[0, :])
    t0 = min(ev["ts"] for ev in events)
    stages = sorted({ev["name"] for ev in events if ev["cat"] == "range"})
    colors = dict(zip(stages, plt.get_cmap("tab10").colors, strict=False))
    ranks = sorted({ev["pid"] for ev in events})
    culprit = str((row.get("culprit") or {}).get("rank"))
    for ev in events:
        y = ranks.index(ev["pid"])
        x, w = (ev["ts"] - t0) / 1e6, ev["dur"] / 1e6
        if ev["cat"] == "range":
            inner = ev["name"] == "train_batch"  # verl nests it in actor_update
            ax.broken_barh([(x, w)], (y - (0.2 if inner else 0.38), 0.4 if inner else 0.76),
                           color=colors[ev["name"]], alpha=0.9 if inner else 0.55)
        else:
            ax.broken_barh([(x, max(w, 0.002))], (y + 0.22, 0.14), color="black")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" + (" (waited for)" if str(r) == culprit
                                                     else "") for r in ranks], fontsize=8)
    for label in ax.get_yticklabels():
        if "waited" in label.get_text():
            label.set_color("tab:red")
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds since step {step}'s first event", fontsize=8)
    ax.set_title(f"RL-Insight · an imported run's step {step}: each rank's verl stages "
                 "(colour) and its collectives (black), from verl's torch-profiler files",
                 fontsize=10, loc="left")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[s]) for s in stages],
              labels=stages, fontsize=7, ncol=len(stages), loc="upper left")
    ax.set_ylim(len(ranks) - 0.3, -1.1)
    _command(fig, grid, f"rl-insight report --project {project} --experiment-name "
                        f"{experiment} --step {step}", text)
    path = out / "imported-run.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--experiment", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "img"))
    ap.add_argument("--server", help="with --why-step: the server's URL")
    ap.add_argument("--why-step", type=int, help="also draw this step explained")
    ap.add_argument("--what-changed", action="store_true",
                    help="only the What changed picture of this (drifting) run")
    ap.add_argument("--culprit-step", type=int,
                    help="only this step traced to its rank and code (a straggler run)")
    ap.add_argument("--imported-step", type=int,
                    help="only this step of an imported run, with --timeline")
    ap.add_argument("--timeline", help="the merged timeline `rl-insight import` wrote")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.imported_step:
        drawn = imported_run(a.server, a.project, a.experiment, a.imported_step,
                             Path(a.timeline), out)
        print(f"wrote {drawn}")
        return 0
    if a.culprit_step:
        print(f"wrote {culprit_step(a.server, a.project, a.experiment, a.culprit_step, out)}")
        return 0
    if a.what_changed:
        print(f"wrote {what_changed(a.server, a.project, a.experiment, out)}")
        return 0
    if a.why_step:
        print(f"wrote {why_step(a.server, a.project, a.experiment, a.why_step, out)}")
    for fn in (training_overview, state_timeline):
        print(f"wrote {fn(a.prometheus, a.project, a.experiment, a.start, a.end, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
