"""Which side bounds a run and what a change would buy (rl_insight/anatomy/bound.py,
verdict.py, whatif.py): `rl-insight report --bound`."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rl_insight.server.routes import schema
from rl_insight.server.routes.anatomy import not_seen
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get(paths.ANATOMY_BOUND, summary="Which side bounds a run: its steps' GPU-seconds "
           "by role and cause, the verdict (rollout-, training-, weight-sync- or tail-bound, "
           "or balanced) with the numbers that make it, and what a change would buy",
           responses=schema.answers(400, 404))
    def bound(project: str, experiment_name: str,
              last: int = Query(0, ge=0, description="the last N steps; 0: the whole run"),
              add_replicas: int = Query(1, ge=-1024, le=1024,
                                        description="the what-if's N more rollout replicas "
                                                    "(negative: fewer)"),
              trainer_speedup: float = Query(2.0, gt=1.0, le=100.0,
                                             description="the what-if's trainer K times "
                                                         "as fast"),
              steps: str = Query("", pattern=r"^(\d+:\d+)?$",
                                 description="only steps A to B (A:B), before --last")
              ) -> dict:
        from rl_insight.anatomy import boundreport
        from rl_insight.anatomy.bound import sum_replicas

        state.anatomy.update()
        got = state.anatomy.rows(project, experiment_name)
        if got is None:
            raise not_seen(state, project, experiment_name)
        rows = [r for r in got if r.bound is not None]
        if steps:
            a, b = (int(x) for x in steps.split(":"))
            rows = [r for r in rows if a <= r.step <= b]
        window = rows[-last:] if last else rows
        lean = [{"step": r.step, "duration_s": r.duration_s,
                 "bound": r.bound.as_dict(replicas=False)} for r in rows]
        out = boundreport.report(lean, last, add_replicas, trainer_speedup,
                                 sum_replicas(r.bound for r in window))
        return {"project": project, "experiment_name": experiment_name, **out}

    return r
