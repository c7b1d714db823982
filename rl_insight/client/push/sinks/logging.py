"""The built-in sink that logs every call at INFO (logger ``rl_insight.push.logging``):
to try a push configuration without a metrics system. Upstream ships the same driver
under the same name (verl-project/rl-insight ``rl_insight/client/push/sinks/logging.py``
at a0c0a451), so a configuration naming
``rl_insight.client.push.sinks.logging:create_sink`` works here too."""

from __future__ import annotations

import logging as _logging
from collections.abc import Mapping
from typing import Any

from rl_insight.client.push.sinks.base import PushSink

log = _logging.getLogger("rl_insight.push.logging")


class LoggingSink(PushSink):
    """One log line per call: the operation, the full name, the value, the tags."""

    def __init__(self, prefix: str = "", logger: _logging.Logger | None = None) -> None:
        super().__init__(prefix)
        self._log = logger or log

    def emit_counter(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._log.info("[push] counter %s=%s tags=%s", self.metric_name(name), value,
                       dict(tags))

    def emit_store(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._log.info("[push] store %s=%s tags=%s", self.metric_name(name), value,
                       dict(tags))

    def emit_timer(self, name: str, value_us: float, tags: Mapping[str, str]) -> None:
        self._log.info("[push] timer %s=%sus tags=%s", self.metric_name(name), value_us,
                       dict(tags))


def create_sink(conf: Any) -> LoggingSink:
    """The driver: the sink's ``prefix`` from its configuration node."""
    try:
        prefix = conf.get("prefix") or ""
    except Exception:  # a node without get(): no prefix
        prefix = ""
    return LoggingSink(str(prefix))
