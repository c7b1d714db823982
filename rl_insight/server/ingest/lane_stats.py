"""Per-lane statistics from the spans passing through: last span time, states seen,
span count. Bounded: the least recently active lanes are forgotten first."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable

MAX_STATES_PER_LANE = 64
# span ids remembered per lane: a batch sent again (a sender that timed out on a request
# the server had taken, an actor's resend after a restart) is not counted twice
RECENT_IDS_PER_LANE = 64


class LaneStats:
    def __init__(self, max_lanes: int) -> None:
        self.max_lanes = max_lanes
        self._lanes: OrderedDict[tuple[str, str, str], dict] = OrderedDict()
        self._lock = threading.Lock()

    def forget(self, runs: set[tuple[str, str]]) -> int:
        """Drop the lanes of these (project, experiment_name) runs (finished long ago)."""
        with self._lock:
            gone = [k for k in self._lanes if (k[0], k[1]) in runs]
            for k in gone:
                del self._lanes[k]
            return len(gone)

    def observe(self, spans: Iterable[tuple]) -> tuple[set[tuple[str, str]], set[int]]:
        """Record (project, experiment, lane, state, end ns[, span id]) per span; a span
        id the lane saw recently is a copy and not counted. Returns the (project,
        experiment_name) pairs seen and the copies' positions in ``spans`` (the intake
        leaves them out of the anatomy and the recent spans as well)."""
        seen: set[tuple[str, str]] = set()
        copies: set[int] = set()
        with self._lock:
            for i, row in enumerate(spans):
                project, experiment, lane, state, end_ns = row[:5]
                if lane is None:
                    continue
                seen.add((project, experiment))
                key = (project, experiment, str(lane))
                entry = self._lanes.get(key)
                if entry is None:
                    entry = self._lanes[key] = {"spans": 0, "last_end_ns": 0, "states": {},
                                                "ids": deque(maxlen=RECENT_IDS_PER_LANE)}
                    while len(self._lanes) > self.max_lanes:
                        self._lanes.popitem(last=False)
                else:
                    self._lanes.move_to_end(key)
                span_id = row[5] if len(row) > 5 else None
                if span_id:
                    if span_id in entry["ids"]:
                        copies.add(i)
                        continue
                    entry["ids"].append(span_id)
                entry["spans"] += 1
                if end_ns > entry["last_end_ns"]:
                    entry["last_end_ns"] = end_ns
                states = entry["states"]
                if state in states or len(states) < MAX_STATES_PER_LANE:
                    states[state] = states.get(state, 0) + 1
        return seen, copies

    def list(self, project: str | None = None, experiment_name: str | None = None
             ) -> list[dict]:
        with self._lock:
            rows = []
            for (p, e, lane), entry in self._lanes.items():
                if project is not None and p != project:
                    continue
                if experiment_name is not None and e != experiment_name:
                    continue
                rows.append({"project": p, "experiment_name": e, "lane": lane,
                             "spans": entry["spans"],
                             "last_span_end": entry["last_end_ns"] / 1e9,
                             "states": dict(entry["states"])})
            return sorted(rows, key=lambda r: (r["project"], r["experiment_name"], r["lane"]))

    def has(self, project: str, experiment_name: str, lane: str) -> bool:
        """Whether a process of that run has sent spans of that lane (and it is held)."""
        with self._lock:
            return (project, experiment_name, lane) in self._lanes

    def __len__(self) -> int:
        return len(self._lanes)
