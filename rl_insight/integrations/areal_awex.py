"""AReaL's colocated weight update through AWEX (areal-project/AReaL main after v2.0.0,
read at cbff54d6): what AReaL leaves untimed there, measured around its own calls in the
process that runs its loop.

In this mode (``actor.weight_update_mode=awex`` with controller v1:
``PPOTrainer._is_v1_awex_colocate``, ``areal/trainer/rl_trainer.py`` l.509-526) the
SGLang rollout and the Megatron actor share the GPUs. Each step, after the reference's
log-probs, the trainer hands them from the rollout to training (l.768-780):
``rollout.pause()``, ``rollout.pause_generation_sync()``, ``rollout.offload(tags=
["kv_cache"])``, ``rollout.offload(tags=["weights"])``, ``actor.onload()``, none of them
timed or traced (its TMS path's ``_offload_rollout`` times the same calls, l.548-578, but
is off in this mode, l.166-171); it pauses the rollout again before the weight update
(l.874, untimed in every mode) and saves before it (l.857-871). The weight update is
timed on the driver (``train.update_weights``, l.879-897), but each rank's part,
``MegatronEngine.update_weights`` (``areal/engine/megatron_engine.py`` l.967-993: AWEX's
execute, a barrier, finish, rank 0's KV-cache onload and ``continue_generation``, a
barrier), has no trace scope, where the xccl and disk paths' ``_update_weights_from_*``
carry one (l.2333, l.2461): the ranks' lanes lost their weight sync.

Measured here:

- the pauses (``pause``, ``pause_generation_sync``), the offloads and the actor's onload,
  as AReaL names the same calls in its TMS path: ``timeperf/rollout_pause``,
  ``timeperf/rollout_pause_generation`` (the table's part ``rollout_pause``, named),
  ``timeperf/rollout_offload``, ``timeperf/actor_onload`` (part ``offload``), added to the
  step's dict the adapter logs (AReaL's own commit, and so its wandb, is unchanged);
- each rank's weight update: in single-controller mode each actor worker's
  ``update_weights`` call, from the controller's dispatch to that worker's answer
  (``areal/infra/controller/train_controller.py`` l.558-589 and l.725-727:
  ``scheduler.async_call_engine(worker.id, "update_weights", "actor/<i>")``, ``i`` the
  worker's rank, its perf tracer's too); in SPMD the rank's own call.

Where the perf tracer is followed (the rows come from lanes), each is a span too: the
pauses and offloads on the driver lane, each rank's weight update on its lane. Without
it the rows come from the timing keys, which lanes of these spans alone would replace,
so none is sent.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rl_insight.frameworks.areal import ROLLOUT_PAUSE
from rl_insight.frameworks.phases import OFFLOAD
from rl_insight.frameworks.table import DRIVER, WEIGHTS
from rl_insight.integrations import kit
from rl_insight.wire.attributes import LANE_ATTR

log = logging.getLogger(__name__)

# the calls AReaL leaves untimed in the handover: object, method -> key, lane state
CALLS = (("rollout", "pause", "timeperf/rollout_pause", ROLLOUT_PAUSE),
         ("rollout", "pause_generation_sync", "timeperf/rollout_pause_generation",
          ROLLOUT_PAUSE),
         ("rollout", "offload", "timeperf/rollout_offload", OFFLOAD),
         ("actor", "onload", "timeperf/actor_onload", OFFLOAD))
UPDATE = "update_weights"  # the engine method each actor worker runs


def colocated(trainer: Any) -> bool:
    """AReaL's own answer (``_is_v1_awex_colocate``, since 76138cb3), else its rule:
    ``actor.weight_update_mode == "awex"`` with controller v1."""
    config = getattr(trainer, "config", None)
    check = getattr(trainer, "_is_v1_awex_colocate", None)
    try:
        if callable(check):
            return bool(check(config))
        actor = getattr(config, "actor", None)
        return getattr(actor, "weight_update_mode", None) == "awex" and \
            getattr(actor, "_version", "v1") == "v1"
    except Exception:
        return False


class Handover:
    """A step's seconds per key, taken with the step's commit; with ``lanes``, each call
    a span on the driver's lane and each rank's weight update on the rank's."""

    def __init__(self, lanes: bool, driver: bool = True) -> None:
        self.lanes, self.driver = lanes, driver  # driver: this process names the driver's
        self._seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, key: str, state: str, start_ns: int, end_ns: int) -> None:
        with self._lock:
            self._seconds[key] = self._seconds.get(key, 0.0) + (end_ns - start_ns) / 1e9
        if self.lanes and self.driver:
            _span(state, DRIVER, start_ns, end_ns)

    def rank_done(self, rank: Any, start_ns: int, end_ns: int) -> None:
        if self.lanes:
            _span(WEIGHTS, f"rank_{rank}", start_ns, end_ns)

    def take(self) -> dict[str, float]:
        """The seconds measured since the last take (the step's, at its commit)."""
        with self._lock:
            out, self._seconds = self._seconds, {}
        return out


