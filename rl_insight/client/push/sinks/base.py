"""The interface a push sink implements: what a user's driver returns.

Upstream's contract (verl-project/rl-insight ``rl_insight/client/push/sinks/base.py`` at
99ae298f), kept exactly so a sink written against it works here unchanged: names arrive
relative to the sink's own ``prefix`` (the client gives the stream's part, ``trainer.``,
``trace.`` or ``rollout.``; the sink puts its root in front with ``metric_name``); tags
are a mapping of strings; timers are microseconds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

TagMap = Mapping[str, str]


class PushSink(ABC):
    """A destination for metrics pushed from training processes (a metrics SDK, a
    statsd client, a file). ``prefix``: the deployment's root, without a trailing dot."""

    def __init__(self, prefix: str = "") -> None:
        self._prefix = str(prefix or "").strip(".")

    @property
    def prefix(self) -> str:
        """The root put in front of every name (no trailing dot)."""
        return self._prefix

    def metric_name(self, suffix: str) -> str:
        """The full name of a prefix-relative ``suffix`` (``<prefix>.<suffix>``)."""
        suffix = str(suffix).lstrip(".")
        return f"{self._prefix}.{suffix}" if self._prefix else suffix

    @abstractmethod
    def emit_counter(self, name: str, value: float, tags: TagMap) -> None:
        """Add ``value`` to the monotonic counter ``name``."""

    @abstractmethod
    def emit_store(self, name: str, value: float, tags: TagMap) -> None:
        """Record ``value`` as the gauge ``name``'s latest."""

    @abstractmethod
    def emit_timer(self, name: str, value_us: float, tags: TagMap) -> None:
        """Record a duration of ``value_us`` microseconds for ``name``."""

    def flush(self) -> None:  # noqa: B027 - optional: upstream's sinks may not define it
        """Send what the sink buffers, as far as it can; nothing by default."""

    def close(self) -> None:
        """Release the sink's resources; by default, flush."""
        self.flush()
