"""A profiler file uploaded into a run: ``POST /api/v1/import/<profiler>`` (one route per
reader that declares its file's schema, rl_insight/profiler/readers.py), the file as the
body, gzip or not. The body is spooled to disk as it arrives (``traces.import_max_bytes``
at most), read with the reader ``rl-insight import`` uses, streamed, and its ranks'
spans and step marks go through the intake as an import's (rl_insight/profiler/export.py):
the same lanes, steps and answers as the CLI's. A file that cannot be read is refused
whole (400, saying why), nothing of it kept."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from rl_insight.profiler import export, readers
from rl_insight.profiler.model import BadFile
from rl_insight.profiler.stages import phase_of
from rl_insight.server.httpio import HttpError
from rl_insight.server.ingest.intake import accept_spans
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths
from rl_insight.wire.frameworks import IMPORT_PROCESS

PROTOBUF = "application/x-protobuf"
READ_ERRORS = (BadFile, OSError, EOFError, ValueError, UnicodeError, RecursionError)


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    for name, body in readers.uploadable().items():
        _route(r, state, name, body)
    return r


async def spool(request: Request, limit: int, into: Path) -> int:
    """The body written to ``into`` as it arrives; 413 past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the file is {declared} bytes; the limit is {limit} "
                             "(traces.import_max_bytes); import it with `rl-insight import`")
    size = 0
    with open(into, "wb") as f:
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, f"the file is over the limit of {limit} bytes "
                                         "(traces.import_max_bytes); import it with "
                                         "`rl-insight import`")
                f.write(chunk)
        except OSError as exc:
            raise HttpError(503, f"the server cannot spool the file ({exc}); nothing was "
                                 "kept: free disk space, then send it again") from None
    if size == 0:
        raise HttpError(400, "no file in the body: send the trace file as it is (gzip "
                             "or not)")
    return size


def _route(r: APIRouter, state: ServerState, profiler: str, body: dict) -> None:
    @r.post(paths.IMPORT.format(profiler=profiler),
            summary=f"Import one {profiler} profiler file into a run: its ranks' stages as "
                    "rank lanes, its step's mark (the server's token)",
            description="The body is the file as the profiler wrote it, gzip or not. "
                        "`filename`: its name as written (verl's names carry the role "
                        "and the step); `step` where the name tells none. Upload a step's "
                        "files in step order; each widens its step's mark. Then POST "
                        f"{paths.FINISH} makes the run's last step final.",
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/json": {"schema": body}}}},
            responses=schema.answers(*schema.WRITE))
    async def upload(request: Request,
                     project: str = Query(min_length=1, max_length=256),
                     experiment_name: str = Query(min_length=1, max_length=256),
                     filename: str | None = Query(None, max_length=1024,
                                                  description="the file's name as written"),
                     step: int | None = Query(None, ge=0, le=2**31 - 1,
                                              description="its RL step, where the name "
                                                          "tells none")) -> dict:
        limit = state.settings.traces.import_max_bytes
        folder = state.settings.data_dir / "imports"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".upload")
            os.close(fd)
        except OSError as exc:
            raise HttpError(503, f"the server cannot spool the file ({exc}); nothing "
                                 "was kept") from None
        path = Path(tmp)
        try:
            size = await spool(request, limit, path)
            traces = await run_in_threadpool(_read, profiler, path, filename, step)
        except ClientDisconnect:
            raise HttpError(400, "the client closed the request before its body "
                                 "arrived") from None
        finally:
            path.unlink(missing_ok=True)
        spans = []
        for t in traces:
            spans += export.rank_spans(t, profiler, f"{IMPORT_PROCESS}: {filename or 'upload'}")
        marks = export.marks(export.steps_of(traces))
        sent = 0
        for payload, n in export.exports([*spans, *marks], project, experiment_name,
                                         profiler):
            await state.writes.run(accept_spans, state, payload, PROTOBUF, "")
            sent += n
        return {"project": project, "experiment_name": experiment_name,
                "profiler": profiler, "bytes": size,
                "ranks": sorted({t.rank for t in traces}),
                "steps": sorted({t.step for t in traces if t.step is not None}),
                "stages": len(spans), "spans": sent,
                "unmarked": sum(1 for t in traces for e in t.ranges()
                                if phase_of(e.name) is None)}


def _read(profiler: str, path: Path, filename: str | None, step: int | None) -> list:
    """The file's ranks, read whole before anything is sent; 400 saying why."""
    try:
        traces = list(readers.get(profiler).read(path, name=filename, step=step,
                                                 strict=True))
    except READ_ERRORS as exc:
        why = str(exc) if isinstance(exc, BadFile) else \
            f"cannot be read ({exc.__class__.__name__}: {exc})"
        raise HttpError(400, f"not imported: {why}") from None
    return traces
