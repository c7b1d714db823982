"""`GET /api/v1/alerts`: the alerts now pending or firing, from the managed Prometheus
(and Alertmanager's word on their delivery). Always 200: a service that does not answer
is named in the answer with what to do."""

from __future__ import annotations

from fastapi import APIRouter

from rl_insight.server.analyses import alerts
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get(paths.ALERTS, summary="Pending and firing alerts, of one run if named")
    def list_alerts(project: str | None = None, experiment_name: str | None = None) -> dict:
        return alerts.report(state.settings, state.services, project, experiment_name)

    return r
