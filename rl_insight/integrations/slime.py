"""slime (THUDM/slime): one line in the entry script, after its arguments are parsed.

    args = parse_args()
    rl_insight.integrations.slime.attach(args)

slime logs from three processes (624b824a): the rollout manager (``rollout/*``,
``perf/rollout_time``, ``eval/*``), the Megatron main rank (``train/*`` per optimizer step,
``rollout/*`` and ``perf/*_time`` per rollout) and the driver; every dict goes through
``slime.observability.logging_utils.log(args, metrics, step_key)``. ``attach`` sets
slime's own import hooks (``--custom-megatron-init-path``, ``--custom-rollout-log-
function-path``; a hook already set is chained, not replaced) to this module's, so each
of those processes hands its dicts here as well: the step is ``rollout/step``, the
anatomy comes from ``perf/*_time`` (the weight sync and the save are timed after their
rollout logged: the table moves them back one step). On every training rank, slime's
``Timer`` marks the rank's lane (``rank_<r>``: ``actor_update``,
``actor_compute_log_prob``, ``ref_compute_log_prob``, ``update_weights``); the rollout
manager puts each rollout's generation on the driver's
lane (``sglang_generate``, from the samples' own traces) and registers every SGLang
engine behind its router (job ``sglang``, labels ``replica`` and ``model``). The driver
hands slime's parsed arguments over as the run's configuration.

slime versions with ``BACKEND_REGISTRY`` (``slime/utils/tracking/manager.py``: main has
none at 624b824a, pull request 1591 adds it) take :class:`RLInsightBackend` there as
``rl_insight`` (``--use-rl-insight``, from :func:`add_arguments`); ``attach`` and the
hooks register it in each process they reach. A process that set up its tracking before
a hook of ours ran (the rollout manager, in its ``__init__``) keeps the patched ``log``
until its manager has the backend, so ``rollout/*``, ``eval/*`` and ``perf/rollout_time``
arrive whatever the order.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import Any

import rl_insight
from rl_insight import frameworks
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker
from rl_insight.wire.attributes import LANE_ATTR, SEGMENT_ATTR, STATE_INTERVAL, STEP_ATTR
from rl_insight.wire.laneid import DRIVER

log = logging.getLogger(__name__)

FRAMEWORK = frameworks.named("slime")
NAME = "rl_insight"
MEGATRON_INIT = "rl_insight.integrations.slime.megatron_init"
ROLLOUT_LOG = "rl_insight.integrations.slime.rollout_log"
GENERATE_STATE = "sglang_generate"

_tracker: FrameworkTracker | None = None
_in_manager = False  # slime's tracking manager has our backend in this process


def run_names(args: Any) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME``, else slime's wandb or
    TensorBoard names, else ``slime`` and the checkpoint's name."""
    return kit.run_names(
        (getattr(args, n, None) for n in ("rl_insight_project", "wandb_project",
                                          "tb_project_name")),
        (getattr(args, n, None) for n in ("rl_insight_experiment_name", "wandb_group",
                                          "tb_experiment_name")),
        "slime", os.path.basename(str(getattr(args, "hf_checkpoint", "") or "run").rstrip("/")))


def tracker(args: Any) -> FrameworkTracker:
    """This process's tracker, named after the run (the same in every process: the
    driver's ``args`` reach the others pickled)."""
    global _tracker
    if _tracker is None:
        _tracker = FrameworkTracker(FRAMEWORK, *run_names(args))
    return _tracker


def attach(args: Any) -> Any:
    """In the driver, after parsing: this module's hooks into slime's, the run's names
    into ``args`` (pickled to every actor); returns ``args``. Never raises."""
    try:
        project, name = run_names(args)
        args.rl_insight_project, args.rl_insight_experiment_name = project, name
        args.use_rl_insight = True
        for attr, ours in (("custom_megatron_init_path", MEGATRON_INIT),
                           ("custom_rollout_log_function_path", ROLLOUT_LOG)):
            theirs = getattr(args, attr, None)
            if theirs and theirs != ours:
                setattr(args, f"rl_insight_chained_{attr}", theirs)
            setattr(args, attr, ours)
        register_backend()
        tracker(args)
        rl_insight.log_config(args, source=FRAMEWORK.name)  # the run's: from the driver only
        _patch_logging(args)
        # slime's finish_tracking is imported by name in train.py: the run ends with the
        # driver, which named it
        atexit.register(tracker(args).finish)
    except Exception:
        log.warning("rl-insight: attaching to slime failed; training goes on without "
                    "monitoring", exc_info=True)
    return args


