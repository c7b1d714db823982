"""The bounded batching buffer in every process (after the OpenTelemetry SDK's batch
processor): ``add`` is an O(1) append to a ``deque(maxlen=...)`` with no lock, so a
full buffer drops the oldest; one worker thread, started once under a lock, exports
batches, woken early only when a batch fills; re-created in a forked child; flush runs in
the caller under the export lock with a deadline; shutdown joins and refuses."""

from __future__ import annotations

import logging
import os
import threading
import time
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
        self.configure(max_events, batch_size, interval)
        self._init_state()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (b := ref()) and b._init_state())

    def configure(self, max_events: int, batch_size: int, interval: float) -> None:
        """Apply sizes and interval (``init(config=...)`` may change them after the buffer
        exists); values that would make the worker spin are raised to a floor."""
        self.max_events = max(1, int(max_events))
        self.batch_size = max(1, int(batch_size))
        self.interval = max(0.01, float(interval))
        self._check_at = min(self.batch_size, self.max_events)
        q = getattr(self, "queue", None)
        if q is not None and q.maxlen != self.max_events:
            with self._export_lock:
                self.queue = deque(q, maxlen=self.max_events)

    def _init_state(self) -> None:
        self.queue: deque = deque(maxlen=self.max_events)
        self.dropped = 0
        self._reported_dropped = 0
        self.exported = 0
        self._wake = threading.Event()
        self._shutdown = False
        self._export_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        with self._start_lock:  # two first callers start one worker
            if self._shutdown or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._worker, name="rl-insight-buffer",
                                            daemon=True)
            self._thread.start()

    def add(self, item) -> None:
        q = self.queue
        n = len(q)
        if n >= self._check_at:  # one comparison on the common path
            if self._shutdown:  # refused after shutdown, and counted
                self.dropped += 1
                return
            if n >= self.max_events:
                self.dropped += 1
            if n >= self.batch_size and not self._wake.is_set():
                self._wake.set()
        q.append(item)
        if self._thread is None:
            self._ensure_thread()

    def _drain(self, deadline: float | None = None) -> bool:
        """Export what is queued (the caller holds the export lock); False when the
        deadline passed with events left."""
        while self.queue:
            if deadline is not None and time.monotonic() >= deadline:
                return False
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
        return True

    def _worker(self) -> None:
        while not self._shutdown:
            self._wake.wait(self.interval)
            self._wake.clear()
            with self._export_lock:
                self._drain()
            if self.idle is not None:
                try:
                    self.idle()
                except Exception:
                    log.debug("rl-insight: delivery upkeep failed", exc_info=True)

    def flush(self, timeout: float) -> bool:
        """Export everything buffered now, in the caller's thread, within ``timeout``:
        no thread is started, so a stuck exporter cannot pile threads up."""
        deadline = time.monotonic() + max(timeout, 0.0)
        if not self._export_lock.acquire(timeout=max(timeout, 0.0)):
            return False
        try:
            return self._drain(deadline)
        finally:
            self._export_lock.release()

    def shutdown(self, timeout: float) -> bool:
        """Flush, stop the worker and wait for it (within ``timeout``); later events are
        refused and counted as dropped."""
        deadline = time.monotonic() + max(timeout, 0.0)
        ok = self.flush(timeout)
        self._shutdown = True
        self._check_at = 0  # every add now takes the slow path, which refuses it
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
            ok = ok and not t.is_alive()
        return ok
