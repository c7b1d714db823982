"""Step marks: the trainer's steps as spans on lane ``trainer``, so the server can cut
the replica and rank lanes into steps (the step anatomy).

No framework calls anything for it: verl logs ``training/global_step`` (as the gauge
``training_global_step``) and ``timing_s/step`` each step, our Tracking also its ``step``
argument. When the step number changes, that is a step's end; its start is the previous
mark, or, for the first step this process sees, ``timing_s/step`` before the end (which
verl logs after the step number, in the same dict, so the mark waits for it until the
next mark or flush).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rl_insight.events import Span

TRAINER_LANE = "trainer"
STEP_STATE = "train_step"
# exported names (rl_insight.naming) of the gauges that carry the step and its duration
STEP_GAUGES = frozenset({"rl_insight_monitor_training_global_step",  # verl's key
                         "rl_insight_monitor_step"})  # Tracking.log(step=)
STEP_TIME_GAUGE = "rl_insight_monitor_timing_s_step"  # verl's timing_s/step
WATCHED = STEP_GAUGES | {STEP_TIME_GAUGE}
_SAME_LOG_NS = 5_000_000_000  # a duration this soon after the mark belongs to it


class StepClock:
    """Turns step-number gauges into step spans. Thread-safe; never blocks for long."""

    def __init__(self, emit: Callable[[Span], None]) -> None:
        self.emit = emit
        self.started_ns = time.time_ns()
        self.step: int | None = None
        self.last_end: int | None = None
        self.pending: list | None = None  # [step, start or None, end]
        self._lock = threading.Lock()

    def observe(self, name: str, value: float) -> None:
        """A watched gauge was set (``name`` as exported)."""
        now = time.time_ns()
        with self._lock:
            if name == STEP_TIME_GAUGE:
                p = self.pending
                if p is not None and p[1] is None and now - p[2] < _SAME_LOG_NS and \
                        0 < value < 1e7:  # not NaN, not negative, under four months
                    p[1] = p[2] - int(value * 1e9)
                    self._send_locked()
                return
            if value != value or value in (float("inf"), float("-inf")):
                return
            step = int(value)
            if step == self.step:
                return
            self._send_locked()
            self.step = step
            self.pending = [step, self.last_end, now]
            self.last_end = now
            if self.pending[1] is not None:  # the previous mark is the start: done
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
                       (("step", step), ("monitor.trace_segment", "step"))))
