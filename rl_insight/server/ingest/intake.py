"""The intake: span exports (``POST /v1/traces``) and pushes (``PUT``/``POST /metrics/...``),
most of what the server is sent.

``accept_spans`` and ``accept_push`` do the work for ``Direct``, the one path the Guard
sends these requests down (the app has no route for them; routes/schema.py
``INTAKE_PATHS`` documents them): read the body, do the work on the intake's own thread,
answer. It skips the
framework's routing, middleware stack and per-request thread hand-off, which cost more
than a lane actor's push itself once its shape is known (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from rl_insight.config import Settings
from rl_insight.server.httpio import ClientGone, HttpError, read_asgi_body, text_body
from rl_insight.server.ingest import engine_requests, framework_spans, otlp, spanwalk
from rl_insight.server.ingest.grouping import PushError, parse_grouping_key
from rl_insight.server.ingest.otlp import OtlpError
from rl_insight.wire import paths
from rl_insight.wire.laneid import TRAINER as TRAINER_LANE

if TYPE_CHECKING:
    from rl_insight.server.analyses.anatomy import AnatomyStore
    from rl_insight.server.analyses.selfmetrics import ServerMetrics
    from rl_insight.server.ingest.engine_requests import RequestMetrics
    from rl_insight.server.ingest.experiments import ExperimentStore
    from rl_insight.server.ingest.lane_stats import LaneStats
    from rl_insight.server.ingest.pushstore import PushStore
    from rl_insight.server.ingest.recent import RecentSpans
    from rl_insight.server.ingest.relay import Relay
    from rl_insight.server.ingest.spool import Spool
    from rl_insight.server.ingest.store import Store

log = logging.getLogger(__name__)



class IntakeParts(Protocol):
    """The parts the intake works on, which the server's state provides: named here so
    the intake depends on what it uses, not on the module that wires the server."""

    settings: Settings
    store: Store
    spool: Spool
    relay: Relay
    pushes: PushStore
    experiments: ExperimentStore
    lanes: LaneStats
    recent: RecentSpans
    anatomy: AnatomyStore
    requests: RequestMetrics
    metrics: ServerMetrics
    intake_pool: ThreadPoolExecutor
    writes: Batches


PROTOBUF_TYPES = ("application/vnd.google.protobuf",)
SPANS_ROUTE = paths.TRACES
PUSH_ROUTE = paths.PUSH_ANY  # the label the app's route gives these requests


def accept_spans(state: IntakeParts, body: bytes, ctype: str, encoding: str
                 ) -> tuple[bytes, str]:
    """Decode an OTLP export, gather its lane statistics, spool it for Tempo; the
    answer's (body, media type). Raises OtlpError with the status to answer."""
    limit = state.settings.traces.max_body_bytes
    raw = otlp.decompress(body, encoding, limit)
    req = otlp.decode(raw, ctype)
    traces = state.settings.traces
    # one walk: each span once, its texts put to the policy, its attributes read once,
    # then handed to what wants it: its state row, else a framework's meaning (which may
    # put it on a lane), its lane's figures, an engine's request
    spans, texts = spanwalk.walk(req, traces.text_policy, traces.text_max_bytes)
    n = len(spans)
    if texts:
        state.metrics.span_texts.labels(traces.text_policy).inc(texts)
    told: list[tuple[int, spanwalk.StateRow]] = []  # (the span's position, its row)
    lanes: list[tuple] = []
    engine: list[tuple] = []
    found = framework_spans.Found()
    owners: list[int] = []  # the span each of found.rows came from
    known: dict[int, dict] = {}
    for i, s in enumerate(spans):
        row = spanwalk.state_row(s)
        if row is not None:
            told.append((i, row))
        else:
            had = len(found.rows)
            framework_spans.take(s, found)  # may put it on a lane: lane_at reads that
            owners += [i] * (len(found.rows) - had)
            request = engine_requests.request_at(s, known)
            if request is not None:
                engine.append(request)
        lanes.append(spanwalk.lane_at(s))
    # a lane's span whose id it saw lately is a copy (a sender that timed out on a
    # request the server had taken sends it again): counted once, in every store
    runs, copies = state.lanes.observe(lanes)
    told += zip(owners, found.rows, strict=True)
    rows = [row for i, row in told if i not in copies]
    state.anatomy.add_timings(found.timings)
    state.anatomy.add_buckets(found.buckets)
    for (framework, outcome), count in found.counts.items():
        state.metrics.framework_spans.labels(framework, outcome).inc(count)
    for project, experiment in runs:
        state.experiments.touch(project, experiment)
    state.recent.add(rows)
    state.anatomy.add(rows)
    if any(r.lane == TRAINER_LANE for r in rows) and framework_spans.imported(spans):
        state.anatomy.update()  # an imported step's mark: its row now, before the next's
    engine = state.requests.observe(engine) if engine else []
    if engine:
        state.anatomy.add_requests(engine)
        state.recent.add_requests(engine)
    annotated = found.annotated
    plain = ctype.split(";")[0].strip().lower() == otlp.PROTOBUF and not (texts or annotated)
    payload = raw if plain else req.SerializeToString()
    if n:
        state.relay.submit(payload, n)
    return otlp.response(ctype)


def accept_push(state: IntakeParts, path: str, ctype: str, body: bytes, replace: bool
                ) -> None:
    """A Pushgateway PUT (replace) or POST to ``/metrics/<path>``, counted; raises
    PushError or HttpError with the status to answer."""
    method = "put" if replace else "post"
    try:
        grouping = parse_grouping_key(path)
        if ctype.split(";")[0].strip() in PROTOBUF_TYPES:
            raise HttpError(415, "only the Prometheus text format is accepted; push "
                                 "with Content-Type text/plain")
        state.pushes.push(grouping, text_body(body), replace)
    except (PushError, HttpError):
        state.metrics.pushes.labels(method, "refused").inc()
        raise
    state.metrics.pushes.labels(method, "ok").inc()
    state.experiments.touch_labels(grouping)


