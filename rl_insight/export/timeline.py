"""The state timeline as a Chrome trace-event file (JSON), which Perfetto and
chrome://tracing open: one track (thread) per lane, grouped in processes by role (the
policy's rollout replicas, each reward model's and teacher's replicas, trainer ranks,
other lanes: :mod:`rl_insight.wire.laneid`), one complete event ("X") per state."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from rl_insight.wire import laneid
from rl_insight.wire.attributes import PROCESS_ATTR

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


def process_meta(pid: int, name: str, sort: int | None = None) -> list[dict]:
    """A process's name and place in the trace's order."""
    return [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
             "args": {"sort_index": pid if sort is None else sort}}]


def thread_meta(pid: int, tid: int, name: str) -> list[dict]:
    """A thread's (a track's) name and place in its process."""
    return [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
             "args": {"sort_index": tid}}]


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
        events += process_meta(pid, name)
    for lane in lanes:
        events += thread_meta(pids[group_name(lane)], tids[lane], lane)
    for s in sorted(spans, key=lambda s: s["start_ns"]):
        pid = pids[group_name(s["lane"])]
        args = {k: s[k] for k in (PROCESS_ATTR, "step") if s.get(k) not in (None, "")}
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


class StreamWriter:
    """A Chrome trace written as it is made, an event at a time (a merged timeline of
    1,000 ranks' kernels is never in memory whole): processes and threads named once,
    complete events ("X") in wall-clock microseconds, as :func:`chrome_trace` writes."""

    def __init__(self, path: str, title: str = "") -> None:
        self.path, self.title = path, title
        self.f = open(path, "w")  # noqa: SIM115 (closed by close())
        self.f.write('{"traceEvents": [\n')
        self.first = True
        self.events = 0

    def _write(self, event: dict) -> None:
        self.f.write(("" if self.first else ",\n") + json.dumps(event, separators=(",", ":")))
        self.first = False
        self.events += 1

    def process(self, pid: int, name: str, sort: int | None = None) -> None:
        for event in process_meta(pid, name, sort):
            self._write(event)

    def thread(self, pid: int, tid: int, name: str) -> None:
        for event in thread_meta(pid, tid, name):
            self._write(event)

    def complete(self, name: str, cat: str, pid: int, tid: int, start_ns: int,
                 end_ns: int, args: dict | None = None) -> None:
        event = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                 "ts": start_ns / 1000, "dur": max(end_ns - start_ns, 0) / 1000}
        if args:
            event["args"] = args
        self._write(event)

    def close(self) -> None:
        self.f.write('\n], "displayTimeUnit": "ms", "otherData": '
                     + json.dumps({"source": "rl-insight", "run": self.title}) + "}\n")
        self.f.close()
