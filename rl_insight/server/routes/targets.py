"""Scrape-target registration: POST (add), DELETE (remove) and GET (list)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from rl_insight.server.httpio import HttpError, json_body
from rl_insight.server.ingest.bodies import Binding, Registration, parse_binding, parse_registration
from rl_insight.server.ingest.targets import (
    LocalTargetLog,
    TargetError,
    check_allowed,
    parse_networks,
    resolve_local,
)
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths

MAX_BODY = 4 * 1024 * 1024


PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


async def parse(request: Request, log: LocalTargetLog, networks: list | None = None
                ) -> tuple[list, list]:
    """The request's targets, those naming the caller's own machine resolved to the
    caller's address; and the resolutions made."""
    body = await json_body(request, MAX_BODY, "4 MiB for registrations")
    targets = parse_registration(body)  # a TargetError answers with its own status
    peer = request.client.host if request.client else None
    proxied = any(h in request.headers for h in PROXY_HEADERS)
    try:
        targets, resolved = resolve_local(targets, peer, proxied)
    except TargetError as exc:
        log.refuse(peer, str(exc))
        raise
    if networks:  # a host name resolves through DNS: off the event loop
        await run_in_threadpool(lambda: [check_allowed(t.target, networks) for t in targets])
    return targets, resolved


def router(state: ServerState) -> APIRouter:
    r = APIRouter()
    _writes(r, state, parse_networks(state.settings.server.allowed_networks))
    _reads(r, state)
    return r


def _writes(r: APIRouter, state: ServerState, networks: list | None) -> None:
    """Registering, binding and removing targets: writes, in the intake's group commit."""

    @r.post(paths.TARGETS, openapi_extra=schema.json_body(Registration),
            summary="Register scrape targets (idempotent)",
            responses=schema.answers(*schema.WRITE, 403, 409, 422))
    async def register(request: Request) -> dict:
        targets, resolved = await parse(request, state.local_targets, networks)
        t = targets[0]
        if t.project:
            why = state.experiments.archived_reason(
                {"project": t.project, "experiment_name": t.experiment_name})
            if why:
                raise HttpError(409, why)

        def store() -> int:
            if t.project:
                state.experiments.touch(t.project, t.experiment_name)
            return state.targets.register(targets)
        # in the intake's group commit: a burst of registrations shares commits with the
        # lanes' pushes instead of queueing them behind a commit each (bench/registrations.py)
        changed = await state.writes.run(store)
        state.local_targets.note(resolved)
        out = {"registered": len(targets), "changed": changed,
               "targets": [x.as_dict() for x in targets]}
        if resolved:
            out["warnings"] = [
                f"{r.registered} names the registering machine itself; kept as {r.target} "
                f"(the address this request came from). Register {r.target} (or the "
                "engine's own routable address if it runs elsewhere) to silence this"
                for r in resolved]
        return out

    @r.post(paths.BIND, openapi_extra=schema.json_body(Binding),
            responses=schema.answers(*schema.WRITE, 409),
            summary="Name the run of an owner's targets (registered before the run was "
                    "known)")
    async def bind(request: Request) -> dict:
        body = await json_body(request, 64 * 1024, "64 KiB for a binding")
        owner, project, experiment = parse_binding(body)
        ident = {"project": project, "experiment_name": experiment}
        why = state.experiments.archived_reason(ident)
        if why:
            raise HttpError(409, why)

        def store() -> list:
            state.experiments.touch(project, experiment)
            return state.targets.bind(owner, project, experiment)
        moved = await state.writes.run(store)
        return {"owner": owner, **ident, "bound": len(moved),
                "targets": [t.as_dict() for t in moved]}

    @r.delete(paths.TARGETS, openapi_extra=schema.json_body(
        Registration), summary="Remove scrape targets (same body as registration)",
        responses=schema.answers(*schema.WRITE, 422))
    async def remove(request: Request) -> dict:
        targets, _ = await parse(request, state.local_targets)
        return {"removed": await state.writes.run(state.targets.remove, targets)}


def _reads(r: APIRouter, state: ServerState) -> None:
    """What Prometheus scrapes and holds: the query route, HTTP discovery, the list."""

    @r.get(paths.PROMETHEUS_QUERY,
           summary="An instant PromQL query, passed to Prometheus (read-only)",
           responses=schema.answers(400, 404, 422, 502, 503))
    def query(query: str = Query(..., min_length=1, json_schema_extra={
            "format": "promql", "description": "a PromQL expression; Prometheus' own 400 "
                                               "answers one it cannot parse"})) -> dict:
        return query_prometheus(state, query)

    @r.get(paths.PROMETHEUS_SD,
           summary="What the managed Prometheus scrapes, in Prometheus' HTTP service "
                   "discovery format (for a Prometheus of your own: http_sd_configs)")
    def http_sd(job: str | None = None, project: str | None = None,
                experiment_name: str | None = None) -> list[dict]:
        # a read, open without the token like every GET: it shows what
        # GET /api/v1/prometheus/targets shows already, and a Prometheus polls it
        wanted = {"job": job, "project": project, "experiment_name": experiment_name}
        return [g for g in state.targets.sd_groups()
                if all(v is None or g["labels"].get(k, "") == v for k, v in wanted.items())]

    @r.get(paths.TARGETS, summary="Registered scrape targets")
    def list_targets(project: str | None = None, experiment_name: str | None = None) -> dict:
        return {"targets": state.targets.list(project, experiment_name)}


def query_prometheus(state: ServerState, query: str) -> dict:
    """Prometheus' answer to an instant query, its own 4xx passed on, an absent or silent
    Prometheus said as such (404: switched off; 503: not installed or not answering)."""
    from rl_insight.server.analyses import promapi
    from rl_insight.server.endpoints import prometheus_auth, prometheus_url

    prom = state.services.get("prometheus")
    if prom is None or not prom.enabled:
        raise HttpError(404, "Prometheus does not run with this server "
                             f"({prom.message if prom else 'not configured'}); "
                             "`rl-insight server status` shows why")
    if not prom.installed:
        raise HttpError(503, f"Prometheus is not installed ({prom.message}); "
                             "`rl-insight server status` shows why")
    try:
        status, body = promapi.instant(prometheus_url(state.settings), query,
                                       auth=prometheus_auth(state.settings))
    except promapi.ApiUnavailable as exc:
        raise HttpError(503, f"Prometheus does not answer: {exc}; "
                             "`rl-insight server status` shows it") from None
    if status >= 400:  # its own status: a bad query is the caller's (400, 422)
        raise HttpError(status if status < 500 else 502,
                        f"Prometheus answered {status}: "
                        f"{body.get('errorType', '')} {body.get('error', '')}".strip())
    return body
