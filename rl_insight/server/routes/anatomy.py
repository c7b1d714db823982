"""The step anatomy of a run: its per-step rows, as `rl-insight report` prints them."""

from __future__ import annotations

from fastapi import APIRouter

from rl_insight.server.routes.common import HttpError
from rl_insight.server.state import ServerState


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get("/api/v1/anatomy", summary="A run's step anatomy: one row per finished step")
    def anatomy(project: str, experiment_name: str, last: int = 0) -> dict:
        if last < 0:
            raise HttpError(400, f"last={last}: give a number of steps, or 0 for all")
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
