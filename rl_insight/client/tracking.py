"""The logging backend of the frameworks: verl's ``trainer.logger=["console",
"rl_insight"]`` takes it as is, every other framework's adapter with its table."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from rl_insight import frameworks
from rl_insight.client import api, runconfig
from rl_insight.client.runtime import RUNTIME
from rl_insight.frameworks.table import Framework, timing_values
from rl_insight.wire.attributes import SEGMENT_ATTR, STEP_ATTR
from rl_insight.wire.frameworks import FRAMEWORK_ATTR, STEP_TIMING, TIMING_PREFIX

log = logging.getLogger(__name__)


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mappings become ``a/b/c`` keys."""
    for key, value in data.items():
        full = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            yield from flatten(value, full)
        else:
            yield full, value


def as_number(value: Any) -> float | None:
    """A float for numbers, numpy scalars and one-element tensors; None otherwise."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", 1) in (1, ()) and \
            getattr(value, "numel", lambda: 1)() == 1:
        try:
            got = item()
        except Exception:
            return None
        return float(got) if isinstance(got, (int, float, bool)) else None
    return None


class Tracking:
    """``Tracking(project, experiment_name, config)``; ``log(data, step)``; ``finish()``:
    one dict per step becomes gauges and ``step`` the step's mark, as verl's logger list
    takes it; a run's configuration given as ``config`` (or ``run_config``) is handed to
    the server (``rl_insight.log_config``). With ``framework=`` (a table of
    :mod:`rl_insight.frameworks`, or its name) it is every other framework's backend too
    (rl_insight/integrations/tracker.py): the step from the framework's own step key, only
    the dict that ends a step marking it, and the step's timing keys sent as one record,
    from which the server cuts the step into its parts where no lane tells them. Calls
    only the client API; never raises."""

    STEP_METRIC = "step"

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None,
                 config: Any = None, *, framework: str | Framework | None = None,
                 marks: bool = True, run_config: Any = None) -> None:
        self.framework = framework if framework is None or isinstance(framework, Framework) \
            else frameworks.get(framework)
        # the step marks; False where the framework's own trace marks its steps exactly
        # (a followed AReaL perf trace, ROLL's pipeline_step spans)
        self.marks = marks
        self.skipped: set[str] = set()
        self.finished = False
        # ``config``: this package's options (a mapping of init() keys, as before), or the
        # run's configuration as verl's and wandb's trackers take it, its options under
        # trainer.rl_insight; ``run_config``: the run's, where the caller tells them apart
        options, handed = runconfig.split(config)
        api.init(project_name, experiment_name, options)
        if run_config is not None or handed is not None:
            api.log_config(run_config if run_config is not None else handed,
                           source=self.framework.name if self.framework else "tracking")

    def step_of(self, data: Mapping[str, Any], step: Any) -> int | None:
        """The dict's step: the framework's step key where it has one (slime's
        ``rollout/step``; a dict without it, like slime's per-optimizer-step ``train/*``,
        has none), else the ``step`` passed."""
        fw = self.framework
        if fw is not None and fw.step_key is not None:
            step = data.get(fw.step_key)
        value = as_number(step) if step is not None else None
        if value is None or value != value:
            return None
        return int(value)

    def log(self, data: Mapping[str, Any], step: int | float | None = None) -> None:
        if not api.enabled():  # off: cost nothing per key
            return
        try:
            self._log(data or {}, step)
            c = RUNTIME.client
            if c is not None:  # the step is complete: hand it over now, without waiting
                c.buffer._wake.set()
        except Exception:
            RUNTIME.failed("Tracking.log")

    def _log(self, data: Mapping[str, Any], step: Any) -> None:
        fw = self.framework
        number = self.step_of(data, step)
        if number is not None and self.marks and (
                fw is None or fw.step_ends_with is None or fw.step_ends_with in data):
            api.metric_gauge(self.STEP_METRIC, float(number), "The training step")
        items = []
        for key, value in flatten(data):
            got = as_number(value)
            if got is None:
                if key not in self.skipped:
                    self.skipped.add(key)
                    log.debug("rl-insight: %s is not a number; skipped", key)
                continue
            items.append((key, got))
            api.metric_gauge(key, got)
        timings = timing_values(fw, items) if fw is not None and number is not None else {}
        if timings:
            now = time.time_ns()
            attrs: dict[str, Any] = {FRAMEWORK_ATTR: fw.name, STEP_ATTR: number,
                                     SEGMENT_ATTR: STEP_TIMING}
            attrs.update((f"{TIMING_PREFIX}{k}", v) for k, v in timings.items())
            api.trace_span(name=STEP_TIMING, start_time_ns=now, end_time_ns=now,
                                  attributes=attrs)

    def finish(self) -> None:
        """Idempotent: frameworks call it from their trainer and again from cleanup."""
        if self.finished:
            return
        self.finished = True
        api.finish()