def add_arguments(parser: Any) -> Any:
    """slime's ``parse_args(add_custom_arguments=...)``: ``--use-rl-insight`` and the
    run's names."""
    group = parser.add_argument_group("rl-insight")
    group.add_argument("--use-rl-insight", action="store_true", dest="use_rl_insight",
                       help="report to RL-Insight (RL_INSIGHT_SERVER_URL)")
    group.add_argument("--rl-insight-project", default=None)
    group.add_argument("--rl-insight-experiment-name", default=None)
    return parser


class RLInsightBackend:
    """A ``TrackingBackend`` of slime's registry (``init(args, *, primary)``,
    ``log(metrics, step)``, ``finish()``)."""

    def init(self, args: Any, *, primary: bool = True, **kwargs: Any) -> None:
        global _in_manager
        self.args = args
        tracker(args)
        _in_manager = True  # this process's tracking manager delivers from now on

    def log(self, metrics: dict, step: int | None = None) -> None:
        tracker(self.args).log(metrics, step)

    def log_samples(self, samples: list, step: int | None = None) -> None:
        """Nothing: samples are no time series."""

    def log_checkpoint(self, checkpoint_dir: str, metadata: dict | None = None) -> None:
        """Nothing: a checkpoint is no time series."""

    def finish(self) -> None:
        if _tracker is not None:
            _tracker.finish()


def register_backend() -> bool:
    """``rl_insight`` in slime's ``BACKEND_REGISTRY``, where slime has one."""
    try:
        from slime.utils.tracking import manager
    except ImportError:
        return False
    manager.BACKEND_REGISTRY[NAME] = (RLInsightBackend, "use_rl_insight")
    return True


def _patch_logging(args: Any) -> None:
    """Every dict this process logs, here too (slime calls its logging module's ``log``).
    Where slime has a backend registry the backend is registered as well, but a process
    may have set up its tracking before this ran (the rollout manager does in its
    ``__init__``, before any hook of ours): its dicts then come through the patch until
    the registry's manager has the backend (its ``init`` ran here), never both ways."""
    register_backend()
    logging_utils = _logging_module()
    if logging_utils is None:
        return
    original = logging_utils.log
    if getattr(original, "_rl_insight", False):
        return

    def log_too(args_: Any, metrics: dict, step_key: str) -> Any:
        out = original(args_, metrics, step_key)
        if not _in_manager:
            tracker(args_).log(metrics, metrics.get(step_key))
        return out

    log_too._rl_insight = True
    logging_utils.log = log_too


