"""Background threads of the server that never end silently: an exception escaping a
thread's body is logged and counted, and the body starts again after a pause."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable

log = logging.getLogger(__name__)
# restarts per thread name since the process started: rl_insight_thread_restarts_total
RESTARTS: Counter[str] = Counter()


def supervised(name: str, body: Callable[[], None], stop: threading.Event,
               backoff_s: float = 1.0) -> threading.Thread:
    """A daemon thread named ``name`` running ``body`` until it returns or ``stop`` is
    set; not started. ``body`` is expected to loop on ``stop`` itself."""

    def run() -> None:
        while not stop.is_set():
            try:
                body()
                return
            except Exception:
                RESTARTS[name] += 1
                log.exception("%s failed (restart %d); it starts again in %.0f s", name,
                              RESTARTS[name], backoff_s)
                stop.wait(backoff_s)

    return threading.Thread(target=run, name=name, daemon=True)
