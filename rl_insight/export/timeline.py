"""The state timeline as a Chrome trace-event file (JSON), which Perfetto and
chrome://tracing open: one track (thread) per lane, grouped in processes by role (the
policy's rollout replicas, each reward model's and teacher's replicas, trainer ranks,
other lanes: :mod:`rl_insight.laneid`), one complete event ("X") per state."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from rl_insight import laneid

OTHER = "other lanes"


def group_name(lane: str) -> str:
    """The process a lane's track sits in."""
    c = laneid.classify(lane)
    if c.kind == laneid.REPLICA:
        return f"{c.role} replicas"
    return "trainer ranks" if c.kind == laneid.RANK else OTHER


def _groups(lanes: list[str]) -> dict[str, int]:
    """Process ids in the timeline's order (lanes come sorted by laneid.sort_key)."""
    out: dict[str, int] = {}
    for lane in lanes:
        out.setdefault(group_name(lane), len(out) + 1)
    return out


def chrome_trace(spans: Iterable[Mapping[str, Any]], title: str = "",
                 requests: Iterable[Mapping[str, Any]] = ()) -> dict:
    """Spans with lane, state, start_ns, end_ns (and process_id, step) to a trace; the
    engines' requests (lane, request_id, start_ns, end_ns, completion_tokens, trace_id)
    as slices on a track ``<lane> requests`` under their replica lane (async slices:
    they overlap)."""
    spans, requests = list(spans), list(requests)
    lanes = sorted({s["lane"] for s in spans} | {r["lane"] for r in requests},
                   key=laneid.sort_key)
    tids = {lane: i + 1 for i, lane in enumerate(lanes)}
    pids = _groups(lanes)
    events: list[dict] = []
    for name, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    for lane in lanes:
        pid = pids[group_name(lane)]
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[lane],
                       "args": {"name": lane}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid,
                       "tid": tids[lane], "args": {"sort_index": tids[lane]}})
    for s in sorted(spans, key=lambda s: s["start_ns"]):
        pid = pids[group_name(s["lane"])]
        args = {k: s[k] for k in ("process_id", "step") if s.get(k) not in (None, "")}
        events.append({"name": s["state"], "cat": "state", "ph": "X", "pid": pid,
                       "tid": tids[s["lane"]], "ts": s["start_ns"] / 1000,
                       "dur": max(s["end_ns"] - s["start_ns"], 0) / 1000, "args": args})
    for r in sorted(requests, key=lambda r: r["start_ns"]):
        pid = pids[group_name(r["lane"])]
        base = {"name": "request", "cat": f"{r['lane']} requests", "ph": "b",
                "id": r["request_id"] or f"{r['start_ns']}", "pid": pid,
                "tid": tids[r["lane"]], "ts": r["start_ns"] / 1000,
                "args": {k: r[k] for k in ("request_id", "completion_tokens", "trace_id")
                         if r.get(k) not in (None, "")}}
        events.append(base)
        events.append({**base, "ph": "e", "ts": r["end_ns"] / 1000, "args": {}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "rl-insight", "run": title}}


def write(trace: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(trace, f)
