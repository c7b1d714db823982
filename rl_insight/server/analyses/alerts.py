"""The alerts now pending or firing, as one report for `GET /api/v1/alerts`, the status
page and `rl-insight alerts`: Prometheus' rule states, with Alertmanager's word on
whether each firing alert is being notified or silenced.

A service that does not answer becomes a message in the report, never an exception:
whoever asks gets what is known and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rl_insight.config import Settings
from rl_insight.server.analyses import promapi
from rl_insight.server.endpoints import (
    alertmanager_auth,
    alertmanager_url,
    prometheus_auth,
    prometheus_url,
)

if TYPE_CHECKING:
    from rl_insight.server.services.base import ServiceInfo

STATE_ORDER = {"firing": 0, "pending": 1}
OK = "ok"
# Alertmanager's alert states (api/v2 alertStatus.state), in words
NOTIFICATION = {"active": "sent to receivers", "suppressed": "silenced",
                "unprocessed": "received, not yet routed"}


def _runs(service: ServiceInfo | None) -> tuple[bool, str]:
    """Whether a managed service is meant to run here, and why not."""
    if service is None:
        return False, "not managed by this server"
    if not service.enabled:
        return False, service.message or "disabled"
    if not service.installed:
        return False, "not installed: run `rl-insight server install`"
    return True, ""


def _matches(labels: Mapping[str, str], project: str | None,
             experiment_name: str | None) -> bool:
    return ((project is None or labels.get("project") == project)
            and (experiment_name is None or labels.get("experiment_name") == experiment_name))


def _row(alert: dict) -> dict:
    labels = dict(alert.get("labels") or {})
    return {"name": labels.get("alertname", ""), "state": alert.get("state", ""),
            "labels": labels, "annotations": dict(alert.get("annotations") or {}),
            "active_at": alert.get("activeAt"), "value": alert.get("value")}


def _notification(am_alerts: list[dict]) -> dict[tuple, str]:
    """Alertmanager's word per alert label set: sent to receivers, silenced (or
    inhibited), or received and not yet routed."""
    out = {}
    for a in am_alerts:
        key = tuple(sorted((a.get("labels") or {}).items()))
        state = (a.get("status") or {}).get("state", "unknown")
        out[key] = NOTIFICATION.get(state, state)
    return out


def report(settings: Settings, services: Mapping[str, ServiceInfo],
           project: str | None = None, experiment_name: str | None = None,
           timeout: float = 3.0) -> dict:
    """Every pending and firing alert (of one run, if named), firing first; and whether
    Prometheus and Alertmanager answered."""

    out: dict = {"alerts": [], "prometheus": OK, "alertmanager": OK,
                 "rules": "loaded" if settings.alerts.enabled else
                 "off (alerts.enabled is false): no alert can fire"}
    runs, why = _runs(services.get("prometheus"))
    if not runs:
        out["prometheus"] = f"Prometheus {why}"
        out["error"] = (f"cannot tell which alerts fire: Prometheus {why}. "
                        "`rl-insight server status` shows what runs")
        return out
    try:
        raw = promapi.alerts(prometheus_url(settings), timeout, prometheus_auth(settings))
    except promapi.ApiUnavailable as exc:
        out["prometheus"] = str(exc)
        out["error"] = (f"cannot tell which alerts fire: {exc}. Prometheus may be starting "
                        "or restarting; `rl-insight server status` shows it and its log")
        return out
    rows = [_row(a) for a in raw if _matches(a.get("labels") or {}, project,
                                             experiment_name)]

    am_runs, am_why = _runs(services.get("alertmanager"))
    notified: dict[tuple, str] | None = None
    if not am_runs:
        out["alertmanager"] = f"Alertmanager {am_why}: firing alerts are listed here, " \
                              "not delivered"
    else:
        try:
            notified = _notification(promapi.alertmanager_alerts(
                alertmanager_url(settings), timeout, alertmanager_auth(settings)))
        except promapi.ApiUnavailable as exc:
            out["alertmanager"] = str(exc)
    for row in rows:
        if notified is not None and row["state"] == "firing":
            key = tuple(sorted(row["labels"].items()))
            # a firing alert reaches Alertmanager at the next evaluation; until then
            # (or if it cannot be sent) it is not there yet
            row["notification"] = notified.get(key, "not received yet")
        else:
            row["notification"] = None
    rows.sort(key=lambda r: (STATE_ORDER.get(r["state"], 2), r["name"],
                             r["labels"].get("project", ""),
                             r["labels"].get("experiment_name", "")))
    out["alerts"] = rows
    return out


def run_of(labels: Mapping[str, str]) -> str:
    """``project/experiment_name``, or ``(cluster)`` for alerts about no run."""
    p = labels.get("project")
    return f"{p}/{labels.get('experiment_name', '')}" if p else "(cluster)"
