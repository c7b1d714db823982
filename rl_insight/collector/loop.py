"""A background thread that runs a function every interval, sooner when woken (or at
once when the function returns True: a backlog it is draining), and once more at
shutdown. Errors are logged, never raised: collection must not stop."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, interval: float, fn: Callable[[], None], name: str,
                 jitter: bool = True) -> None:
        self.interval = interval
        self.jitter = jitter
        self.fn = fn
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._runs = 0  # finished
        self._started = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def _run_once(self) -> bool:
        with self._done:
            self._started += 1
        again = False
        try:
            again = self.fn() is True
        except Exception:
            log.exception("rl-insight: %s failed; continuing", self._thread.name)
        with self._done:
            self._runs += 1
            self._done.notify_all()
        return again

    def _loop(self) -> None:
        # the first run at a random point of the interval: hundreds of actors created
        # together (a job's start) then do not send to the server in the same instant
        again = False
        if self.jitter:
            self._wake.wait(random.uniform(0, self.interval))
        while not self._stop.is_set():
            if not again:
                self._wake.wait(self.interval)
            self._wake.clear()
            again = self._run_once()

    def run_now(self, timeout: float) -> bool:
        """Wake the thread and wait until a run that started after this call completed
        (not a whole interval: a run in progress is followed at once by another). A loop
        stopped already (a run's finish after the client's exit hook closed it) runs
        once on a daemon thread instead: no thread of its own would ever wake."""
        with self._done:
            target = self._started + 1  # runs are numbered as they start
            if self._thread.is_alive():
                self._wake.set()
            else:
                threading.Thread(target=self._run_once, name=self._thread.name,
                                 daemon=True).start()
            return self._done.wait_for(lambda: self._runs >= target, timeout)

    def stop(self, timeout: float) -> None:
        """Stop the loop, then run once more so nothing is left behind."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._run_once()
