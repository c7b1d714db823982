"""The step anatomy of a run: its per-step rows, as `rl-insight report` prints them."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rl_insight.server.routes import schema
from rl_insight.server.routes.common import HttpError
from rl_insight.server.state import ServerState


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get("/api/v1/anatomy", summary="A run's step anatomy: one row per finished step",
           responses=schema.answers(400, 404))
    def anatomy(project: str, experiment_name: str,
                last: int = Query(0, ge=0, description="the last N steps; 0: all")) -> dict:
        state.anatomy.update()
        rows = state.anatomy.rows(project, experiment_name)
        if rows is None:
            known = [f"{r['project']}/{r['experiment_name']}" for r in state.anatomy.runs()]
            raise HttpError(404, f"no step marks or lane states of {project}/"
                                 f"{experiment_name} reached this server (runs with some: "
                                 f"{', '.join(known[-10:]) or 'none'}); check the names "
                                 "with `rl-insight server experiments list`")
        if last:
            rows = rows[-last:]
        return {"project": project, "experiment_name": experiment_name,
                "steps": [row.as_dict() for row in rows]}

    @r.get("/api/v1/anatomy/runs", summary="Runs with a step anatomy, and their step counts")
    def runs() -> dict:
        return {"runs": state.anatomy.runs()}

    return r
