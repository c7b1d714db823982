"""OTLP/HTTP trace intake (/v1/traces), relayed to Tempo through the spool, and the
per-lane statistics gathered on the way. The Guard answers span exports on the intake's
own path (server/intake.py); this route documents it and does the same work."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from rl_insight.server import intake
from rl_insight.server.routes import schema
from rl_insight.server.routes.common import read_body
from rl_insight.server.state import ServerState

TEN_YEARS_S = 10 * 365 * 86400
OTLP_BODY = {"requestBody": {"content": {
    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
    "application/json": {"schema": {"type": "object"}}}, "required": True}}


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    limit = state.settings.traces.max_body_bytes

    @r.post("/v1/traces", summary="OTLP/HTTP trace export (protobuf or JSON, gzip)",
            openapi_extra=OTLP_BODY, responses=schema.answers(*schema.WRITE, 415))
    async def traces(request: Request) -> Response:
        ctype = request.headers.get("content-type", "")
        body = await read_body(request, limit, "traces.max_body_bytes")
        content, media = await run_in_threadpool(  # an OtlpError answers itself
            intake.accept_spans, state, body, ctype,
            request.headers.get("content-encoding", ""))
        return Response(content, media_type=media)

    @r.get("/api/v1/traces/recent",
           summary="The run's recent state spans and engine requests (for export where no "
                   "Tempo runs)",
           responses=schema.answers(*schema.READ))
    def recent(project: str, experiment_name: str,
               since_s: float = Query(0.0, ge=0, le=TEN_YEARS_S, allow_inf_nan=False,
                                      description="the last seconds; 0: everything")
               ) -> dict:
        import time

        since_ns = int((time.time() - since_s) * 1e9) if since_s > 0 else 0
        rows = state.recent.spans(project, experiment_name, since_ns)
        return {"project": project, "experiment_name": experiment_name,
                "spans": [{"lane": r[0], "state": r[1], "start_ns": r[2], "end_ns": r[3],
                           "process_id": r[4], "step": r[5]} for r in rows],
                "requests": state.recent.requests(project, experiment_name, since_ns)}

    @r.get("/api/v1/lanes", summary="Per-lane statistics: last span, states, span count")
    def lanes(project: str | None = None, experiment_name: str | None = None) -> dict:
        return {"lanes": state.lanes.list(project, experiment_name)}

    return r
