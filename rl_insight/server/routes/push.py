"""The Pushgateway-compatible intake: PUT, POST and DELETE /metrics/job/<job>{/<l>/<v>}."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from rl_insight.server.pushstore import PushError, parse_grouping_key
from rl_insight.server.routes.common import RAW_TEXT_BODY, HttpError, read_body, text_body
from rl_insight.server.state import ServerState

PROTOBUF_TYPES = ("application/vnd.google.protobuf",)


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    limit = state.settings.push.max_body_bytes

    async def _push(request: Request, path: str, replace: bool) -> Response:
        method = "put" if replace else "post"
        try:
            grouping = parse_grouping_key(path)
            ctype = request.headers.get("content-type", "")
            if ctype.split(";")[0].strip() in PROTOBUF_TYPES:
                raise HttpError(415, "only the Prometheus text format is accepted; push "
                                     "with Content-Type text/plain")
            body = text_body(await read_body(request, limit, "push.max_body_bytes"))
            await run_in_threadpool(state.pushes.push, grouping, body, replace)
        except (PushError, HttpError):  # answered by the app's handler, counted here
            state.metrics.pushes.labels(method, "refused").inc()
            raise
        state.metrics.pushes.labels(method, "ok").inc()
        await run_in_threadpool(state.experiments.touch_labels, grouping)
        return Response(status_code=200)

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
