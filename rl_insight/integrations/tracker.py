"""The logging backend every framework adapter is: one dict per step becomes gauges (as
verl's ``rl_insight`` logger), the step comes from the framework's own step key, and the
step's timing keys go to the server as one record, from which it cuts the step into
its parts when no lane tells it (rl_insight/frameworks/table.py).

Calls only the public client API: ``init``, ``metric_gauge``, ``trace_span``,
``finish``. Never raises into the framework.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import rl_insight
from rl_insight import frameworks
from rl_insight.client.tracking import as_number, flatten
from rl_insight.frameworks.table import Framework, timing_values
from rl_insight.frameworks.wire import (
    FRAMEWORK_ATTR,
    SEGMENT_ATTR,
    STEP_ATTR,
    STEP_TIMING,
    TIMING_PREFIX,
)

log = logging.getLogger(__name__)

STEP_GAUGE = "step"  # rl_insight_monitor_step: the step marks (rl_insight.client.steps)


class FrameworkTracker:
    """``FrameworkTracker(framework, project, experiment_name, config)``;
    ``log(data, step)``; ``finish()``. ``framework`` names a table
    (``rl_insight.frameworks.FRAMEWORKS``); a name without one logs scalars only."""

    def __init__(self, framework: str | Framework, project: str | None = None,
                 experiment_name: str | None = None,
                 config: Mapping[str, Any] | None = None, marks: bool = True) -> None:
        self.framework = framework if isinstance(framework, Framework) else \
            frameworks.get(framework)
        self.skipped: set[str] = set()
        self.finished = False
        # the step marks (the `step` gauge); False where the framework's own trace marks
        # its steps exactly (a followed AReaL perf trace, ROLL's pipeline_step spans)
        self.marks = marks
        rl_insight.init(project, experiment_name, config)

    def step_of(self, data: Mapping[str, Any], step: Any) -> int | None:
        """The dict's step: the framework's step key where it has one (slime's
        ``rollout/step``; a dict without it, like slime's per-optimizer-step ``train/*``,
        has none), else the ``step`` the framework passed."""
        fw = self.framework
        if fw is not None and fw.step_key is not None:
            step = data.get(fw.step_key)
        value = as_number(step) if step is not None else None
        if value is None or value != value:
            return None
        return int(value)

    def log(self, data: Mapping[str, Any], step: Any = None) -> None:
        if not rl_insight.enabled():  # off: cost nothing per key
            return
        try:
            self._log(data or {}, step)
        except Exception:
            log.warning("rl-insight: logging a %s step failed; training continues",
                        self.framework.name if self.framework else "framework",
                        exc_info=True)

    def _log(self, data: Mapping[str, Any], step: Any) -> None:
        items = []
        for key, value in flatten(data):
            number = as_number(value)
            if number is None:
                if key not in self.skipped:
                    self.skipped.add(key)
                    log.debug("rl-insight: %s is not a number; skipped", key)
                continue
            items.append((key, number))
            rl_insight.metric_gauge(key, number)
        number = self.step_of(data, step)
        if number is None:
            return
        fw = self.framework
        if self.marks and (fw is None or fw.step_ends_with is None or
                           fw.step_ends_with in data):
            rl_insight.metric_gauge(STEP_GAUGE, float(number), "The training step")
        timings = timing_values(fw, items) if fw is not None else {}
        if timings:
            now = time.time_ns()
            attrs: dict[str, Any] = {FRAMEWORK_ATTR: fw.name, STEP_ATTR: number,
                                     SEGMENT_ATTR: STEP_TIMING}
            attrs.update((f"{TIMING_PREFIX}{k}", v) for k, v in timings.items())
            rl_insight.trace_span(name=STEP_TIMING, start_time_ns=now, end_time_ns=now,
                                  attributes=attrs)

    def finish(self) -> None:
        """Idempotent: frameworks call it from their trainer and again from cleanup."""
        if self.finished:
            return
        self.finished = True
        rl_insight.finish()
