"""The recent state spans the server has seen, bounded in total: what `rl-insight traces
export` reads where no Tempo runs. Replica and rank lanes keep the most (they are the
timeline); per-request lanes, which can arrive thousands a second, keep a short tail."""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Iterable

from rl_insight.wire import laneid


def _kept_long(lane: str) -> bool:
    """Replica lanes of any role, rank lanes, and the trainer's step marks (lane
    ``trainer``)."""
    return laneid.classify(lane).kind != laneid.OTHER


class RecentSpans:
    def __init__(self, max_dedicated: int = 100_000, max_pooled: int = 10_000,
                 max_requests: int = 20_000) -> None:
        self._dedicated: deque = deque(maxlen=max_dedicated)
        self._pooled: deque = deque(maxlen=max_pooled)
        # the engines' request spans: (project, experiment, lane, id, start, end, tokens,
        # trace id), the newest kept (the export shows them under their replica lane)
        self._requests: deque = deque(maxlen=max_requests)
        self._lock = threading.Lock()

    def add(self, rows: Iterable[tuple[str, str, str, str, int, int, str, object]]) -> None:
        """Rows of (project, experiment, lane, state, start, end, process, step)."""
        intern = sys.intern
        with self._lock:
            for project, experiment, lane, state, start, end, process, step, *_ in rows:
                row = (intern(project), intern(experiment), intern(lane), intern(state),
                       start, end, intern(process), step)
                (self._dedicated if _kept_long(lane) else self._pooled).append(row)

    def add_requests(self, rows) -> None:
        """(project, experiment, Request) of engine request spans."""
        with self._lock:
            for project, experiment, r in rows:
                self._requests.append((project, experiment, r.lane, r.request_id,
                                       r.start_ns, r.end_ns, r.completion_tokens,
                                       r.trace_id))

    def requests(self, project: str, experiment: str, since_ns: int = 0) -> list[dict]:
        with self._lock:
            rows = [r for r in self._requests
                    if r[0] == project and r[1] == experiment and r[5] >= since_ns]
        return [{"lane": r[2], "request_id": r[3], "start_ns": r[4], "end_ns": r[5],
                 "completion_tokens": r[6], "trace_id": r[7]} for r in rows]

    def forget(self, runs: set[tuple[str, str]]) -> int:
        """Drop the spans of these (project, experiment_name) runs (finished long ago)."""
        with self._lock:
            gone = 0
            for q in (self._dedicated, self._pooled, self._requests):
                kept = [r for r in q if (r[0], r[1]) not in runs]
                gone += len(q) - len(kept)
                if len(kept) != len(q):
                    q.clear()
                    q.extend(kept)
            return gone

    def spans(self, project: str, experiment: str, since_ns: int = 0) -> list[tuple]:
        """(lane, state, start, end, process, step) of one run, oldest first."""
        with self._lock:
            rows = [r for q in (self._dedicated, self._pooled) for r in q
                    if r[0] == project and r[1] == experiment and r[5] >= since_ns]
        rows.sort(key=lambda r: r[4])
        return [r[2:] for r in rows]