class Direct:
    """The intake's requests answered in plain ASGI; their work is done in batches on the
    state's intake thread (``Batches``)."""

    def __init__(self, state: IntakeParts) -> None:
        self.state = state

    @staticmethod
    def route(method: str, path: str) -> str | None:
        """The route label of a request this path answers, else None."""
        if method == "POST" and path == SPANS_ROUTE:
            return SPANS_ROUTE
        if method in ("PUT", "POST") and path.startswith(paths.PUSH_ROOT):
            return PUSH_ROUTE
        return None

    async def __call__(self, scope, receive, send, route: str) -> None:
        headers = {k: v for k, v in scope.get("headers", ()) if k in _WANTED}
        ctype = headers.get(b"content-type", b"").decode("latin-1")
        try:
            if route == SPANS_ROUTE:
                limit, setting = self.state.settings.traces.max_body_bytes, \
                    "traces.max_body_bytes"
            else:
                limit, setting = self.state.settings.push.max_body_bytes, \
                    "push.max_body_bytes"
            body = await read_asgi_body(receive, headers.get(b"content-length"), limit,
                                        setting)
            if route == SPANS_ROUTE:
                content, media = await self.state.writes.run(
                    accept_spans, self.state, body, ctype,
                    headers.get(b"content-encoding", b"").decode("latin-1"))
                await answer(send, 200, content, media)
            else:
                await self.state.writes.run(accept_push, self.state,
                                       scope["path"][len(paths.PUSH_ROOT):], ctype, body,
                                       scope["method"] == "PUT")
                await answer(send, 200, b"", None)
        except (HttpError, PushError, OtlpError) as exc:
            await answer_error(send, exc.status, str(exc))
        except ClientGone:
            pass
        except Exception:  # the app's own 500, with the cause in the server's log
            log.exception("intake request %s %s failed", scope["method"], scope["path"])
            await answer_error(send, 500, "the server failed on this request; its log "
                                          "(rl-insight server logs) says why")


class Batches:
    """Group commit: the work of the requests that arrived meanwhile runs as one batch on
    the intake thread, each request's writes a savepoint (undone alone when it fails),
    all of them one commit, then each is answered. One batch at a time; one hand-off to
    the thread and back per batch, not per request. Work is done in arrival order."""

    def __init__(self, state: IntakeParts) -> None:
        self.state = state
        self.pending: list[tuple] = []
        self.running = False

    def run(self, fn, *args) -> asyncio.Future:
        """``fn(*args)``'s result (or exception) once its batch is committed."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending.append((fn, args, fut))
        if not self.running:
            self._next(loop)
        return fut

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        items, self.pending = self.pending, []
        self.running = bool(items)
        if items:
            job = loop.run_in_executor(self.state.intake_pool, self._batch, items)
            job.add_done_callback(lambda done: self._answer(loop, items, done))

    def _batch(self, items: list[tuple]) -> tuple[list[tuple[bool, object]], str | None]:
        """On the intake thread: each request's work in a savepoint of the batch's one
        transaction; (results, None), or (nothing, why) when the commit failed. Then
        nothing of the batch is stored, its memory changes are undone with it
        (Store.on_rollback), and the spool is read back from the database, here rather
        than on the event loop."""
        out = []
        try:
            with self.state.store.batch():
                for fn, args, _ in items:
                    try:
                        with self.state.store.transaction():  # undone alone if it fails
                            out.append((True, fn(*args)))
                    except Exception as exc:  # this request's answer, not the batch's
                        out.append((False, exc))
        except Exception as exc:
            why = f"{exc.__class__.__name__}: {exc}"
            log.error("the intake could not commit a batch of %d requests: %s", len(items),
                      why)
            try:
                self.state.spool.resync()  # what it holds in memory, as the database has it
            except Exception:
                log.exception("reading the spool back after a failed commit failed")
            return [], why
        return out, None

    def _answer(self, loop, items: list[tuple], job: asyncio.Future) -> None:
        """Answer the batch's requests, then start the next batch, whatever happens here
        (a batch that is never followed would leave every later request waiting)."""
        try:
            if job.cancelled():
                results, failed = [], "the server is stopping"
            elif job.exception() is not None:
                results, failed = [], str(job.exception())
            else:
                results, failed = job.result()
            for i, (_, _, fut) in enumerate(items):
                if fut.done():
                    continue
                if failed:
                    fut.set_exception(HttpError(
                        503, f"the server cannot store this ({failed}); nothing was stored: "
                             f"send again, and check the disk of {self.state.store.path}"))
                    continue
                ok, value = results[i]
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
        except Exception:
            log.exception("answering a batch of %d intake requests failed", len(items))
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(HttpError(500, "the server failed on this request; "
                                                     "its log (rl-insight server logs) says "
                                                     "why"))
        finally:
            self._next(loop)


_WANTED = (b"content-type", b"content-length", b"content-encoding")


async def answer(send, status: int, body: bytes, media: str | None,
                 extra: tuple = ()) -> None:
    headers = [(b"content-length", str(len(body)).encode()), *extra]
    if media:
        headers.append((b"content-type", media.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def answer_error(send, status: int, message: str, retry_after: int | None = None,
                       extra: tuple = ()) -> None:
    """``{"error": message}``, as every refusal of the server is answered."""
    if retry_after is not None:
        extra = (*extra, (b"retry-after", str(retry_after).encode()))
    await answer(send, status, json.dumps({"error": message}).encode(), "application/json",
                 extra)
