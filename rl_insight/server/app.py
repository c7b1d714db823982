"""The server's HTTP application (FastAPI, so every route is in the OpenAPI schema).

Middleware does what every route needs: the token check on writes and request
counting. Routes live in rl_insight/server/routes, one module per concern.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError

from rl_insight.server import auth
from rl_insight.server.otlp import OtlpError
from rl_insight.server.pushstore import PushError
from rl_insight.server.routes import alerts, anatomy, core, experiments, push, targets, traces
from rl_insight.server.routes.common import HttpError, error
from rl_insight.server.state import ServerState
from rl_insight.server.targets import TargetError
from rl_insight.version import __version__


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="RL-Insight server", version=__version__,
                  description="The one address an RL training cluster talks to.")
    token = state.settings.server.token
    started = f"{state.started_at:.6f}"  # lets pushers notice a restarted server

    @app.middleware("http")
    async def guard_and_count(request: Request, call_next):
        if not auth.allowed(request.method, request.headers.get("authorization"), token):
            response = error(401, "this server needs `Authorization: Bearer <token>` for "
                                  "writes; set RL_INSIGHT_TOKEN to the server's token")
        else:
            response = await call_next(request)
        response.headers["X-RL-Insight-Started"] = started
        route = request.scope.get("route")
        state.metrics.requests.labels(request.method,
                                      getattr(route, "path", "unmatched"),
                                      str(response.status_code)).inc()
        return response

    # one handler for every refusal that carries its HTTP status: routes raise, not
    # translate (the stores' and parsers' own errors say what was wrong)
    for kind in (HttpError, TargetError, PushError, OtlpError):
        app.add_exception_handler(kind, lambda _request, exc: error(exc.status, str(exc)))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError):
        parts = ["/".join(str(x) for x in e.get("loc", ())) + ": " + e.get("msg", "")
                 for e in exc.errors()]
        return error(400, "invalid request: " + "; ".join(parts))

    for module in (core, targets, experiments, push, traces, anatomy, alerts):
        app.include_router(module.router(state))
    return app