def _span(state: str, lane: str, start_ns: int, end_ns: int) -> None:
    import rl_insight

    rl_insight.trace_span(name=state, start_time_ns=start_ns, end_time_ns=end_ns,
                          attributes={LANE_ATTR: lane})


def _timed(fn: Callable, done: Callable[[int, int], None]) -> Callable:
    """``fn`` as it was, its wall time handed to ``done`` (sync, or a coroutine function
    awaited), whatever it returns or raises; ``done`` never raises into it."""
    def report(start: int) -> None:
        try:
            done(start, time.time_ns())
        except Exception:
            log.debug("rl-insight: an AReaL call's time was not kept", exc_info=True)

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.time_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                report(start)
        return timed_async

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            report(start)
    return timed


def install(trainer: Any, lanes: bool) -> Handover | None:
    """Time AReaL's untimed handover and each rank's weight update where the trainer
    runs AWEX colocated (None elsewhere: AReaL times its other modes itself). Never
    raises: a call that cannot be wrapped stays as it is, said once."""
    if not colocated(trainer):
        return None
    try:
        return _install(trainer, lanes)
    except Exception:
        log.warning("rl-insight: AReaL's AWEX handover is not timed; its time stays in "
                    "the step's `other` (read against areal-project/AReaL cbff54d6)",
                    exc_info=True)
        return None


def _install(trainer: Any, lanes: bool) -> Handover:
    handover = Handover(lanes, driver=kit.process_rank() == 0)
    for owner, method, key, state in CALLS:
        target = getattr(trainer, owner, None)
        fn = getattr(target, method, None)
        if fn is None:
            log.warning("rl-insight: AReaL's %s has no %s(); its time stays in the step's "
                        "`other` (read against areal-project/AReaL cbff54d6)", owner, method)
            continue
        setattr(target, method, _timed(fn, functools.partial(handover.add, key, state)))
    if not _time_workers(getattr(trainer, "actor", None), handover):
        log.warning("rl-insight: AReaL's actor has neither a scheduler nor update_weights();"
                    " its ranks' weight sync is not on their lanes (read against "
                    "areal-project/AReaL cbff54d6)")
    return handover


def _time_workers(actor: Any, handover: Handover) -> bool:
    """Each actor worker's ``update_weights`` as the controller dispatches it (single
    controller: the rank from its engine's name, ``actor/<i>``), else this rank's own
    (SPMD: the engine in this process)."""
    scheduler, role = getattr(actor, "scheduler", None), getattr(actor, "_worker_role", None)
    call = getattr(scheduler, "async_call_engine", None)
    if call is not None and role:
        prefix = f"{role}/"

        @functools.wraps(call)
        async def async_call_engine(worker_id: Any, method: Any, engine_name: Any = None,
                                    *args: Any, **kwargs: Any) -> Any:
            name = str(engine_name or "")
            if method != UPDATE or not name.startswith(prefix):
                return await call(worker_id, method, engine_name, *args, **kwargs)
            rank = name[len(prefix):]
            return await _timed(call, functools.partial(handover.rank_done, rank))(
                worker_id, method, engine_name, *args, **kwargs)

        scheduler.async_call_engine = async_call_engine
        return True
    update = getattr(actor, UPDATE, None)
    if update is None:
        return False
    setattr(actor, UPDATE, _timed(update, functools.partial(handover.rank_done,
                                                            kit.process_rank())))
    return True
