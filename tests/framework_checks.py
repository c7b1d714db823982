"""What every framework's run must show on its dashboard, checked the same way for each
(the replays on the Ray world, the real TRL, AReaL and SkyRL runs on the route server):
every panel's query returns data for the run, and every key it logged reaches exactly
one row of its dashboard's "All ... metrics"; and the configuration it handed over."""

from __future__ import annotations

import re
import time

import requests

from dashboards import build
from dashboards import frameworks as F
from rl_insight.frameworks import FRAMEWORKS
from rl_insight.server.services.prometheus import SERVER_JOB
from rl_insight.wire import runconfig as config_wire
from tests.conftest import wait_for
from tests.traceql import span_filter

OWN = re.compile(r"rl_insight_monitor_(lane_state|lanes_in_state|state_duration_seconds|"
                 r"step$)")


def run_config(url: str, run: dict, source: str) -> dict[str, object]:
    """The configuration a framework's run handed over, as the server keeps it: its
    values, after checking who handed it over and that nothing was cut."""
    r = requests.get(url + config_wire.CONFIG_PATH, timeout=10, params={
        "project": run["project"], "experiment_name": run["experiment_name"]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["source"] == source and got["cut"]["keys"] == 0, {
        k: v for k, v in got.items() if k != "values"}
    return got["values"]


def board(name: str) -> build.Dashboard:
    return next(d for d in build.dashboards()
                if d.uid == f"rl-insight-framework-{name.replace('_', '-')}")


def substitute(expr: str, run: dict) -> str:
    """The dashboard's variables for one run: its names, every other one All."""
    values = {"$project": run["project"], "$experiment_name": run["experiment_name"],
              "$replica": ".*", "$role": ".*", "$lane_role": ".*",
              "$__rate_interval": "10s", "$__range": "5m", "$__interval": "2s",
              "$__interval_ms": "2000"}
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace(k, values[k])
    return expr


def has_data(prom: str, expr: str, start: float, end: float) -> bool:
    r = requests.get(prom + "/api/v1/query_range", params={
        "query": expr, "start": start, "end": end, "step": "1s"}, timeout=20).json()
    assert r.get("status") == "success", f"{expr}: {r.get('error')}"
    return bool(r["data"]["result"])


def scraped_since(prom: str, t: float, job: str = SERVER_JOB) -> bool:
    """Whether Prometheus took a whole scrape of the server after ``t`` (from then it
    holds whatever the server held at ``t``): a range selector counts no sample before
    its window, as an instant vector's look-back would."""
    seconds = max(1, int(time.time() - t))
    r = requests.get(prom + "/api/v1/query", params={
        "query": f'max_over_time(up{{job="{job}"}}[{seconds}s])'}, timeout=20).json()
    got = r.get("data", {}).get("result") or []
    return bool(got) and float(got[0]["value"][1]) == 1.0


def empty_panels(prom: str, spans: list, name: str, run: dict) -> tuple[int, list[str]]:
    """(queries checked, the panels of the framework's dashboard without data for the
    run): Prometheus from the run's start to now, as a user opens it once the run ended,
    after a scrape that began after its end (beside a busy loop the server's scrapes
    failed for up to 74 s on end, 2026-12-07: a run's last values were first held 5 s
    after it ended); Tempo's filters over ``spans`` (the FAKE Tempo's, as the relay
    delivered them). Key rows are the next check's."""
    wait_for(lambda: scraped_since(prom, run["t_done"]), 120,
             f"a scrape of the server after {name}'s run ended")
    end = time.time()
    checked, empty = 0, []
    for section in board(name).sections:
        for panel in section.panels:
            if panel.repeat.startswith("k_"):
                continue
            for q in panel.queries:
                expr = substitute(q.expr, run)
                checked += 1
                if q.datasource == "tempo":
                    keep = span_filter(expr.split(" | ")[0])
                    if not any(keep(a, s) for a, s in spans):
                        empty.append(f"{name} / {panel.title}: {expr}")
                elif not has_data(prom, expr, run["t_start"] - 5, end):
                    empty.append(f"{name} / {panel.title}: {expr}")
    return checked, empty


def label_values(prom: str, selector: str) -> set[str]:
    r = requests.get(prom + "/api/v1/label/__name__/values",
                     params={"match[]": selector}, timeout=10).json()
    assert r["status"] == "success", (selector, r)
    return set(r["data"])


def keys_not_in_one_row(prom: str, name: str, run: dict) -> tuple[int, dict]:
    """(names the run logged, {name: the rows listing it} for every name that is in
    none or in more than one of the framework's key groups)."""
    sel = f'project="{run["project"]}",experiment_name="{run["experiment_name"]}"'
    logged = {n for n in label_values(prom, f'{{__name__=~"rl_insight_monitor_.+",{sel}}}')
              if not OWN.match(n)}
    listed: dict[str, list[str]] = {n: [] for n in logged}
    for group in F.Groups(FRAMEWORKS[name]).groups():
        for n in label_values(prom, substitute(group.selector(), run)):
            listed.setdefault(n, []).append(group.title)
    return len(logged), {n: g for n, g in listed.items() if len(g) != 1}
