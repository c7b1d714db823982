"""The server's HTTP application (FastAPI, so every route is in the OpenAPI schema).

One plain ASGI middleware does what every route needs: the token check on writes,
back-pressure on the intake (pushes and spans: beyond ``server.max_intake_inflight``
requests at once, 503 with ``Retry-After`` instead of an unbounded queue, so reads such as
/healthz and /metrics stay answered), the start-time header and request counting.
Routes live in rl_insight/server/routes, one module per concern.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException

from rl_insight.common.version import __version__
from rl_insight.server import auth
from rl_insight.server.httpio import ARRIVED, ClientGone, HttpError, error, read_asgi_body
from rl_insight.server.ingest.bodies import BodyError
from rl_insight.server.ingest.grouping import PushError
from rl_insight.server.ingest.intake import Direct, answer_error
from rl_insight.server.ingest.otlp import OtlpError
from rl_insight.server.ingest.targets import TargetError
from rl_insight.server.routes import (
    alerts,
    anatomy,
    bound,
    compare,
    core,
    experiments,
    imports,
    profiles,
    push,
    schema,
    targets,
    traces,
)
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="RL-Insight server", version=__version__,
                  description="The one address an RL training cluster talks to.")
    token = state.settings.server.token
    started = f"{state.started_at:.6f}"  # lets pushers notice a restarted server

    app.add_middleware(Guard, state=state, token=token, started=started)

    # one handler for every refusal that carries its HTTP status: routes raise, not
    # translate (the stores' and parsers' own errors say what was wrong)
    for kind in (HttpError, BodyError, TargetError, PushError, OtlpError):
        app.add_exception_handler(kind, lambda _request, exc: error(exc.status, str(exc)))
    # a client gone before its body arrived hears nothing; no traceback in the log
    app.add_exception_handler(ClientGone, lambda _request, _exc: error(
        400, "the client closed the request before its body arrived"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        """Starlette's own refusals as ``{"error": ...}``; a 405's Allow names the methods
        of every route on the path (Starlette names the first route's only)."""
        headers = dict(exc.headers or {})
        status, detail = exc.status_code, exc.detail
        allowed = allowed_methods(app, request.scope) if status in (404, 405) else []
        if status == 404 and allowed:  # a path only the intake's own route takes
            status, detail = 405, "Method Not Allowed"
        if status == 405:
            headers["Allow"] = ", ".join(allowed)
        return error(status, f"{detail}: {request.method} {request.url.path}"
                     + (f"; this path takes {headers['Allow']}" if status == 405
                        else ""), headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        parts = ["/".join(str(x) for x in e.get("loc", ())) + ": " + e.get("msg", "")
                 for e in exc.errors()]
        return error(400, "invalid request: " + "; ".join(parts))

    for module in (core, targets, experiments, push, traces, anatomy, bound, compare,
                   alerts, profiles, imports):
        app.include_router(module.router(state))

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = schema.finish(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi
    return app


def allowed_methods(app: FastAPI, scope) -> list[str]:
    from starlette.routing import Match

    def leaves(routes):  # FastAPI keeps an included router's routes inside it
        for route in routes:
            inner = getattr(getattr(route, "original_router", None), "routes", None)
            yield from leaves(inner) if inner is not None else (route,)

    # the intake's methods, answered by the Guard before the app (server/ingest/intake.py)
    methods = {m for m in ("PUT", "POST") if Direct.route(m, scope["path"])}
    for route in leaves(app.routes):
        if getattr(route, "methods", None) and route.matches(scope)[0] != Match.NONE:
            methods |= route.methods
    return sorted(methods)


# writes that carry data (a profiler file's upload streams its own body, to disk)
# the headers every answer carries, as ASGI spells them (lower case, bytes)
STARTED, PROFILES = (h.lower().encode() for h in (paths.STARTED_HEADER, paths.PROFILES_HEADER))
INTAKE = (paths.TRACES, paths.PUSH_ROOT, paths.PUSH_BATCH, paths.IMPORT_ROOT)


class Guard:
    """Token check, intake back-pressure, start-time header, request counting: plain
    ASGI (a fraction of what an ``http`` middleware costs per request). Span exports
    and pushes go down the intake's own path (server/ingest/intake.py), the rest to the app."""

    def __init__(self, app, state: ServerState, token: str, started: str) -> None:
        self.app = app
        self.state = state
        self.token = token
        self.started = started.encode()
        self.limit = state.settings.server.max_intake_inflight
        self.direct = Direct(state)  # the intake's own path past the framework
        self.inflight = 0
        # registrations, bindings and other control writes one at a time, so a burst of
        # them (1,000 replicas starting) takes the intake's turns one by one instead of
        # queueing each lane request behind many (bench/registrations.py)
        self.control = asyncio.Semaphore(1)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[ARRIVED] = time.monotonic()
        method = scope["method"]
        status = 500
        intake = method in auth.WRITE_METHODS and scope["path"].startswith(INTAKE)
        direct = self.direct.route(method, scope["path"]) if intake else None

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()),
                                      (STARTED, self.started),
                                      (PROFILES, str(self.state.profiles.asked).encode())]
            await send(message)

        if not auth.allowed(method, scope["path"], _header(scope, b"authorization"),
                            self.token):
            # a browser asking for a page gets the basic-auth prompt (the token as the
            # password); programs get the bearer challenge
            browser = method == "GET" and "text/html" in (_header(scope, b"accept") or "")
            challenge = b'Basic realm="rl-insight"' if browser else b'Bearer realm="rl-insight"'
            await answer_error(sending, 401, "this server needs its token for writes and "
                                             "for reads of run data: `Authorization: Bearer "
                                             "<token>` (a browser: any user name, the token "
                                             "as the password); set RL_INSIGHT_TOKEN to the "
                                             "token `rl-insight server start` printed (on "
                                             "the server's host: the file state/token under "
                                             "its RL_INSIGHT_HOME)",
                               extra=((b"www-authenticate", challenge),))
        elif intake and self.inflight >= self.limit:
            self.state.metrics.intake_refused.inc()
            await answer_error(sending, 503, f"the server is busy ({self.inflight} intake "
                                             "requests in progress, server.max_intake_inflight"
                                             "); nothing was stored: send again after "
                                             "Retry-After seconds", retry_after=1)
        else:
            self.inflight += intake
            try:
                if direct:
                    await self.direct(scope, receive, sending, direct)
                elif method in auth.WRITE_METHODS and not intake:
                    await self.control_write(scope, receive, sending)
                else:
                    await self.app(scope, receive, sending)
            finally:
                self.inflight -= intake
            if intake:
                self.state.metrics.intake_seconds.labels(direct or _route(scope)).observe(
                    time.monotonic() - scope[ARRIVED])
        self.state.metrics.requests.labels(method, direct or _route(scope), str(status)).inc()


    async def control_write(self, scope, receive, send) -> None:
        """A control write in its turn. Its body is read first, outside the turn: a client
        that sends its body slowly (a flaky link) holds up nobody else's registration."""
        try:
            body = await read_asgi_body(receive, _header(scope, b"content-length"),
                                        targets.MAX_BODY, "4 MiB for a registration, a "
                                        "binding or another control request")
        except HttpError as exc:
            await answer_error(send, exc.status, str(exc))
            return
        except ClientGone:
            return
        given = False

        async def replay():
            nonlocal given
            if given:
                return await receive()  # what the client does next (a disconnect)
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async with self.control:
            await self.app(scope, replay, send)


def _route(scope) -> str:
    return getattr(scope.get("route"), "path", "unmatched")


def _header(scope, name: bytes) -> str | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v.decode("latin-1")
    return None
