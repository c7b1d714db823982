"""What the server read from the spans it took: the recent lane states and engine
requests of a run, and per-lane statistics. The spans themselves (POST /v1/traces) never
reach the app: the Guard answers them on the intake's own path (server/ingest/intake.py); the
schema documents that route (routes/schema.py ``INTAKE_PATHS``)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths
from rl_insight.wire.attributes import PROCESS_ATTR

TEN_YEARS_S = 10 * 365 * 86400
SINCE = Query(0.0, ge=0, le=TEN_YEARS_S, allow_inf_nan=False,
              description="the last seconds; 0: everything")


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get(paths.TRACES_RECENT,
           summary="The run's recent state spans and engine requests (for export where no "
                   "Tempo runs)",
           responses=schema.answers(*schema.READ))
    def recent(project: str, experiment_name: str, since_s: float = SINCE) -> dict:
        import time

        since_ns = int((time.time() - since_s) * 1e9) if since_s > 0 else 0
        rows = state.recent.spans(project, experiment_name, since_ns)
        return {"project": project, "experiment_name": experiment_name,
                "spans": [{"lane": r[0], "state": r[1], "start_ns": r[2], "end_ns": r[3],
                           PROCESS_ATTR: r[4], "step": r[5]} for r in rows],
                "requests": state.recent.requests(project, experiment_name, since_ns)}

    @r.get(paths.TRACES_TIMELINE,
           summary="The run's merged state timeline as a Chrome trace (Perfetto, "
                   "chrome://tracing open it): a track per lane, grouped by role",
           responses=schema.answers(*schema.READ))
    def timeline(project: str, experiment_name: str, since_s: float = SINCE) -> dict:
        from rl_insight.export.timeline import chrome_trace

        got = recent(project, experiment_name, since_s)
        return chrome_trace(got["spans"], f"{project}/{experiment_name}", got["requests"])

    @r.get(paths.LANES, summary="Per-lane statistics: last span, states, span count")
    def lanes(project: str | None = None, experiment_name: str | None = None) -> dict:
        return {"lanes": state.lanes.list(project, experiment_name)}

    return r
