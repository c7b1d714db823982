"""Expositions relayed for engines that serve no /metrics of their own (an in-process
vLLM, as OpenRLHF runs it): a lane actor keeps the newest text of each (run, job,
labels) and pushes it as a group of its own, replacing the last, so Prometheus sees the
engine's series as if it had scraped them. Bounded, and forgotten with the run."""

from __future__ import annotations

import threading

from rl_insight.wire.events import Exposition, Identity

MAX_GROUPS = 512  # engines whose text one lane actor relays (a replica's actor: one)
MAX_TEXT = 4 << 20  # one engine's exposition (vLLM's: 30-120 KB)

Key = tuple[Identity, str, tuple[tuple[str, str], ...]]


class Relayed:
    def __init__(self, max_groups: int = MAX_GROUPS) -> None:
        self.max_groups = max_groups
        self._texts: dict[Key, str] = {}
        self._dirty: set[Key] = set()
        self.refused = 0
        self._lock = threading.Lock()

    def put(self, identity: Identity, item: Exposition) -> None:
        key = (identity, item.job, tuple(item.labels))
        with self._lock:
            if len(item.text) > MAX_TEXT or (key not in self._texts and
                                              len(self._texts) >= self.max_groups):
                self.refused += 1
                return
            self._texts[key] = item.text
            self._dirty.add(key)

    def take_dirty(self) -> list[tuple[Key, tuple]]:
        """The groups changed since the last call, as the sender's (job, grouping, text,
        replace) tuples; a group the server did not take goes back with :meth:`again`."""
        with self._lock:
            keys, self._dirty = sorted(self._dirty, key=repr), set()
            return [(k, (k[1], {"project": k[0].project,
                                "experiment_name": k[0].experiment_name, **dict(k[2])},
                         self._texts[k], True)) for k in keys if k in self._texts]

    def again(self, key: Key) -> None:
        with self._lock:
            if key in self._texts:
                self._dirty.add(key)

    def any_dirty(self) -> bool:
        with self._lock:
            return bool(self._dirty)

    def forget(self, gone: set[Identity]) -> None:
        with self._lock:
            self._texts = {k: v for k, v in self._texts.items() if k[0] not in gone}
            self._dirty = {k for k in self._dirty if k[0] not in gone}

    def __len__(self) -> int:
        with self._lock:
            return len(self._texts)
