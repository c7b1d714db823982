"""The status page at GET /: plain server-rendered HTML that refreshes itself, with no
JavaScript and nothing loaded from the internet."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from rl_insight.server.analyses.alerts import run_of
from rl_insight.server.ingest.targets import describe_local_targets
from rl_insight.wire import laneid

DASHBOARDS = (("rl-insight-training", "Training overview"),
              ("rl-insight-rollout-vllm", "Rollout · vLLM"),
              ("rl-insight-rollout-vllm-omni", "Rollout · vLLM-Omni"),
              ("rl-insight-rollout-sglang", "Rollout · SGLang"),
              ("rl-insight-transfer-queue", "TransferQueue"),
              ("rl-insight-timeline", "State timeline"),
              ("rl-insight-hardware", "Hardware"),
              ("rl-insight-self", "Monitoring health"))

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2430;background:#f7f8fa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse;background:#fff;min-width:60%}
th,td{padding:4px 10px;border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600}
.ok{color:#19733a;font-weight:600}.bad{color:#b3261e;font-weight:600}
.muted{color:#6b7380}.err{color:#b3261e;font-size:12px}
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _state(ok: bool | None, text: str) -> str:
    cls = "ok" if ok else ("bad" if ok is False else "muted")
    return f'<span class="{cls}">{_e(text)}</span>'


def _table(headers: Sequence[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def ago(ts: float | None, now: float) -> str:
    if not ts:
        return "never"
    s = max(0.0, now - ts)
    return f"{s:.0f}s ago" if s < 120 else (f"{s / 60:.0f}m ago" if s < 7200
                                            else f"{s / 3600:.1f}h ago")


def _local_targets(log: dict) -> str:
    """A warning line when registrations named the caller's own machine."""
    said = describe_local_targets(log)
    return f'<p class="err">{_e(said)}. Register routable addresses.</p>' if said else ""


def _alerts(data: dict | None) -> str:
    """The firing and pending alerts, or why they cannot be known."""
    if data is None:
        return ""
    if data.get("error"):
        return f'<p class="err">{_e(data["error"])}</p>'
    rows = [[_state(False if a["state"] == "firing" else None, a["state"]), _e(a["name"]),
             _e(run_of(a["labels"])), _e(a["labels"].get("severity", "")),
             _e(a["annotations"].get("summary", "")),
             _e(a.get("notification") or "-")] for a in data["alerts"]]
    note = "" if data.get("alertmanager") == "ok" else \
        f'<p class="muted">{_e(data.get("alertmanager"))}</p>'
    return _table(["state", "alert", "run", "severity", "summary", "alertmanager"], rows,
                  "None firing.") + note


def _bound(summary: dict | None) -> str:
    """A run's verdict over its newest steps, its reason on hover, and its best change."""
    if not summary:
        return '<span class="muted">-</span>'
    # the change that buys most without more than one replica's GPUs
    best = max((w for w in summary.get("what_if", []) if w.get("known") and
                w.get("kind") != "as_is" and (w.get("speedup") or 0) > 1.0 and
                w.get("replicas", 0) <= 1),
               key=lambda w: w["speedup"], default=None)
    tip = f' title="{_e(summary["why"])}"'
    text = f"<b{tip}>{_e(summary['verdict'])}</b>"
    if best is not None:
        text += (f'<br><span class="muted">{_e(best["change"])}: '
                 f'{best["speedup"]:.2f}x</span>')
    return text


def render(report: dict, experiments: list[dict], targets: list[dict], lanes: list[dict],
           grafana_url: str | None, refresh_s: int = 10, alerts: dict | None = None) -> str:
    now = time.time()
    s = report["server"]
    services = [[_e("server"), _state(True, "ready"), _e(s["pid"]), _e(s["port"]),
                 _e(s["version"]), "0", ""]]
    for svc in report["services"]:
        ready = svc.get("ready")
        state = svc.get("state", "")
        ok = True if ready else (None if state in ("not installed", "disabled") else False)
        services.append([_e(svc["name"]), _state(ok, state), _e(svc.get("pid") or "-"),
                         _e(svc.get("port") or "-"), _e(svc.get("version") or "-"),
                         _e(svc.get("restarts", 0)),
                         f'<span class="muted">{_e(svc.get("message") or "")}</span>'])
    exp_rows = [[_e(e["project"]), _e(e["experiment_name"]),
                 _state(e["status"] == "active" or None, e["status"]), _e(e["targets"]),
                 _e(e["push_groups"]), _e(e["lanes"]), _bound(e.get("bound")),
                 _e(ago(e.get("last_seen"), now))]
                for e in experiments]
    target_rows = []
    for t in targets:
        health = t.get("health", "unknown")
        target_rows.append([
            _e(f'{t["project"]}/{t["experiment_name"]}' if t["project"] else "(cluster)"),
            _e(t["job_name"]), _e(t["target"]),
            _e(", ".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))),
            _state(health == "up" or (False if health == "down" else None), health),
            f'<span class="err">{_e(t.get("last_error") or "")}</span>'])
    # each run's lanes by role: its rollout replicas, reward models', teachers', ranks
    ordered = sorted(lanes[:300], key=lambda ln: (ln["project"], ln["experiment_name"],
                                                  laneid.sort_key(ln["lane"])))
    lane_rows = [[_e(f'{ln["project"]}/{ln["experiment_name"]}'),
                  _e(laneid.role_of(ln["lane"]) or "-"), _e(ln["lane"]),
                  _e(ln["spans"]), _e(", ".join(sorted(ln["states"]))),
                  _e(ago(ln["last_span_end"], now))] for ln in ordered]
    if grafana_url:
        links = " · ".join(f'<a href="{_e(grafana_url)}/d/{uid}">{_e(title)}</a>'
                           for uid, title in DASHBOARDS)
    else:
        links = '<span class="muted">Grafana is not running (rl-insight server install)' \
                "</span>"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh_s}">
<title>RL-Insight status</title><style>{STYLE}</style></head><body>
<h1>RL-Insight</h1>
<p class="muted">server {_e(report["clients"]["server_url"])} · up {s["uptime_s"]:.0f}s ·
refreshes every {refresh_s}s · {_e(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>
<p>Dashboards: {links}</p>
<h2>Services</h2>
{_table(["service", "state", "pid", "port", "version", "restarts", ""], services, "")}
<h2>Alerts</h2>
{_alerts(alerts)}
<h2>Experiments</h2>
{_table(["project", "experiment", "status", "targets", "pushed groups", "lanes",
         "bound by (newest steps)", "last activity"], exp_rows,
        "No experiment has reported yet.")}
<h2>Scrape targets</h2>
{_local_targets(report.get("local_targets") or {})}
{_table(["run", "job", "target", "labels", "health", "last error"], target_rows,
        "No targets registered.")}
<h2>Lanes</h2>
{_table(["run", "role", "lane", "spans", "states", "last span"], lane_rows,
        "No state spans yet.")}
<p class="muted">Traces: {_e(report["traces"]["relay_url"])} ·
{"relay up" if report["traces"]["relay_up"] else "relay down"} ·
{_e(report["traces"]["spooled_spans"])} spans spooled</p>
</body></html>"""
