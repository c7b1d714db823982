"""The state timeline as a Chrome trace-event file (JSON), which Perfetto and
chrome://tracing open: one track (thread) per lane, grouped in processes by kind
(rollout replicas, trainer ranks, other lanes), one complete event ("X") per state."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

GROUPS = (("replica", 1, "rollout replicas"), ("rank", 2, "trainer ranks"))
OTHER = (3, "other lanes")


def _lane_order(lane: str) -> tuple:
    m = re.match(r"^(replica|rank)_(\d+)$", lane)
    if m:
        return (0 if m.group(1) == "replica" else 1, int(m.group(2)), lane)
    return (2, 0, lane)


def group_of(lane: str) -> tuple[int, str]:
    for prefix, pid, name in GROUPS:
        if re.match(rf"^{prefix}_\d+$", lane):
            return pid, name
    return OTHER


def chrome_trace(spans: Iterable[Mapping[str, Any]], title: str = "") -> dict:
    """Spans with lane, state, start_ns, end_ns (and process_id, step) to a trace."""
    spans = list(spans)
    lanes = sorted({s["lane"] for s in spans}, key=_lane_order)
    tids = {lane: i + 1 for i, lane in enumerate(lanes)}
    events: list[dict] = []
    for pid, name in {group_of(lane) for lane in lanes}:
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    for lane in lanes:
        pid, _ = group_of(lane)
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[lane],
                       "args": {"name": lane}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid,
                       "tid": tids[lane], "args": {"sort_index": tids[lane]}})
    for s in sorted(spans, key=lambda s: s["start_ns"]):
        pid, _ = group_of(s["lane"])
        args = {k: s[k] for k in ("process_id", "step") if s.get(k) not in (None, "")}
        events.append({"name": s["state"], "cat": "state", "ph": "X", "pid": pid,
                       "tid": tids[s["lane"]], "ts": s["start_ns"] / 1000,
                       "dur": max(s["end_ns"] - s["start_ns"], 0) / 1000, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "rl-insight", "run": title}}


def write(trace: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(trace, f)
