"""The step anatomy of a run: its per-step rows, as `rl-insight report` prints them."""

from __future__ import annotations

from fastapi import APIRouter, Query

from rl_insight.server.httpio import HttpError
from rl_insight.server.routes import schema
from rl_insight.server.state import ServerState
from rl_insight.wire import paths


def router(state: ServerState) -> APIRouter:
    r = APIRouter()

    @r.get(paths.ANATOMY, summary="A run's step anatomy: one row per finished step",
           responses=schema.answers(400, 404))
    def anatomy(project: str, experiment_name: str,
                last: int = Query(0, ge=0, description="the last N steps; 0: all")) -> dict:
        state.anatomy.update()
        rows = state.anatomy.rows(project, experiment_name)
        if rows is None:
            raise not_seen(state, project, experiment_name)
        if last:
            rows = rows[-last:]
        return {"project": project, "experiment_name": experiment_name,
                "steps": [row.as_dict() for row in rows]}

    @r.get(paths.ANATOMY_EXPLAIN, summary="Why a step was slow: its parts against the "
           "median of the steps before it, the critical path down to its tail requests, "
           "its goodput", responses=schema.answers(400, 404))
    def explain_step(project: str, experiment_name: str, step: int,
                     baseline: int = Query(10, ge=1, le=1000,
                                           description="the steps before it to compare "
                                                       "with")) -> dict:
        from rl_insight.anatomy import explain

        got = anatomy(project, experiment_name, 0)["steps"]
        if not any(s["step"] == step for s in got):
            have = [s["step"] for s in got]
            raise HttpError(404, f"step {step} of {project}/{experiment_name} is not final "
                                 f"here (final steps: {_ranges(have) or 'none yet'}); a step "
                                 "is final a few seconds after the trainer logs it")
        out = explain.explain(got, step, baseline)
        culprit = out.get("culprit")
        if culprit:  # the culprit rank's newest profile: where its time went, in code
            out["profile"] = _newest_profile(project, experiment_name, culprit["rank"])
        return out

    def _newest_profile(project: str, experiment_name: str, rank: str) -> dict | None:
        done = [p for p in state.profiles.list(project, experiment_name, rank)
                if p["status"] == "done"]
        if not done:
            return None
        p = done[-1]
        return {"id": p["id"], "method": p["method"], "seconds": p["seconds"],
                "top_frames": p["top_frames"][:5], "reason": p["reason"],
                "download": paths.PROFILE_SPEEDSCOPE.format(pid=p["id"])}

    @r.get(paths.ANATOMY_CHANGES, summary="What changed over a run: its sustained "
           "regressions (onset, size, the parts they live in) and what moved with each, "
           "ranked; a finished run the server no longer follows is analysed from "
           "Prometheus", responses=schema.answers(400, 404))
    def changes(project: str, experiment_name: str,
                source: str = Query("live", pattern="^(live|prometheus)$",
                                    description="live: what the server follows; "
                                                "prometheus: analysed again from the "
                                                "run's step series alone")) -> dict:
        state.anatomy.update()
        out = state.changes.report(project, experiment_name,
                                   from_prometheus=source == "prometheus")
        for change in (out or {}).get("changes", []):
            rank = (change.get("scope") or {}).get("rank")
            if rank is not None:
                change["profile"] = _newest_profile(project, experiment_name, str(rank))
        if out is None:
            known = [f"{r['project']}/{r['experiment_name']}" for r in state.anatomy.runs()]
            raise HttpError(404, f"no final step of {project}/{experiment_name} on this "
                                 "server nor in its Prometheus (runs followed: "
                                 f"{', '.join(known[-10:]) or 'none'}); check the names "
                                 "with `rl-insight server experiments list`")
        return out

    @r.get(paths.ANATOMY_RUNS, summary="Runs with a step anatomy, and their step counts")
    def runs() -> dict:
        return {"runs": state.anatomy.runs()}

    return r


def not_seen(state: ServerState, project: str, experiment: str) -> HttpError:
    """The 404 of a run no step mark or lane state of reached this server."""
    known = [f"{r['project']}/{r['experiment_name']}" for r in state.anatomy.runs()]
    return HttpError(404, f"no step marks or lane states of {project}/{experiment} reached "
                          f"this server (runs with some: {', '.join(known[-10:]) or 'none'}); "
                          "check the names with `rl-insight server experiments list`")


def _ranges(steps: list[int]) -> str:
    """1-5, 8, 10-12"""
    out, start, prev = [], None, None
    for s in sorted(steps):
        if start is None:
            start = prev = s
        elif s == prev + 1:
            prev = s
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = s
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out)
