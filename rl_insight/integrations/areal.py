"""AReaL (areal-project/AReaL 2.0.0, formerly inclusionAI/AReaL; ``areal`` 1.0.4 on PyPI):
its ``StatsLogger`` wrapped.

AReaL's logging backends are fixed; every trainer commits each step's stats through
``trainer.stats_logger.commit(epoch, step, global_step, data)`` (areal 1.0.4
``areal/utils/stats_logger.py``; the PPO trainer at ``rl_trainer.py``). One line after
the trainer is built wraps it:

    with PPOTrainer(config, ...) as trainer:
        rl_insight.integrations.areal.attach(trainer)
        trainer.train(...)

Then each committed dict's keys are gauges, the step is the one AReaL's StatsLogger
logged it at (``max(global_step, last_commit_step + 1)``), and its ``timeperf/*`` timers
are the step's parts. With AReaL's perf tracer on (``perf_tracer.enabled=true``), its
Chrome-trace files are followed as they are written: the driver's (the trainer loop's
scopes, on the driver lane) and, in the single-controller mode AReaL runs by default,
every actor worker's (its work on its rank's lane). Its inference
servers (``AREAL_LLM_SERVER_ADDRS``, or the rollout controller's) are registered so the
rollout dashboards fill. The trainer's config (its ``GRPOConfig`` or ``PPOConfig``) is the
run's configuration, handed over. In AReaL main's colocated weight update through AWEX
(after 2.0.0) the handover from the rollout to training and each rank's part of the
weight update, which AReaL leaves untimed, are measured around its own calls
(rl_insight/integrations/areal_awex.py).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

import rl_insight
from rl_insight import frameworks
from rl_insight.integrations import areal_awex, kit
from rl_insight.integrations.tracker import FrameworkTracker

FRAMEWORK = frameworks.named("areal")
COUNT_SUFFIX = "__count"  # AReaL's own commit drops these


_rank = kit.process_rank  # AReaL's commit does nothing but on rank 0


def run_names(config: Any) -> tuple[str, str]:
    """The run: ``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set, else
    AReaL's experiment and trial names."""
    sl = getattr(config, "stats_logger", None)
    return kit.run_names(
        (getattr(config, "experiment_name", None), getattr(sl, "experiment_name", None)),
        (getattr(config, "trial_name", None), getattr(sl, "trial_name", None)),
        "areal", "trial")


def attach(trainer: Any) -> FrameworkTracker | None:
    """Wrap the trainer's stats logger (its ``commit`` and ``close``); follow its perf
    tracer; register its inference servers. Never raises."""
    try:
        return _attach(trainer)
    except Exception:
        import logging

        logging.getLogger(__name__).warning(
            "rl-insight: attaching to AReaL's trainer failed; training goes on without "
            "monitoring", exc_info=True)
        return None


def _attach(trainer: Any) -> FrameworkTracker:
    config = getattr(trainer, "config", None)
    project, experiment = run_names(config)
    # a followed perf trace marks each step exactly (its events' global_step): the
    # commits then carry no marks of their own, which would win by arriving first
    following = follow_perf_tracer(config, project, experiment)
    tracker = FrameworkTracker(FRAMEWORK, project, experiment, marks=not following,
                               run_config=config)
    # AWEX's colocated handover and its ranks' weight sync, which AReaL leaves untimed
    handover = areal_awex.install(trainer, lanes=following)
    wrap(trainer.stats_logger, tracker, handover.take if handover else None)
    if _rank() == 0:
        register_servers(trainer, config)
    return tracker


def wrap(stats_logger: Any, tracker: FrameworkTracker,
         measured: Callable[[], dict[str, float]] | None = None) -> None:
    """``commit`` and ``close`` of one StatsLogger, each calling AReaL's own first;
    ``measured``: the adapter's own timings of the step, added to its first dict."""
    commit, close = stats_logger.commit, stats_logger.close

    numbered = {"last": -1}  # the StatsLogger's own count, where it has none to read

    @functools.wraps(commit)
    def commit_and_log(epoch: int, step: int, global_step: int, data: Any) -> Any:
        out = commit(epoch, step, global_step, data)
        if _rank() == 0:  # AReaL's own commit does nothing on the other ranks
            items = [data] if isinstance(data, dict) else list(data or [])
            first = _first_step(stats_logger, global_step, len(items), numbered)
            extra = measured() if measured is not None else {}
            for i, item in enumerate(items):
                data = {k: v for k, v in item.items() if not str(k).endswith(COUNT_SUFFIX)}
                tracker.log({**data, **extra} if i == 0 else data, first + i)
        return out

    @functools.wraps(close)
    def close_and_finish() -> Any:
        try:
            return close()
        finally:
            tracker.finish()

    stats_logger.commit = commit_and_log
    stats_logger.close = close_and_finish


