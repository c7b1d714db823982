"""The bounded batching buffer in every process (after the OpenTelemetry SDK's batch
processor): ``add`` is an O(1) append to a ``deque(maxlen=...)`` with no lock, so a
full buffer drops the oldest; one worker thread exports batches, woken early only when
a batch fills; re-created in a forked child; flush and shutdown take deadlines."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

Export = Callable[[list, int], None]  # (items, dropped since last export)


class EventBuffer:
    def __init__(self, export: Export, max_events: int, batch_size: int,
                 interval: float, idle: Callable[[], None] | None = None) -> None:
        self.export = export
        self.idle = idle  # called every interval, events or not (delivery upkeep)
        self.max_events = max_events
        self.batch_size = batch_size
        self.interval = interval
        self._check_at = min(batch_size, max_events)
        self._init_state()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (b := ref()) and b._init_state())

    def _init_state(self) -> None:
        self.queue: deque = deque(maxlen=self.max_events)
        self.dropped = 0
        self._reported_dropped = 0
        self.exported = 0
        self._wake = threading.Event()
        self._shutdown = False
        self._flush_lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._worker, name="rl-insight-buffer",
                                            daemon=True)
            self._thread.start()

    def add(self, item) -> None:
        q = self.queue
        n = len(q)
        if n >= self._check_at:  # one comparison on the common path
            if n >= self.max_events:
                self.dropped += 1
            if n >= self.batch_size and not self._wake.is_set():
                self._wake.set()
        q.append(item)
        if self._thread is None:
            self._ensure_thread()

    def _drain(self) -> None:
        with self._export_lock:
            while self.queue:
                items = []
                pop = self.queue.popleft
                try:
                    for _ in range(min(len(self.queue), self.batch_size)):
                        items.append(pop())
                except IndexError:
                    pass
                dropped = self.dropped - self._reported_dropped
                self._reported_dropped += dropped
                try:
                    self.export(items, dropped)
                    self.exported += len(items)
                except Exception:  # the exporter must never take the worker down
                    log.exception("rl-insight: exporting %d events failed; they are lost",
                                  len(items))
                    self.dropped += len(items)

    def _worker(self) -> None:
        while not self._shutdown:
            self._wake.wait(self.interval)
            self._wake.clear()
            self._drain()
            if self.idle is not None:
                try:
                    self.idle()
                except Exception:
                    log.debug("rl-insight: delivery upkeep failed", exc_info=True)

    def flush(self, timeout: float) -> bool:
        """Export everything buffered now, in the caller's thread, within ``timeout``."""
        if not self._flush_lock.acquire(timeout=max(timeout, 0)):
            return False
        try:
            done = threading.Event()

            def run() -> None:
                try:
                    self._drain()
                finally:
                    done.set()

            t = threading.Thread(target=run, name="rl-insight-flush", daemon=True)
            t.start()
            return done.wait(timeout)
        finally:
            self._flush_lock.release()

    def shutdown(self, timeout: float) -> bool:
        ok = self.flush(timeout)
        self._shutdown = True
        self._wake.set()
        return ok
