"""The client's events as sink calls, stream by stream: what upstream's push client hands
its sinks (verl-project/rl-insight ``rl_insight/client/push/client.py`` at 56d5cb88 and
213541cd), made here from this package's events on the buffer's thread (the caller's
thread only appends to the buffer), and from the rollout poller's thread.

- ``metric`` stream: a counter's increment to ``emit_counter``, a gauge to ``emit_store``,
  a histogram's sample to ``emit_timer`` (its producer reports microseconds), named
  ``<metric_prefix><name>`` (``trainer.actor_pg_loss``) with the name as the caller gave
  it, tagged with the sink's ``tags_from_env``, the run's ``project`` and
  ``experiment_name`` and the call's labels; a sink with ``metric_mapping`` gets only the
  scalars it maps, renamed, scaled, retagged.
- ``trace`` stream: each span (a ``trace_state`` interval, a ``trace_op`` call, a
  ``trace_span``) to ``emit_timer`` as ``<trace_prefix><name>`` with its duration in
  whole microseconds, tagged with ``process_id``, the run, its attributes (scalars only),
  ``state_lane_id`` and, for a state, ``state_name``.
- ``rollout`` stream: the poller's translated engine metrics (rules.py), named
  ``<rollout_name_prefix><name>``, to the sinks whose ``rollout_groups`` hold the rule's
  group.

A sink is called by one thread at a time; one that raises is said once and fed no more,
the others go on.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from rl_insight.client.push.drivers import Bound
from rl_insight.client.push.shape import OPS, PushConfig, scalar_tags
from rl_insight.wire import naming
from rl_insight.wire.attributes import (
    LANE_ATTR,
    PROCESS_ATTR,
    SEGMENT_ATTR,
    STATE_ATTR,
    STEP_SEGMENT,
)
from rl_insight.wire.events import COUNTER, GAUGE, Identity, Metric, Span

log = logging.getLogger(__name__)

KIND_METHOD = {COUNTER: "emit_counter", GAUGE: "emit_store"}  # else (histogram) a timer
# this package's own span attributes that upstream's spans do not carry: counts that
# would make every span a new tag value in a metrics system
OWN_ATTRS = frozenset(("blocks", "errors"))
# spans upstream does not make: per-request children of an interval, the step marks
SKIPPED_SEGMENTS = frozenset(("request", STEP_SEGMENT))


def raw_name(m: Metric) -> str:
    """The name the caller gave: the label naming.KEY_LABEL keeps it where the exported
    name had to change; else the exported name less the prefix (and a counter's
    ``_total``: a counter named ``x_total`` by its caller arrives as ``x``)."""
    for k, v in m.labels:
        if k == naming.KEY_LABEL:
            return v
    name = m.name[len(naming.PREFIX):] if m.name.startswith(naming.PREFIX) else m.name
    return name[:-len("_total")] if m.kind == COUNTER and name.endswith("_total") else name


def _run_tags(identity: Identity | None) -> dict[str, str]:
    return {} if identity is None else {"project": identity.project,
                                        "experiment_name": identity.experiment_name}


class Fanout:
    """The push backend's sinks and how each is fed; ``close`` stops the poller and
    closes every sink (once)."""

    def __init__(self, config: PushConfig, bound: list[Bound]) -> None:
        self.config = config
        self.bound = bound
        self.poller: Any = None  # poller.Poller, when rules and a rollout sink exist
        self.closed = False
        self._lock = threading.Lock()

    def streams(self) -> frozenset[str]:
        return frozenset().union(*(b.spec.streams for b in self.bound if b.alive))

    # -- calls -----------------------------------------------------------------------
    def _call(self, b: Bound, method: str, name: str, value: float,
              tags: dict[str, str]) -> None:
        """One sink call (the caller holds the lock); a sink that raises is turned off."""
        try:
            getattr(b.sink, method)(name, value, tags)
        except Exception as exc:
            b.alive = False
            log.warning("rl-insight: push sink %r (%s) raised %s in %s(%r): %s; it receives "
                        "nothing more in this process. Fix the sink (it must not raise) "
                        "and restart; the other sinks and training go on", b.spec.name,
                        b.spec.driver, type(exc).__name__, method, name, exc)

    def feed(self, identity: Identity | None, items: Iterable[Any]) -> None:
        """A batch of the buffer's events, on the buffer's thread."""
        run = _run_tags(identity)
        with self._lock:
            if self.closed:
                return
            for it in items:
                t = type(it)
                if t is Metric:
                    self._metric(it, run)
                elif t is Span:
                    self._span(it, run)

    def _metric(self, m: Metric, run: dict[str, str]) -> None:
        name = raw_name(m)
        value = float(m.value)
        labels = {k: v for k, v in m.labels if k != naming.KEY_LABEL}
        method = KIND_METHOD.get(m.kind, "emit_timer")
        for b in self.bound:
            if not b.alive or "metric" not in b.spec.streams:
                continue
            rules = b.spec.metric_rules
            if rules is None:
                self._call(b, method, self.config.metric_prefix + name, value,
                           {**b.tags, **run, **labels})
                continue
            rule = rules.get(name)
            if rule is not None:  # a whitelist: unmapped scalars are not this sink's
                self._call(b, rule.method or method, rule.name, value * rule.scale,
                           {**b.tags, **run, **labels, **rule.tags})

    def _span(self, s: Span, run: dict[str, str]) -> None:
        attrs = dict(s.attributes)
        if attrs.get(SEGMENT_ATTR) in SKIPPED_SEGMENTS:
            return
        tags = {PROCESS_ATTR: str(os.getpid()), **run,
                **scalar_tags({k: v for k, v in attrs.items() if k not in OWN_ATTRS})}
        if s.lane is not None:
            tags[LANE_ATTR] = s.lane
        if s.ends_state:
            tags[STATE_ATTR] = s.name
        value = float((s.end_ns - s.start_ns) // 1000)
        name = self.config.trace_prefix + s.name
        for b in self.bound:
            if b.alive and "trace" in b.spec.streams:
                self._call(b, "emit_timer", name, value, {**b.tags, **tags})

    def rollout(self, name: str, op: str, value: float, tags: Mapping[str, str],
                group: str = "") -> None:
        """One translated engine metric, from the poller's thread."""
        method = OPS.get(op, "emit_store")
        with self._lock:
            if self.closed:
                return
            for b in self.bound:
                if not b.alive or "rollout" not in b.spec.streams:
                    continue
                groups = b.spec.rollout_groups
                if groups is not None and group not in groups:
                    continue
                self._call(b, method, b.spec.rollout_prefix + name, float(value),
                           {**b.tags, **tags})

    def close(self, timeout: float = 2.0) -> None:
        """Stop the poller and close every sink, once; a sink's close that raises is
        logged."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if self.poller is not None:
            self.poller.stop(timeout)
        for b in self.bound:
            try:
                b.sink.close()
            except Exception as exc:
                log.warning("rl-insight: push sink %r: close() raised %s: %s", b.spec.name,
                            type(exc).__name__, exc)