def _first_step(stats_logger: Any, global_step: int, n: int, numbered: dict) -> int:
    """The step AReaL logged a commit's first dict at: ``max(global_step,
    last_commit_step + 1)`` (areal/utils/stats_logger.py l.145, the same in 1.0.4 and
    2.0.0), read back from the logger's own ``_last_commit_step`` (restored on resume
    with its state), else counted alike here."""
    last = getattr(stats_logger, "_last_commit_step", None)
    if isinstance(last, int) and n:
        first = last - n + 1
    else:
        first = max(int(global_step), numbered["last"] + 1)
    numbered["last"] = first + n - 1
    return first


def server_addresses(trainer: Any) -> list[str]:
    """AReaL's inference servers, as its remote engines find them: the launcher's
    ``AREAL_LLM_SERVER_ADDRS``, else the rollout controller's servers."""
    addrs = [a.strip() for a in os.environ.get("AREAL_LLM_SERVER_ADDRS", "").split(",")
             if a.strip()]
    if addrs:
        return addrs
    infos = getattr(getattr(trainer, "rollout", None), "server_infos", None) or []
    return [f"{i.host}:{i.port}" for i in infos if getattr(i, "host", None)]


def register_servers(trainer: Any, config: Any) -> None:
    addrs = server_addresses(trainer)
    if not addrs:
        return
    mode = str(getattr(config, "allocation_mode", "") or "")
    backend = "vllm" if "vllm" in mode.lower() else "sglang"
    rl_insight.update_prometheus_config(addrs, backend, [{"replica": i}
                                                         for i in range(len(addrs))])


def follow_perf_tracer(config: Any, project: str, experiment: str) -> bool:
    """AReaL's perf-tracer files, when its tracer is on, with its clock's zero taken from
    the tracer itself; whether they are followed. In its single-controller mode (the
    default since 1.0.4, the only one in 2.0 but for "legacy" SPMD) the driver's tracer
    writes ``perf_tracer/master/traces-r0.jsonl`` and each actor worker its own
    ``perf_tracer/actor/traces-r{i}.jsonl`` from its own process: this one process
    follows them all. In SPMD every rank runs this and follows its own file."""
    pt = getattr(config, "perf_tracer", None)
    if pt is None or not getattr(pt, "enabled", False):
        return False
    from areal.utils import perf_tracer

    if not perf_tracer.is_configured():
        return False
    tracer = perf_tracer.get_tracer()
    path = getattr(tracer, "_output_path", None)
    origin = getattr(tracer, "_origin_ns", None)
    if not path:
        return False
    anchor = None if origin is None else \
        time.time() - (time.perf_counter_ns() - origin) / 1e9
    from rl_insight.integrations import follow

    say_rank_filter(os.environ.get(RANK_FILTER_ENV))
    patterns = trace_patterns(str(path), single_controller())
    # the workers' tracers are configured by the driver's RPCs right after its own
    # (rl_trainer.py _config_perf_tracer): their clocks' zero is the driver's, a few ms on
    return any([follow.start(p, FRAMEWORK, project, experiment, anchor) is not None
                for p in patterns])


RANK_FILTER_ENV = "AREAL_PERF_TRACER_RANKS"  # AReaL after 2.0.0 (ea306c9ca): ranks traced
TRACED_ROLES = ("actor",)  # the workers whose work the table puts on rank lanes


def single_controller() -> bool:
    """AReaL's own answer where it has one (areal/utils/environ.py), else its rule: not
    ``AREAL_SPMD_MODE``."""
    try:
        from areal.utils.environ import is_single_controller

        return bool(is_single_controller())
    except Exception:
        return os.environ.get("AREAL_SPMD_MODE", "").lower() not in ("1", "true", "yes")


def trace_patterns(own: str, single: bool) -> list[str]:
    """The files to follow: the driver's own, and in single-controller mode each traced
    role's workers' beside it (``perf_tracer/<role>/traces-r*.jsonl``)."""
    role_dir = os.path.dirname(own)
    if not single or os.path.basename(role_dir) != "master":
        return [own]
    root = os.path.dirname(role_dir)
    name = os.path.basename(own).split("-r", 1)[0]  # traces
    return [own] + [os.path.join(root, role, f"{name}-r*.jsonl") for role in TRACED_ROLES]


def say_rank_filter(value: str | None) -> set[int] | None:
    """AReaL traces only the ranks ``AREAL_PERF_TRACER_RANKS`` names (unset, empty or
    ``all``: every rank): said once, so an empty rank lane is not taken for lost data.
    The ranks named, or None for all."""
    if value is None or not value.strip() or value.strip().lower() == "all":
        return None
    ranks: set[int] = set()
    for part in (p.strip() for p in value.split(",")):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                ranks.update(range(lo, hi + 1))
            elif part:
                ranks.add(int(part))
        except ValueError:
            continue  # AReaL ignores such a part too
    import logging

    logging.getLogger(__name__).warning(
        "rl-insight: %s=%s: AReaL traces ranks %s only; the other ranks' lanes stay empty "
        "by AReaL's setting, not for lost data (unset it to trace every rank)",
        RANK_FILTER_ENV, value, ", ".join(map(str, sorted(ranks))) or "none")
    return ranks