def _logging_module() -> Any:
    """slime's logging module: slime/observability/ on main (624b824a), slime/utils/
    before it moved there (and in the registry's pull request, 1591 at 3906ba15)."""
    import importlib

    for name in ("slime.observability.logging_utils", "slime.utils.logging_utils"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _chained(args: Any, attr: str):
    path = getattr(args, f"rl_insight_chained_{attr}", None)
    if not path:
        return None
    from slime.utils.misc import load_function

    return load_function(path)


# -- in each Megatron rank (slime's --custom-megatron-init-path) ---------------------------

def megatron_init(args: Any) -> None:
    """Every training rank: its dicts here, its Timer's phases on its lane."""
    try:
        tracker(args)
        _patch_logging(args)
        _patch_timer(kit.process_rank())
    except Exception:
        log.warning("rl-insight: slime's training rank hook failed", exc_info=True)
    chained = _chained(args, "custom_megatron_init_path")
    if chained is not None:
        chained(args)


def _patch_timer(rank: int) -> None:
    """slime's ``Timer.start``/``end`` (one per process) also enter and leave the
    rank lane's state of the timer, where the timer names a phase."""
    from slime.observability.timer import Timer

    if getattr(Timer.start, "_rl_insight", False):
        return
    start, end = Timer.start, Timer.end
    lane = f"rank_{rank}"
    open_: dict[str, Any] = {}

    def start_too(self: Any, name: str) -> Any:
        out = start(self, name)
        state = FRAMEWORK.timers.get(name)
        if state is not None and name not in open_:
            block = rl_insight.trace_state(state, state_lane_id=lane)
            block.__enter__()
            open_[name] = block
        return out

    def end_too(self: Any, name: str) -> Any:
        try:
            return end(self, name)
        finally:
            block = open_.pop(name, None)
            if block is not None:
                block.__exit__(None, None, None)

    start_too._rl_insight = end_too._rl_insight = True
    Timer.start, Timer.end = start_too, end_too


# -- in the rollout manager (slime's --custom-rollout-log-function-path) -------------------

_engines_registered = False


def rollout_log(rollout_id: int, args: Any, samples: list, rollout_extra_metrics: Any,
                rollout_time: float) -> bool:
    """Each rollout, before slime logs it: the generation on the driver's lane, the
    engines registered (once); then slime's own logging (False), unless a chained hook
    says it logged instead."""
    global _engines_registered
    try:
        tracker(args)
        _patch_logging(args)
        if not _engines_registered:
            _engines_registered = register_engines(args)
        start, end = generation_window(samples, rollout_time)
        rl_insight.trace_span(name=GENERATE_STATE, start_time_ns=start, end_time_ns=end,
                              attributes={LANE_ATTR: DRIVER, STEP_ATTR: rollout_id,
                                          "samples": len(samples or []),
                                          SEGMENT_ATTR: STATE_INTERVAL})
    except Exception:
        log.warning("rl-insight: slime's rollout hook failed", exc_info=True)
    chained = _chained(args, "custom_rollout_log_function_path")
    if chained is not None:
        return bool(chained(rollout_id, args, samples, rollout_extra_metrics, rollout_time))
    return False


def generation_window(samples: list, rollout_time: float) -> tuple[int, int]:
    """From the first request's start to the last one's end, as the samples' traces
    hold them (``sglang_generate`` spans, slime/observability/trace_utils.py); without
    traces, the rollout's time up to now."""
    first, last = None, None
    for sample in samples or []:
        trace = getattr(sample, "trace", None) or {}
        for ev in trace.get("events", ()) if isinstance(trace, dict) else ():
            if ev.get("name") != GENERATE_STATE or not isinstance(ev.get("ts"), (int, float)):
                continue
            if ev.get("type") == "span_start":
                first = ev["ts"] if first is None else min(first, ev["ts"])
            elif ev.get("type") == "span_end":
                last = ev["ts"] if last is None else max(last, ev["ts"])
    now = time.time()
    if first is None or last is None or last < first:
        first, last = now - max(float(rollout_time or 0.0), 0.0), now
    return int(first * 1e9), int(last * 1e9)


def register_engines(args: Any) -> bool:
    """Every SGLang engine behind slime's router(s) (``GET /workers``), job ``sglang``,
    labels ``replica`` and ``model`` (upstream's slime dashboard selects on both)."""
    import requests

    routers = dict(getattr(args, "sglang_model_routers", None) or {})
    if not routers and getattr(args, "sglang_router_ip", None):
        model = os.path.basename(str(getattr(args, "hf_checkpoint", "") or "model").rstrip("/"))
        routers = {model: (args.sglang_router_ip, args.sglang_router_port)}
    if not routers:
        return False
    addresses, labels = [], []
    for model, (ip, port) in routers.items():
        r = requests.get(f"http://{ip}:{port}/workers", timeout=5)
        r.raise_for_status()
        for worker in r.json().get("workers", []):
            url = str(worker.get("url", ""))
            if url:
                addresses.append(url.split("://", 1)[-1].rstrip("/"))
                labels.append({"replica": len(labels), "model": str(model)})
    if addresses:
        rl_insight.update_prometheus_config(addresses, "sglang", labels)
    return bool(addresses)
