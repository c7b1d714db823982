"""Run against run (rl_insight/anatomy/compare.py): `rl-insight compare`."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rl_insight.server.analyses.comparison import UnknownRun
from rl_insight.server.httpio import HttpError
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths

STEPS = r"^(\d+:\d+)?$"


def _steps(text: str) -> tuple[int, int] | None:
    """A:B as the steps from the lower to the higher (B:A is the same window)."""
    if not text:
        return None
    a, b = (int(x) for x in text.split(":"))
    return min(a, b), max(a, b)


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get(paths.COMPARE, summary="Run against run: the step time of both and whether "
           "it differs significantly, what accounts for the difference (the parts of the "
           "mean step, adding up to it) and what moved with it, both runs side by side "
           "(throughput, request latencies, culprit ranks, which side bounds each), their "
           "configurations' differences", responses=schema.answers(400, 404))
    def compare(project: str, experiment_name: str,
                against: str = Query(..., description="run B's experiment name"),
                project_b: str = Query("", description="run B's project (default: A's)"),
                steps: str = Query("", pattern=STEPS, description="A's steps A:B"),
                steps_b: str = Query("", pattern=STEPS,
                                     description="B's steps A:B (default: --steps)"),
                align: str = Query("step", pattern="^(step|samples)$",
                                   description="step: each run's window as given; samples: "
                                               "over the same samples consumed (batches "
                                               "that differ)"),
                source: str = Query("live", pattern="^(live|prometheus)$",
                                    description="live: the runs the server follows (else "
                                                "Prometheus'); prometheus: both from their "
                                                "step series alone")) -> dict:
        a = (project, experiment_name)
        b = (project_b or project, against)
        state.anatomy.update()
        try:
            return state.comparison.compare(a, b, _steps(steps), _steps(steps_b), align,
                                            from_prometheus=source == "prometheus")
        except UnknownRun as exc:
            known = [f"{x['project']}/{x['experiment_name']}" for x in state.anatomy.runs()]
            raise HttpError(404, f"no final step of {exc.args[0]} on this server nor in its "
                                 f"Prometheus (runs followed: {', '.join(known[-10:]) or 'none'}"
                                 "); check the names with `rl-insight server experiments "
                                 "list`") from None

    return r
