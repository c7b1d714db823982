"""Delivery confirmation between processes and the hub or a lane actor.

Each process numbers its batches. An actor notes the highest number it received from
each process, and after everything received up to a tick has left for the server, it
confirms that number. A process keeps the batches not yet confirmed; when the actor
comes back as a new incarnation (it was killed and restarted), the process sends them
again. Nothing handed over is lost to an actor restart; at worst a batch arrives twice.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from typing import Any


class Watermarks:
    """The actor's side: received and confirmed batch numbers per sending process."""

    def __init__(self) -> None:
        self.incarnation = uuid.uuid4().hex
        self._received: dict[str, int] = {}
        self._confirmed: dict[str, int] = {}
        self._seen: dict[str, float] = {}  # sender -> last batch (monotonic)
        self._lock = threading.Lock()

    def received(self, sender: str, seq: int) -> None:
        if seq:
            with self._lock:
                self._seen[sender] = time.monotonic()
                if seq > self._received.get(sender, 0):
                    self._received[sender] = seq

    def forget_idle(self, idle_s: float) -> int:
        """Forget senders silent for ``idle_s`` once all they sent is confirmed (processes
        of ended jobs, ranks that restarted under new names); how many were forgotten."""
        cut = time.monotonic() - idle_s
        with self._lock:
            gone = [s for s, t in self._seen.items() if t < cut
                    and self._confirmed.get(s, 0) >= self._received.get(s, 0)]
            for s in gone:
                del self._seen[s]
                self._received.pop(s, None)
                self._confirmed.pop(s, None)
            return len(gone)

    def senders(self) -> int:
        with self._lock:
            return len(self._seen)

    def snapshot(self) -> dict[str, int]:
        """Take at the start of a tick; pass to :meth:`confirm` when the tick delivered."""
        with self._lock:
            return dict(self._received)

    def confirm(self, snapshot: dict[str, int]) -> None:
        with self._lock:
            for sender, seq in snapshot.items():
                if seq > self._confirmed.get(sender, 0):
                    self._confirmed[sender] = seq

    def confirmed(self, sender: str) -> tuple[str, int]:
        with self._lock:
            return self.incarnation, self._confirmed.get(sender, 0)


class Unconfirmed:
    """The process's side: batches sent to one actor and not yet confirmed, bounded by
    an event budget. A batch pushed out of the budget cannot be sent again, so its
    events are counted (as possibly lost) rather than silently forgotten."""

    def __init__(self, max_events: int) -> None:
        self.max_events = max_events
        self.items: deque[tuple[int, int, Any]] = deque()  # (seq, events, call args)
        self.events = 0
        self.seq = 0
        self.incarnation: str | None = None
        self.overflow = 0

    def add(self, events: int, args: Any) -> int:
        self.seq += 1
        self.items.append((self.seq, events, args))
        self.events += events
        while self.events > self.max_events and len(self.items) > 1:
            _, n, _ = self.items.popleft()
            self.events -= n
            self.overflow += n
        return self.seq

    def settle(self, incarnation: str, confirmed: int) -> list[tuple[int, Any]]:
        """Forget what is confirmed; return what must be sent again (a new incarnation
        lost whatever it had not confirmed)."""
        restarted = self.incarnation is not None and incarnation != self.incarnation
        self.incarnation = incarnation
        while self.items and self.items[0][0] <= confirmed:
            _, n, _ = self.items.popleft()
            self.events -= n
        if not restarted:
            return []
        return [(seq, args) for seq, _, args in self.items]
