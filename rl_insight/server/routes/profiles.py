"""Profiles of trainer ranks' code: ask for one, list them, read one, download it as
speedscope JSON; the lane actors' side: what waits to be captured, take one, answer it
(rl_insight/server/analyses/profiles.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from rl_insight.server.analyses.profiles import ProfileError
from rl_insight.server.httpio import HttpError, json_body
from rl_insight.server.ingest.bodies import ProfileRequest, ProfileResult, ProfileTake, read
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths

MAX_RESULT_BYTES = 64 * 1024 * 1024  # a capture's body; profiles.max_bytes bounds what is kept


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    store = state.profiles

    def refused(exc: ProfileError) -> HttpError:
        return HttpError(exc.status, str(exc))

    @r.post(paths.PROFILES, status_code=202,
            summary="Profile a trainer rank of a run: its node's lane actor captures it "
                    "with py-spy (rate-limited; the server's token)",
            openapi_extra=schema.json_body(ProfileRequest),
            responses=schema.answers(*schema.WRITE, 403, 404, 422, 429))
    async def ask(request: Request) -> dict:
        body = read(ProfileRequest, await json_body(request, 64 * 1024, "64 KiB"))
        try:
            p = await run_in_threadpool(store.request, body.project, body.experiment_name,
                                        body.rank, body.seconds)  # its index synced
        except ProfileError as exc:
            raise refused(exc) from None
        return p.as_dict()

    @r.get(paths.PROFILES, summary="Profiles kept and asked for, oldest first",
           responses=schema.answers(*schema.READ))
    def listing(project: str | None = None, experiment_name: str | None = None,
                rank: str | None = None, status: str | None = None) -> dict:
        rows = store.pending() if status == "pending" else \
            store.list(project, experiment_name, rank)
        if status not in (None, "pending"):
            rows = [p for p in rows if p["status"] == status]
        return {"profiles": [p for p in rows if (project is None or p["project"] == project)
                             and (experiment_name is None
                                  or p["experiment_name"] == experiment_name)]}

    @r.get(paths.PROFILE, summary="One profile: its status and top frames",
           responses=schema.answers(*schema.READ, 404))
    def one(pid: str) -> dict:
        p = store.get(pid)
        if p is None:
            raise HttpError(404, f"no profile {pid}; GET /api/v1/profiles lists them")
        return p

    @r.get(paths.PROFILE_SPEEDSCOPE,
           summary="The profile as speedscope JSON (speedscope and Perfetto open it)",
           responses=schema.answers(*schema.READ, 404))
    def download(pid: str) -> Response:
        text = store.data(pid)
        if text is None:
            p = store.get(pid)
            why = "no such profile" if p is None else f"it is {p['status']}" + (
                f": {p['error']}" if p.get("error") else "")
            raise HttpError(404, f"profile {pid} has no file ({why}); GET /api/v1/profiles "
                                 "lists them")
        return Response(text, media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{pid}.speedscope.json"'})

    @r.post(paths.PROFILE_TAKE, summary="A lane actor takes a request to capture",
            openapi_extra=schema.json_body(ProfileTake),
            responses=schema.answers(*schema.WRITE, 404, 409))
    async def take(pid: str, request: Request) -> dict:
        body = read(ProfileTake, await json_body(request, 64 * 1024, "64 KiB"))
        try:
            return (await run_in_threadpool(store.take, pid, body.by)).as_dict()
        except ProfileError as exc:
            raise refused(exc) from None

    @r.post(paths.PROFILE_RESULT, summary="A lane actor's capture, or why it "
            "could not", openapi_extra=schema.json_body(ProfileResult),
            responses=schema.answers(*schema.WRITE, 404, 409, 413))
    async def result(pid: str, request: Request) -> JSONResponse:
        body = read(ProfileResult, await json_body(request, MAX_RESULT_BYTES, "64 MiB"))
        try:
            p = await run_in_threadpool(
                store.result, pid, {"method": body.method, "process": body.process,
                                    "error": body.error, "top_frames": body.top_frames},
                body.data)  # the file and the index written and synced
        except ProfileError as exc:
            raise refused(exc) from None
        return JSONResponse(p.as_dict())

    return r
