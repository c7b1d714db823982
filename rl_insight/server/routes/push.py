"""The Pushgateway-compatible intake: PUT, POST and DELETE /metrics/job/<job>{/<l>/<v>},
and POST /api/v1/push/batch: several groups in one request, each applied with the same
rules and answered on its own. The Guard answers PUT and POST on the intake's own path
(server/intake.py); these routes document them and do the same work."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from rl_insight.server import intake
from rl_insight.server.pushstore import PushError, check_grouping, parse_grouping_key
from rl_insight.server.routes.common import RAW_TEXT_BODY, HttpError, json_body, read_body
from rl_insight.server.state import ServerState

MAX_BATCH_GROUPS = 10_000
BATCH_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["groups"], "properties": {"groups": {
        "type": "array", "maxItems": MAX_BATCH_GROUPS, "items": {
            "type": "object", "required": ["job", "text"], "properties": {
                "job": {"type": "string", "minLength": 1},
                "grouping": {"type": "object",
                             "additionalProperties": {"type": "string"}},
                "text": {"type": "string",
                         "description": "the Prometheus text format, as a push body"},
                "replace": {"type": "boolean", "default": False,
                            "description": "PUT semantics (replace the group); "
                                           "else POST (replace the pushed families)"}}}}}}}}}}


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    limit = state.settings.push.max_body_bytes

    async def _push(request: Request, path: str, replace: bool) -> Response:
        body = await read_body(request, limit, "push.max_body_bytes")
        await run_in_threadpool(intake.accept_push, state, path,
                                request.headers.get("content-type", ""), body, replace)
        return Response(status_code=200)

    def _apply_batch(groups: list) -> list[dict]:
        out = []
        for g in groups:
            try:
                if not isinstance(g, dict):
                    raise PushError(400, "each group must be an object with job and text")
                labels = check_grouping(g.get("job"), g.get("grouping", {}))
                text = g.get("text")
                if not isinstance(text, str):
                    raise PushError(400, "'text' must be the text format, as a string")
                replace = g.get("replace", False) is True
                state.pushes.push(labels, text, replace)
                state.experiments.touch_labels(labels)
                state.metrics.pushes.labels("put" if replace else "post", "ok").inc()
                out.append({"status": 200})
            except PushError as exc:
                state.metrics.pushes.labels("batch", "refused").inc()
                out.append({"status": exc.status, "error": str(exc)})
        return out

    @r.post("/api/v1/push/batch", openapi_extra=BATCH_BODY,
            summary="Several pushes in one request, each answered on its own",
            responses={200: {"description": "one result per group, in order: "
                                            "{status, error?}"}})
    async def batch(request: Request) -> dict:
        body = await json_body(request, limit, "push.max_body_bytes")
        groups = body.get("groups") if isinstance(body, dict) else None
        if not isinstance(groups, list):
            raise HttpError(400, "the body must be {\"groups\": [{job, grouping, text, "
                                 "replace}, ...]}")
        if len(groups) > MAX_BATCH_GROUPS:
            raise HttpError(400, f"{len(groups)} groups in one batch; at most "
                                 f"{MAX_BATCH_GROUPS}")
        return {"results": await run_in_threadpool(_apply_batch, groups)}

    @r.put("/metrics/{path:path}", summary="Replace a group (Pushgateway PUT)",
           openapi_extra=RAW_TEXT_BODY)
    async def put(path: str, request: Request) -> Response:
        return await _push(request, path, replace=True)

    @r.post("/metrics/{path:path}",
            summary="Replace the pushed families in a group (Pushgateway POST)",
            openapi_extra=RAW_TEXT_BODY)
    async def post(path: str, request: Request) -> Response:
        return await _push(request, path, replace=False)

    @r.delete("/metrics/{path:path}", summary="Delete a group (Pushgateway DELETE)",
              status_code=202)
    def delete(path: str) -> Response:
        grouping = parse_grouping_key(path)
        state.pushes.delete(grouping)
        state.metrics.pushes.labels("delete", "ok").inc()
        return Response(status_code=202)

    return r
