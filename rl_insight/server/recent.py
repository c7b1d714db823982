"""The recent state spans the server has seen, per run, bounded: what `rl-insight traces
export` reads where no Tempo runs, and what the status page shows of each lane."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable


class RecentSpans:
    """(project, experiment) -> deque of (lane, state, start ns, end ns, process, step)."""

    def __init__(self, max_spans_per_run: int = 200_000, max_runs: int = 64) -> None:
        self.max_spans = max_spans_per_run
        self.max_runs = max_runs
        self._runs: dict[tuple[str, str], deque] = {}
        self._lock = threading.Lock()

    def add(self, rows: Iterable[tuple[str, str, str, str, int, int, str, object]]) -> None:
        """Rows of (project, experiment, lane, state, start, end, process, step)."""
        with self._lock:
            for project, experiment, lane, state, start, end, process, step in rows:
                key = (project, experiment)
                q = self._runs.get(key)
                if q is None:
                    if len(self._runs) >= self.max_runs:  # forget the oldest run
                        self._runs.pop(next(iter(self._runs)))
                    q = self._runs[key] = deque(maxlen=self.max_spans)
                q.append((lane, state, start, end, process, step))

    def spans(self, project: str, experiment: str, since_ns: int = 0) -> list[tuple]:
        with self._lock:
            q = self._runs.get((project, experiment))
            return [r for r in (q or ()) if r[3] >= since_ns]
