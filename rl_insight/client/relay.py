"""An engine that keeps its Prometheus metrics in its own process and serves no /metrics
(vLLM inside OpenRLHF's ``RolloutRayActor``): its registry's families go to its replica's
lane actor every lane tick, which pushes them to the server as the engine's group
(rl_insight/collector/relayed.py). Prometheus then holds the same series a scrape would
have given, with the replica's labels; no port is opened, and the server gets one request
per replica and tick, as from any lane actor."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from rl_insight.wire.events import Exposition

log = logging.getLogger(__name__)

_relays: dict[tuple[str, str], Any] = {}  # (job, lane) -> its Periodic, in this process
_lock = threading.Lock()


class _Only:
    """A registry's families whose names start with one of ``prefixes`` (an engine's
    own, not the process's or Python's collectors)."""

    def __init__(self, registry: Any, prefixes: tuple[str, ...]) -> None:
        self.registry, self.prefixes = registry, prefixes

    def collect(self) -> Iterable[Any]:
        for family in self.registry.collect():
            if not self.prefixes or family.name.startswith(self.prefixes):
                yield family


def render(registry: Any = None, prefixes: tuple[str, ...] = ()) -> str:
    """The registry's families (``prefixes``: only those) in the text format."""
    from prometheus_client import REGISTRY
    from prometheus_client.exposition import generate_latest

    return generate_latest(_Only(registry or REGISTRY, prefixes)).decode()


def relay_registry(job: str, lane: str, labels: Mapping[str, Any],
                   prefixes: tuple[str, ...] = (), registry: Any = None,
                   interval_s: float | None = None) -> bool:
    """Relay this process's registry (``prefixes``: those families) as ``job`` with
    ``labels`` through ``lane``'s actor: at once, then every ``interval_s`` (the client's
    lane tick; a run of a few steps on a busy host ended before its engines' first tick).
    Once per (job, lane) and process; returns whether it relays. Never raises."""
    try:
        from rl_insight.client.runtime import RUNTIME
        from rl_insight.collector.loop import Periodic

        client = RUNTIME.client or RUNTIME.get()
        if client is None:
            return False
        key = (job, lane)
        pairs = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        with _lock:
            if key in _relays:
                return True

            def tick() -> None:
                text = render(registry, prefixes)
                if text:
                    client.add(Exposition(lane, job, pairs, text))

            tick()  # at once: the lane actor paces the pushes, engines asked together
            every = interval_s or client.settings.lane_flush_interval_s
            _relays[key] = Periodic(every, tick, f"rl-insight-relay-{lane}").start()
        return True
    except Exception:
        log.warning("rl-insight: relaying %s metrics of %s failed; training goes on",
                    job, lane, exc_info=True)
        return False


def _forget() -> None:
    _relays.clear()  # threads do not cross a fork: the child relays nothing of its own


os.register_at_fork(after_in_child=_forget)
