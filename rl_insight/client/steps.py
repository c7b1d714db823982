"""Step marks: the trainer's steps as spans on lane ``trainer``, so the server can cut
the replica and rank lanes into steps (the step anatomy).

No framework calls anything for it: verl logs ``training/global_step`` (as the gauge
``training_global_step``) and ``timing_s/step`` each step, our Tracking also its ``step``
argument. When the step number changes, that is a step's end; its start is the previous
mark, or, for the first step this process sees, ``timing_s/step`` before the end.

Both orders within one logged dict occur: verl's trainer puts the step number first and
the duration later (the mark waits for it until the next mark or flush), a dict built by
hand may put the duration first. A duration belongs to the mark of its own dict, never to
the previous step's: one dict is logged in a burst, so the duration that belongs to a
mark arrives well within half that duration of it, while the next dict's arrives about a
whole step later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rl_insight.wire.attributes import SEGMENT_ATTR, STEP_SEGMENT, STEP_STATE
from rl_insight.wire.events import Span
from rl_insight.wire.laneid import TRAINER as TRAINER_LANE

# exported names (rl_insight.wire.naming) of the gauges that carry the step and its duration
STEP_GAUGES = frozenset({"rl_insight_monitor_training_global_step",  # verl's key
                         "rl_insight_monitor_step"})  # Tracking.log(step=)
STEP_TIME_GAUGE = "rl_insight_monitor_timing_s_step"  # verl's timing_s/step
WATCHED = STEP_GAUGES | {STEP_TIME_GAUGE}
_SAME_LOG_NS = 5_000_000_000  # never further apart than this within one logged dict


class StepClock:
    """Turns step-number gauges into step spans. Thread-safe; never blocks for long."""

    def __init__(self, emit: Callable[[Span], None],
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.emit = emit
        self.clock = clock
        self.started_ns = clock()
        self.step: int | None = None
        self.last_end: int | None = None
        self.pending: list | None = None  # [step, start or None, end]
        self.duration: tuple[int, int] | None = None  # (ns, seen at) before a step number
        self._lock = threading.Lock()

    def observe(self, name: str, value: float) -> None:
        """A watched gauge was set (``name`` as exported)."""
        now = self.clock()
        with self._lock:
            if name == STEP_TIME_GAUGE:
                if not 0 < value < 1e7:  # not NaN, not negative, under four months
                    return
                ns = int(value * 1e9)
                p = self.pending
                if p is not None and p[1] is None and _same_dict(ns, p[2], now):
                    p[1] = p[2] - ns
                    self._send_locked()
                else:  # the duration came first in its dict: for the step number next
                    self.duration = (ns, now)
                return
            if value != value or value in (float("inf"), float("-inf")):
                return
            step = int(value)
            if step == self.step:
                return
            self._send_locked()
            start = self.last_end
            d, self.duration = self.duration, None
            if start is None and d is not None and _same_dict(d[0], d[1], now):
                start = now - d[0]
            self.step = step
            self.pending = [step, start, now]
            self.last_end = now
            if start is not None:  # the previous mark (or its own duration): done
                self._send_locked()

    def flush(self) -> None:
        """Send a mark still waiting for its duration (before a flush or at exit)."""
        with self._lock:
            self._send_locked()

    def _send_locked(self) -> None:
        p, self.pending = self.pending, None
        if p is None:
            return
        step, start, end = p
        if start is None:  # the first mark, no duration said: from when monitoring began
            start = min(self.started_ns, end)
        self.emit(Span(STEP_STATE, start, end, TRAINER_LANE,
                       (("step", step), (SEGMENT_ATTR, STEP_SEGMENT))))


def _same_dict(duration_ns: int, first_ns: int, then_ns: int) -> bool:
    """Whether a step duration and a step number seen at these times came from one
    logged dict: close together, in absolute terms and next to the duration."""
    return then_ns - first_ns < min(_SAME_LOG_NS, duration_ns // 2)
