"""Experiments: list, their targets with Prometheus' view of them, archive, restore,
finish; each run's configuration (POST a hand-over, GET it)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from rl_insight.runconfig.flatten import bound
from rl_insight.server.analyses import promapi
from rl_insight.server.endpoints import prometheus_auth, prometheus_url
from rl_insight.server.httpio import HttpError, json_body
from rl_insight.server.ingest.bodies import RunConfig, RunIdentity, read
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths
from rl_insight.wire import runconfig as runconfig


async def identity(request: Request) -> tuple[str, str]:
    run = read(RunIdentity, await json_body(request, 64 * 1024, "64 KiB"))
    return run.project, run.experiment_name


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    def summary(exp: dict) -> dict:
        p, e = exp["project"], exp["experiment_name"]
        match = lambda labels: (labels.get("project") == p  # noqa: E731
                                and labels.get("experiment_name") == e)
        return {**exp, "targets": len(state.targets.list(p, e)),
                "push_groups": len(state.pushes.groups_of(match)),
                "lanes": len(state.lanes.list(p, e))}

    @r.get(paths.EXPERIMENTS, summary="Every experiment and its status")
    def list_experiments() -> dict:
        return {"experiments": [summary(x) for x in state.experiments.list()]}

    @r.get(paths.EXPERIMENT_TARGETS,
           summary="An experiment's targets, with Prometheus' health and last error",
           responses=schema.answers(400, 404))
    def experiment_targets(project: str, experiment_name: str) -> dict:
        exp = state.experiments.get(project, experiment_name)
        if exp is None:
            raise HttpError(404, f"no experiment {project}/{experiment_name}; "
                                 "GET /api/v1/experiments lists them")
        health = promapi.target_health(prometheus_url(state.settings),
                                       auth=prometheus_auth(state.settings))
        rows = []
        for t in state.targets.list(project, experiment_name):
            h = (health or {}).get((t["job_name"], t["target"]))
            if health is None:
                h = {"health": "unknown", "last_error": "Prometheus does not answer"}
            elif h is None:
                h = {"health": "not scraped" if exp.status == "archived" else "pending",
                     "last_error": ""}
            rows.append({**t, **h})
        return {"project": project, "experiment_name": experiment_name,
                "status": exp.status, "targets": rows}

    def _set(status: str):
        async def handler(request: Request) -> dict:
            p, e = await identity(request)
            try:
                exp = await run_in_threadpool(state.set_experiment_status, p, e, status)
            except KeyError:
                raise HttpError(404, f"no experiment {p}/{e}; GET {paths.EXPERIMENTS} "
                                     "lists them") from None
            return {"project": exp.project, "experiment_name": exp.experiment_name,
                    "status": exp.status}
        return handler

    for action, status in (("archive", "archived"), ("restore", "active"),
                           ("finish", "finished")):
        r.add_api_route(paths.EXPERIMENT_ACTIONS[action], _set(status), methods=["POST"],
                        summary=f"{action.capitalize()} an experiment",
                        openapi_extra=schema.json_body(RunIdentity),
                        responses=schema.answers(*schema.WRITE, 404))
    _configs(r, state)
    return r


def _configs(r: APIRouter, state: ServerState) -> None:
    """A run's configuration: kept with the run (server/ingest/runconfigs.py)."""

    @r.post(runconfig.CONFIG_PATH, openapi_extra=schema.json_body(RunConfig),
            responses=schema.answers(*schema.WRITE, 409),
            summary="Keep a run's configuration (flattened, secrets masked; the latest "
                    "hand-over wins)")
    async def put_config(request: Request) -> dict:
        body = read(RunConfig, await json_body(request, runconfig.MAX_BODY_BYTES,
                                               "1 MiB for a run's configuration"))
        why = state.experiments.archived_reason(
            {"project": body.project, "experiment_name": body.experiment_name})
        if why:
            raise HttpError(409, why)
        flat = bound(body.values)  # masked and bounded again: any client is held to it
        flat.masked = max(flat.masked, body.masked)  # ours masked the same values already
        for kind in flat.cut:
            flat.cut[kind] += body.cut.get(kind, 0)

        def store() -> dict:
            state.experiments.touch(body.project, body.experiment_name)
            return state.configs.put(body.project, body.experiment_name, flat, body.source)
        return await state.writes.run(store)

    @r.get(runconfig.CONFIG_PATH, responses=schema.answers(*schema.READ, 404),
           summary="A run's configuration: its flattened keys and values, what was masked "
                   "and what its bounds cut")
    def get_config(project: str, experiment_name: str) -> dict:
        got = state.configs.get(project, experiment_name)
        if got is None:
            raise HttpError(404, f"no configuration of {project}/{experiment_name}: its "
                                 "training process handed none over (rl_insight."
                                 "log_config, or its framework's tracker)")
        return got
