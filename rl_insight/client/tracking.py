"""A tracking backend for frameworks that keep a list of logger backends (verl's
``trainer.logger=["console", "rl_insight"]``): one dict per step becomes gauges."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from rl_insight.client import api

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
    """``Tracking(project, experiment_name, config)``; ``log(data, step)``; ``finish()``.
    Never raises."""

    STEP_METRIC = "step"

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None,
                 config: Mapping[str, Any] | None = None) -> None:
        self.skipped: set[str] = set()
        api.init(project_name, experiment_name, config)

    def log(self, data: Mapping[str, Any], step: int | float | None = None) -> None:
        if api._client is None and not api.enabled():  # off: cost nothing per key
            return
        try:
            if step is not None:
                api.metric_gauge(self.STEP_METRIC, float(step), "The training step")
            for key, value in flatten(data or {}):
                number = as_number(value)
                if number is None:
                    if key not in self.skipped:
                        self.skipped.add(key)
                        log.debug("rl-insight: %s is not a number; skipped", key)
                    continue
                api.metric_gauge(key, number)
            c = api._client
            if c is not None:  # the step is complete: hand it over now, without waiting
                c.buffer._wake.set()
        except Exception:
            api._failed("Tracking.log")

    def finish(self) -> None:
        api.finish()

