"""The Pushgateway-compatible routes the app answers: DELETE /metrics/job/<job>{/<l>/<v>}
and POST /api/v1/push/batch (several groups in one request, each applied with the same
rules and answered on its own, the batch in the intake's group commit like every other
write). PUT and POST /metrics/... never reach the app: the Guard
answers them on the intake's own path (server/ingest/intake.py); the schema documents them
(routes/schema.py ``INTAKE_PATHS``)."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request, Response

from rl_insight.server.httpio import json_body
from rl_insight.server.ingest.bodies import PushBatch, PushGroup, read
from rl_insight.server.ingest.grouping import PushError, parse_grouping_key
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    limit = state.settings.push.max_body_bytes

    def _apply_batch(groups: list[PushGroup]) -> list[dict]:
        """On the intake thread, in its group commit: each group a savepoint of the
        batch's transaction (a refused group is undone alone), the batch one commit with
        the other requests' writes of its round."""
        out = []
        for g in groups:
            labels, replace = g.labels(), g.replace
            try:
                state.pushes.push(labels, g.text, replace)
                state.experiments.touch_labels(labels)
                state.metrics.pushes.labels("put" if replace else "post", "ok").inc()
                out.append({"status": 200})
            except PushError as exc:
                state.metrics.pushes.labels("batch", "refused").inc()
                out.append({"status": exc.status, "error": str(exc)})
        return out

    @r.post(paths.PUSH_BATCH, openapi_extra=schema.json_body(PushBatch),
            summary="Several pushes in one request, each answered on its own",
            responses={200: {"description": "one result per group, in order: "
                                            "{status, error?}"},
                       **schema.answers(*schema.WRITE)})
    async def batch(request: Request) -> dict:
        batch = read(PushBatch, await json_body(request, limit, "push.max_body_bytes"))
        return {"results": await state.writes.run(_apply_batch, batch.groups)}

    def _group_path(request: Request) -> str:
        """The whole grouping key (the documented ``{job}`` is its first pair)."""
        return request.scope["path"][len(paths.PUSH_ROOT):]

    job_param = Path(json_schema_extra=schema.JOB_VALUE)

    @r.delete(paths.PUSH_GROUP, summary="Delete a group (Pushgateway DELETE)",
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
    @r.delete(paths.PUSH_ANY, status_code=202, include_in_schema=False)
    def delete_any(path: str) -> Response:
        return _delete(path)

    return r
