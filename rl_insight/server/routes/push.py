"""The Pushgateway-compatible routes the app answers: DELETE /metrics/job/<job>{/<l>/<v>}
and POST /api/v1/push/batch (several groups in one request, each applied with the same
rules and answered on its own). PUT and POST /metrics/... never reach the app: the Guard
answers them on the intake's own path (server/ingest/intake.py); the schema documents them
(routes/schema.py ``INTAKE_PATHS``)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from rl_insight.server.httpio import HttpError, json_body
from rl_insight.server.ingest.pushstore import PushError, check_grouping, parse_grouping_key
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState

MAX_BATCH_GROUPS = 10_000
BATCH_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["groups"], "properties": {"groups": {
        "type": "array", "maxItems": MAX_BATCH_GROUPS, "items": {
            "type": "object", "required": ["job", "text"], "properties": {
                "job": {"type": "string", "minLength": 1},
                "grouping": {"type": "object", "propertyNames": {
                    "pattern": schema.LABEL_NAME, "not": {"const": "job"}},
                             "additionalProperties": {"type": "string"}},
                # any string: a text that does not parse is answered in its result
                "text": {"type": "string", "description": "the Prometheus text format, "
                         "as a push body; its result says 400 when it does not parse"},
                "replace": {"type": "boolean", "default": False,
                            "description": "PUT semantics (replace the group); "
                                           "else POST (replace the pushed families)"}}}}}}}}}}


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    limit = state.settings.push.max_body_bytes

    def _shape(groups: list) -> list[tuple[dict, str, bool]]:
        """Each group's labels, text and mode; a group of the wrong shape refuses the
        whole request (400, naming it), as the schema says."""
        out = []
        for i, g in enumerate(groups):
            try:
                if not isinstance(g, dict):
                    raise PushError(400, "each group must be an object with job and text")
                labels = check_grouping(g.get("job"), g.get("grouping", {}))
                text, replace = g.get("text"), g.get("replace", False)
                if not isinstance(text, str):
                    raise PushError(400, "'text' must be the text format, as a string")
                if not isinstance(replace, bool):
                    raise PushError(400, "'replace' must be true or false")
            except PushError as exc:
                raise HttpError(400, f"groups[{i}]: {exc}") from None
            out.append((labels, text, replace))
        return out

    def _apply_batch(groups: list) -> list[dict]:
        out = []
        for labels, text, replace in _shape(groups):
            try:
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
                                            "{status, error?}"},
                       **schema.answers(*schema.WRITE)})
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

    def _group_path(request: Request) -> str:
        """The whole grouping key (the documented ``{job}`` is its first pair)."""
        return request.scope["path"][len("/metrics/"):]

    job_param = Path(json_schema_extra=schema.JOB_VALUE)

    @r.delete("/metrics/job/{job}", summary="Delete a group (Pushgateway DELETE)",
              status_code=202, description=schema.PUSH_PATH, response_class=Response,
              responses={202: {"description": "deleted (or there was no such group)"},
                         **schema.answers(400, 401)})
    def delete(request: Request, job: str = job_param) -> Response:
        return _delete(_group_path(request))

    def _delete(path: str) -> Response:
        grouping = parse_grouping_key(path)
        state.pushes.delete(grouping)
        state.metrics.pushes.labels("delete", "ok").inc()
        return Response(status_code=202)

    # the grouping key's further pairs and the @base64 forms: the same work, described
    # by the operation above
    @r.delete("/metrics/{path:path}", status_code=202, include_in_schema=False)
    def delete_any(path: str) -> Response:
        return _delete(path)

    return r
