"""Generates the Grafana dashboards (rl_insight/dashboards/*.json, shipped in the package)
from the panels of panels.py.

    python -m dashboards.build          # rewrite the JSON files
    python -m dashboards.build --check  # exit 1 if a checked-in file differs

Component dashboards (training, rollout per backend, TransferQueue, timeline, hardware,
RL-Insight itself) and one dashboard per backend and trainer mode, combining the panel
groups that apply. Every panel is defined once; the JSON is an output, never edited.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    from dashboards import frameworks as F
    from dashboards import panels as P
except ImportError:  # run as a script from this folder
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dashboards import frameworks as F
    from dashboards import panels as P

# the output ships in the package, where Grafana's provisioning reads it
HERE = Path(__file__).resolve().parents[1] / "rl_insight" / "dashboards"
SCHEMA_VERSION = 39
DATASOURCES = {"prometheus": {"type": "prometheus", "uid": "prometheus"},
               "tempo": {"type": "tempo", "uid": "tempo"}}
# runs named by pushes to this server, or by trainer series scraped from elsewhere (an
# upstream rl-insight 0.3.0 client serves its hub's metrics for scraping: job
# trainer_metrics)
RUN_SERIES = '__name__=~"push_time_seconds|rl_insight_monitor_.+"'
RUN_VS_RUN_UID = "rl-insight-run-vs-run"
RUN_SOURCE = f'{{{RUN_SERIES},project!=""}}'


@dataclass(frozen=True)
class Section:
    title: str
    panels: Sequence[P.Panel]
    collapsed: bool = False
    repeat: str = ""  # a variable: Grafana repeats the row (and its panels) per value


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    sections: Sequence[Section]
    variables: Sequence[str] = ("project", "experiment_name")
    replica_metric: str = ""
    annotations: Sequence[dict] = ()  # Prometheus queries drawn as regions on time axes


def variable(name: str, replica_metric: str = "") -> dict:
    """A query variable over Prometheus labels."""
    run = 'project=~"$project"'
    queries = {
        "project": f"label_values({RUN_SOURCE}, project)",
        "experiment_name": f"label_values({{{RUN_SERIES},{run}}}, experiment_name)",
        # run against run: run B
        "project_b": f"label_values({RUN_SOURCE}, project)",
        "experiment_b": f'label_values({{{RUN_SERIES},project=~"$project_b"}}, '
                        "experiment_name)",
        "role": f"label_values({replica_metric}{{{P.RUN}}}, role)",
        "replica": f"label_values({replica_metric}{{{P.ROLE}}}, replica)",
        "lane_role": f"label_values({P.M}lane_state{{{P.RUN}}}, role)",
        "node": 'label_values(up{job=~"node-exporter|dcgm-exporter|npu-exporter"}, node)',
    }
    many = name in ("role", "replica", "lane_role", "node")
    return {
        "name": name, "label": name.replace("_", " "), "type": "query",
        "datasource": DATASOURCES["prometheus"],
        "definition": queries[name],
        "query": {"query": queries[name], "refId": f"{name}-values"},
        "refresh": 2, "sort": 2 if name in ("experiment_name", "experiment_b") else 1,
        "includeAll": many, "multi": many, "allValue": ".*" if many else None,
        "current": {}, "options": [], "hide": 0,
    }


def _mappings(spec: dict) -> list[dict]:
    return [{"type": "value", "options": {value: {"text": text, "color": color,
                                                  "index": i}}}
            for i, (value, (text, color)) in enumerate(spec.items())]


def panel_json(panel: P.Panel, pid: int, x: int, y: int) -> dict:
    ds_name = panel.queries[0].datasource
    targets = []
    for i, q in enumerate(panel.queries):
        t = {"refId": chr(ord("A") + i), "datasource": DATASOURCES[q.datasource]}
        if q.datasource == "tempo":
            t.update(queryType="traceql", query=q.expr, limit=50, tableType="spans")
        elif q.table and q.instant:
            t.update(expr=q.expr, legendFormat=q.legend or "__auto", instant=True,
                     range=False, format="table")
        elif q.table:
            t.update(expr=q.expr, legendFormat=q.legend or "__auto", range=True,
                     format="table")
        else:
            t.update(expr=q.expr, legendFormat=q.legend or "__auto", range=True)
        targets.append(t)
    defaults: dict = {"unit": panel.unit}
    custom: dict = {}
    if panel.kind == "timeseries":
        custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                  "showPoints": "never", "spanNulls": True}
        if panel.stack:
            custom["stacking"] = {"mode": "normal", "group": "A"}
            custom["fillOpacity"] = 60
        if panel.options.get("bars"):  # one bar per sample: per RL step
            custom.update(drawStyle="bars", fillOpacity=80, spanNulls=False)
    if panel.options.get("mappings"):
        defaults["mappings"] = _mappings(panel.options["mappings"])
    if panel.options.get("thresholds"):
        defaults["thresholds"] = {"mode": "absolute", "steps": [
            {"value": v, "color": c} for v, c in panel.options["thresholds"]]}
    if panel.quiet:  # Grafana's "No value" text, for every kind of panel
        defaults["noValue"] = panel.quiet
    if custom:
        defaults["custom"] = custom
    options: dict = {"legend": {"displayMode": "list", "placement": "bottom",
                                "showLegend": True},
                     "tooltip": {"mode": "multi", "sort": "none"}}
    if panel.kind == "state-timeline":
        options.update(showValue="never", mergeValues=True, rowHeight=0.8)
    elif panel.kind == "stat":
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "colorMode": "value", "graphMode": "area"}
    elif panel.kind == "bargauge":
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "horizontal", "displayMode": "gradient"}
    elif panel.kind in ("traces", "table"):
        options = {}
    out = {
        "id": pid, "type": panel.kind, "title": panel.title,
        "description": panel.description, "datasource": DATASOURCES[ds_name],
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
    }
    if panel.options.get("transformations"):
        out["transformations"] = panel.options["transformations"]
    if panel.repeat:
        direction = panel.options.get("repeat_direction", "h")
        out.update(repeat=panel.repeat, repeatDirection=direction)
        if direction == "h":
            out["maxPerRow"] = 4
    return out


def layout(sections: Sequence[Section]) -> list[dict]:
    """Rows of panels, left to right, wrapping at Grafana's 24 columns; a collapsed row
    holds its panels (Grafana's model), an open one is followed by them."""
    out, pid, y = [], 1, 0
    for section in sections:
        row = {"id": pid, "type": "row", "title": section.title,
               "collapsed": section.collapsed, "panels": [],
               "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}}
        if section.repeat:
            row.update(repeat=section.repeat, title=f"{section.title} · ${section.repeat}")
        out.append(row)
        pid, y = pid + 1, y + 1
        x, row_h = 0, 0
        for panel in section.panels:
            if x + panel.width > 24:
                x, y, row_h = 0, y + row_h, 0
            (row["panels"] if section.collapsed else out).append(panel_json(panel, pid, x, y))
            pid += 1
            x += panel.width
            row_h = max(row_h, panel.height)
        y += row_h
    return out


def repeat_variable(group: P.KeyGroup) -> dict:
    """A hidden variable listing the run's exported names of one key group."""
    query = f"label_values({group.selector()}, __name__)"
    return {"name": group.variable, "label": group.title, "type": "query",
            "datasource": DATASOURCES["prometheus"], "definition": query,
            "query": {"query": query, "refId": f"{group.variable}-values"},
            "refresh": 2, "sort": 1, "includeAll": True, "multi": True, "allValue": None,
            "current": {"text": "All", "value": "$__all"}, "options": [], "hide": 2}


def annotation(a: dict) -> dict:
    """A Prometheus annotation: a region wherever the query has a series (its labels in
    the title and text)."""
    return {"name": a["title"].split("{{")[0].strip() or "annotation", "enable": True,
            "iconColor": "orange", "datasource": DATASOURCES["prometheus"],
            "expr": a["expr"], "step": "10s", "titleFormat": a["title"],
            "textFormat": a["text"], "useValueForTime": False}


def all_key_groups() -> tuple[P.KeyGroup, ...]:
    """verl's key groups and each other framework's (dashboards/frameworks.py)."""
    return P.key_groups() + tuple(g for fw in F.frameworks() for g in F.Groups(fw).groups())


def model(d: Dashboard) -> dict:
    return {
        "uid": d.uid, "title": d.title, "description": d.description,
        "tags": ["rl-insight"], "timezone": "browser", "editable": True,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
        "templating": {"list": [variable(v, d.replica_metric) for v in d.variables] + [
            repeat_variable(g) for g in all_key_groups()
            if any(p.repeat == g.variable for sec in d.sections for p in sec.panels)]},
        "annotations": {"list": [annotation(a) for a in d.annotations]},
        "links": [{"title": "RL-Insight", "type": "dashboards", "tags": ["rl-insight"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}] + (
            [] if d.uid == RUN_VS_RUN_UID or "experiment_name" not in d.variables else
            [{"title": "Compare this run with another", "type": "link", "icon": "external link",
              "url": f"/d/{RUN_VS_RUN_UID}?var-project=${{project}}&var-experiment_name="
                     "${experiment_name}&var-project_b=${project}", "keepTime": True,
              "tooltip": "RL-Insight · Run vs run, this run as A"}]),
        "panels": layout(d.sections),
    }


TRAINING = Section("Training", P.TRAINING)
TRAINING_DETAIL = Section("Training details", P.TRAINING_DETAIL)
# every exported trainer key, one row per verl key head, collapsed until opened
ALL_KEYS = tuple(Section(f"All trainer metrics · {g.title}", (P.key_panel(g),), collapsed=True)
                 for g in P.key_groups())
TIMELINE = Section("State timeline", P.TIMELINE_PROM)  # a panel per lane role
TEMPO = Section("State spans (Tempo)", P.TIMELINE_TEMPO, collapsed=False)
TQ = Section("TransferQueue", P.TQ)
ANATOMY = Section("Step anatomy", P.ANATOMY)
WHY = Section("Why was a step slow (the engines' requests)", P.WHY)
CHANGES = Section("What changed", P.CHANGES)
RUN_VS_RUN = Section("Run A ($experiment_name) against run B ($experiment_b)", P.RUN_VS_RUN)
BOUND = Section("Where the GPUs wait", P.BOUND)
KERNELS = Section("The ranks' GPUs and the experts (imported profiles)", P.KERNELS)
ALERTS = Section("Alerts", P.ALERT_PANELS)
HARDWARE = (Section("Nodes (node_exporter)", P.NODE_EXPORTER),
            Section("GPUs (DCGM)", P.DCGM), Section("Ascend NPUs (npu-exporter)", P.NPU))
RUN_VARS = ("project", "experiment_name")
# engines and step-anatomy replicas by role (the policy's rollout, teachers, reward models)
ENGINE_VARS = RUN_VARS + ("role", "replica")
BACKENDS = {  # backend -> (title, rollout panels, the metric that lists its replicas)
    "vllm": ("vLLM", P.VLLM, "vllm:num_requests_running"),
    "vllm-omni": ("vLLM-Omni", P.VLLM_OMNI, "vllm:num_requests_running"),
    "sglang": ("SGLang", P.SGLANG, "sglang:num_running_reqs"),
}
# the LLM trainer's dashboards per backend and mode; vLLM-Omni's are VeRL-Omni's, per
# its trainer mode (VeRL-Omni's guide: "select the dashboard matching the rollout backend
# and trainer mode")
LLM_BACKENDS = ("vllm", "sglang")


def pick(panels, *titles: str) -> tuple:
    """Panels of another group by title (each defined once, shown where it helps)."""
    by = {p.title: p for p in panels}
    return tuple(by[t] for t in titles)


OMNI_ROLLOUT = Section("Rollout (vLLM-Omni)", P.VLLM_OMNI, repeat="role")
def diffusion_training(v1: bool) -> Section:
    """VeRL-Omni's diffusion trainer's panels (V1 reads no agent-loop timings)."""
    own = tuple(p for p in P.DIFFUSION if not (v1 and p.title == "Agent loop per sample"))
    return Section("Diffusion training (VeRL-Omni)", own + pick(
        P.TRAINING, "Validation", "Gradient norm and learning rate") + pick(
        P.TRAINING_DETAIL, "MFU", "Rollout correction", "Validation (auxiliary)"))

VERL_OMNI = (  # (mode, title, entry point, its trainer's sections, TransferQueue)
    ("diffusion", "diffusion", "main_diffusion", [diffusion_training(False)], False),
    ("diffusion-v1", "diffusion V1 with TransferQueue", "main_diffusion_v1",
     [diffusion_training(True), Section("Off-policy and rollout failures (V1)",
                                        P.DIFFUSION_V1)], True),
    ("omni", "omni", "main_omni",
     [TRAINING, TRAINING_DETAIL, Section("Omni (VeRL-Omni)", P.OMNI_TRAINING)], True),
)


def dashboards() -> list[Dashboard]:
    out = [
        Dashboard("rl-insight-training", "RL-Insight · Training overview",
                  "Trainer scalars per step: rewards, losses, KL, timings, throughput; "
                  "every other logged key under All trainer metrics.",
                  [ALERTS, TRAINING, TRAINING_DETAIL, *ALL_KEYS]),
        Dashboard("rl-insight-step-anatomy", "RL-Insight · Step anatomy",
                  "Where each RL step's time went: which side bounds the run, its GPUs by "
                  "role and cause, what a change would buy; rollout, trainer phases, weight "
                  "update; stragglers, idle replicas and ranks, overlap and staleness.",
                  [ALERTS, BOUND, CHANGES, ANATOMY, KERNELS, WHY], ENGINE_VARS,
                  "rl_insight_step_replica_"
                  "generate_seconds", annotations=(P.CHANGE_ANNOTATION,)),
        Dashboard(RUN_VS_RUN_UID, "RL-Insight · Run vs run",
                  "Two runs side by side: their steps, the mean step part by part and what "
                  "each part's difference cost, where each run's GPUs waited, which side "
                  "bounds each, the configuration keys that differ. `rl-insight compare` "
                  "ranks the same with its significance.",
                  [RUN_VS_RUN], ("project", "experiment_name", "project_b", "experiment_b")),
        Dashboard("rl-insight-rollout-vllm", "RL-Insight · Rollout · vLLM",
                  "Every vLLM replica: requests, KV cache, tokens/s, latency, sleep state.",
                  [Section("Rollout (vLLM)", P.VLLM, repeat="role")], ENGINE_VARS,
                  BACKENDS["vllm"][2]),
        Dashboard("rl-insight-rollout-vllm-omni", "RL-Insight · Rollout · vLLM-Omni",
                  "Every vLLM-Omni replica, per pipeline stage: the LLM stage's engine "
                  "metrics, diffusion, cross-stage transfer, images.",
                  [Section("Rollout (vLLM-Omni)", P.VLLM_OMNI, repeat="role")], ENGINE_VARS,
                  BACKENDS["vllm-omni"][2]),
        Dashboard("rl-insight-rollout-sglang", "RL-Insight · Rollout · SGLang",
                  "Every SGLang replica: requests, token usage, throughput, latency.",
                  [Section("Rollout (SGLang)", P.SGLANG, repeat="role")], ENGINE_VARS,
                  BACKENDS["sglang"][2]),
        Dashboard("rl-insight-transfer-queue", "RL-Insight · TransferQueue",
                  "The data queue between rollout and training: partitions, progress, "
                  "requests, storage.", [TQ]),
        Dashboard("rl-insight-timeline", "RL-Insight · State timeline",
                  "Which replica was generating, sleeping or waking, and which trainer "
                  "rank was updating, when: from Prometheus and from Tempo.",
                  [TIMELINE, TEMPO], RUN_VARS + ("lane_role",)),
        Dashboard("rl-insight-agent-loop", "RL-Insight · Agent-loop trajectories",
                  "Agent-loop sessions and trajectories: throughput, rewards, turns, "
                  "durations; each session in Tempo.",
                  [Section("Agent loops", P.AGENT_LOOP),
                   Section("Agent-aware router (Uni-Agent)", P.ROUTER)]),
        Dashboard("rl-insight-hardware", "RL-Insight · Hardware",
                  "CPU, memory, network, disk, GPUs and Ascend NPUs of every node.",
                  HARDWARE, ("node",)),
        Dashboard("rl-insight-self", "RL-Insight · Monitoring health",
                  "RL-Insight itself: events, spans, the spool, the services.",
                  [Section("RL-Insight", P.SELF),
                   Section("Alerts", (P.ALL_ALERTS,))], ()),
    ]
    for mode, title, entry, trainer, tq in VERL_OMNI:
        out.append(Dashboard(
            f"rl-insight-verl-omni-{mode}", f"RL-Insight · VeRL-Omni · {title} · vLLM-Omni",
            f"A VeRL-Omni run of verl_omni.trainer.{entry} with vLLM-Omni rollout: its "
            "trainer's keys, step anatomy, every replica's engine, "
            + ("TransferQueue, " if tq else "") + "the timeline.",
            [ALERTS, *trainer, ANATOMY, OMNI_ROLLOUT, *([TQ] if tq else []), TIMELINE,
             *ALL_KEYS], ENGINE_VARS + ("lane_role",), BACKENDS["vllm-omni"][2]))
    for fw in F.frameworks():  # other RL frameworks (rl_insight/frameworks/)
        engines = fw.engines in F.ENGINES
        out.append(Dashboard(
            f"rl-insight-framework-{fw.name.replace('_', '-')}",
            f"RL-Insight · {fw.title}",
            f"A {fw.title} run: its trainer's keys, each step's anatomy from what "
            f"{fw.title} records" + (", its rollout engines" if engines else "")
            + ", every key it logs.", F.sections(fw, Section, P.key_panel),
            (ENGINE_VARS + ("lane_role",)) if engines else RUN_VARS,
            BACKENDS[fw.engines][2] if engines else ""))
    for key in LLM_BACKENDS:
        name, rollout, replica_metric = BACKENDS[key]
        for mode, mode_title, extra in (("sync", "synchronous", []),
                                        ("async", "separate-asynchronous (TransferQueue)",
                                         [TQ])):
            out.append(Dashboard(
                f"rl-insight-{key}-{mode}", f"RL-Insight · {name} · {mode_title}",
                f"A {mode_title} RL run with {name} rollout: training, rollout, "
                "timeline" + (", TransferQueue" if extra else "") + ".",
                [ALERTS, TRAINING, ANATOMY, Section(f"Rollout ({name})", tuple(rollout) + (
                    P.VLLM_SYNC if (key, mode) == ("vllm", "sync") else ()), repeat="role"),
                 *extra, TIMELINE],
                ENGINE_VARS + ("lane_role",), replica_metric))
    return out


def render_all() -> dict[str, str]:
    """File name -> JSON text, exactly as checked in."""
    return {f"{d.uid}.json": json.dumps(model(d), indent=2, sort_keys=True) + "\n"
            for d in dashboards()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the checked-in files instead of writing")
    args = ap.parse_args(argv)
    files = render_all()
    stale = [n for n, text in files.items()
             if not (HERE / n).is_file() or (HERE / n).read_text() != text]
    extra = [p.name for p in HERE.glob("*.json") if p.name not in files]
    if args.check:
        for n in stale + extra:
            print(f"rl_insight/dashboards/{n} differs from what dashboards/build.py generates; run "
                  "`python -m dashboards.build`", file=sys.stderr)
        return 1 if stale or extra else 0
    for n, text in files.items():
        (HERE / n).write_text(text)
    for n in extra:
        (HERE / n).unlink()
    print(f"wrote {len(files)} dashboards to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
