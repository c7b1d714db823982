"""Liveness, the services report, and /metrics (the server's own metrics merged with
every pushed group: rl_insight.server.ingest.pushstore.PushStore.exposition)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import HTMLResponse
from prometheus_client import CONTENT_TYPE_LATEST

from rl_insight.common.version import __version__
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get("/", summary="The status page (HTML)", response_class=HTMLResponse)
    def status_page() -> HTMLResponse:
        from rl_insight.common import netaddr
        from rl_insight.server.analyses import alerts, promapi, statuspage
        from rl_insight.server.endpoints import prometheus_auth, prometheus_url

        report = state.services_report()
        health = promapi.target_health(prometheus_url(state.settings), timeout=1.0,
                                       auth=prometheus_auth(state.settings)) or {}
        targets = []
        for t in state.targets.list():
            h = health.get((t["job_name"], t["target"]))
            targets.append({**t, **(h or {"health": "unknown" if not health else
                                     "pending"})})
        exps = [{**e, "targets": len(state.targets.list(e["project"], e["experiment_name"])),
                 "push_groups": len(state.pushes.groups_of(
                     lambda labels, e=e: labels.get("project") == e["project"] and
                     labels.get("experiment_name") == e["experiment_name"])),
                 "lanes": len(state.lanes.list(e["project"], e["experiment_name"])),
                 "bound": state.anatomy.summary(e["project"], e["experiment_name"])}
                for e in state.experiments.list()]
        grafana = next((svc for svc in report["services"] if svc["name"] == "grafana"), {})
        grafana_url = netaddr.http_url(state.advertise_host, state.settings.grafana.port) \
            if grafana.get("ready") else None
        firing = alerts.report(state.settings, state.services, timeout=1.0)
        return HTMLResponse(statuspage.render(report, exps, targets, state.lanes.list(),
                                              grafana_url, alerts=firing))

    @r.get(paths.HEALTH, summary="Liveness of the server process")
    def healthz() -> dict:
        return {"status": "ok", "version": __version__}

    @r.get(paths.SERVICES, summary="Managed services, their state and client URLs")
    def services() -> dict:
        return state.services_report()

    @r.get(paths.METRICS, summary="Every pushed group plus the server's own metrics",
           response_class=Response)
    def metrics() -> Response:
        visible = lambda labels: state.experiments.archived_reason(labels) is None  # noqa: E731
        body = state.pushes.exposition(state.metrics.registry.collect(), visible)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return r
