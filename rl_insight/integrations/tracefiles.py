"""A framework's trace files as OTLP exports for the server's ``/v1/traces``:

- Chrome traces (AReaL's ``traces-r{rank}.jsonl``, one event a line; NeMo-RL's
  ``nemorl_trace.json``, one array): complete events (``ph: X``) and begin/end pairs
  (``B``/``E``) become spans; metadata, instants and counters are skipped;
- OTLP/JSON lines (ROLL's collector writes ``traces.jsonl``, one export a line): read as
  they are.

Each export names its framework (resource ``rl_insight.framework``) and its run
(``project``, ``experiment_name``), so the server maps the spans by the framework's
table. A framework with no step span (AReaL) gets its step marks here, one per step, from
the events that carry its step attribute.

Chrome traces count time from a clock of their own (AReaL: the tracer's start; NeMo-RL:
``time.monotonic()``). Such a file is placed in wall time at its ``anchor``: the unix
time of its clock's zero. Without one, the file's last event ends when the file was last
written (both write their events at each step's end or the run's), which is what
:func:`anchor_from_mtime` assumes. Pure data in and out; :class:`Follower` reads files
as they grow.
"""

from __future__ import annotations

import glob
import json
import os
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from rl_insight.frameworks.table import STEP, Framework
from rl_insight.wire.attributes import (
    LANE_ATTR,
    SEGMENT_ATTR,
    SERVICE_NAME_ATTR,
    STATE_ATTR,
    STEP_ATTR,
    STEP_SEGMENT,
    STEP_STATE,
)
from rl_insight.wire.frameworks import IMPORT_SCOPE, RESOURCE_FRAMEWORK_ATTR
from rl_insight.wire.laneid import TRAINER
from rl_insight.wire.otlp import any_value, parse_json

WALL_US = 1e15  # a timestamp in µs above this is unix time (2001 on)
FRAMEWORK_ATTR = RESOURCE_FRAMEWORK_ATTR
EXPORT_SPANS = 5000  # spans an export holds at most
_rand = random.Random(int.from_bytes(os.urandom(8), "little"))


class TraceFileError(ValueError):
    """A file that is no trace this reader knows; the message says what it is not."""


def _kvs(attrs: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=str(k), value=any_value(v)) for k, v in attrs.items()]


@dataclass
class Run:
    """Whose spans these are: the framework's table, the run's names, and the resource
    attributes of the file (its rank)."""

    framework: Framework
    project: str
    experiment_name: str
    resource: dict[str, Any] = field(default_factory=dict)

    def resource_attrs(self) -> dict[str, Any]:
        return {SERVICE_NAME_ATTR: self.framework.name, FRAMEWORK_ATTR: self.framework.name,
                "project": self.project, "experiment_name": self.experiment_name,
                **self.resource}


def complete_events(events: Iterable[Mapping]) -> Iterator[dict]:
    """Chrome events as complete spans (name, ts, dur, args, pid, tid): ``X`` as they
    are, ``B``/``E`` paired per thread (innermost first); the rest skipped."""
    open_: dict[tuple, list[Mapping]] = {}
    for ev in events:
        ph = ev.get("ph")
        if ph == "X" and isinstance(ev.get("ts"), (int, float)):
            yield {"name": str(ev.get("name", "")), "ts": float(ev["ts"]),
                   "dur": float(ev.get("dur") or 0), "args": ev.get("args") or {},
                   "pid": ev.get("pid"), "tid": ev.get("tid")}
        elif ph == "B" and isinstance(ev.get("ts"), (int, float)):
            open_.setdefault((ev.get("pid"), ev.get("tid")), []).append(ev)
        elif ph == "E" and isinstance(ev.get("ts"), (int, float)):
            stack = open_.get((ev.get("pid"), ev.get("tid")))
            if stack:
                begin = stack.pop()
                yield {"name": str(begin.get("name", "")), "ts": float(begin["ts"]),
                       "dur": max(0.0, float(ev["ts"]) - float(begin["ts"])),
                       "args": begin.get("args") or {}, "pid": begin.get("pid"),
                       "tid": begin.get("tid")}


def _export(run: Run) -> tuple[ExportTraceServiceRequest, Any]:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(_kvs(run.resource_attrs()))
    scope = rs.scope_spans.add()
    scope.scope.name = f"{IMPORT_SCOPE}{run.framework.name}"
    return req, scope


def _span(scope, trace_id: bytes, name: str, start: int, end: int,
          attrs: Mapping[str, Any]) -> None:
    span = scope.spans.add()
    span.name = name
    span.trace_id = trace_id
    span.span_id = (_rand.getrandbits(64) or 1).to_bytes(8, "big")
    span.start_time_unix_nano, span.end_time_unix_nano = start, max(start, end)
    span.kind = 1  # SPAN_KIND_INTERNAL
    span.attributes.extend(_kvs(attrs))


def _ns(anchor_s: float | None, ts_us: float) -> int:
    return (0 if anchor_s is None else int(anchor_s * 1e9)) + int(ts_us * 1000)


def chrome_export(events: Iterable[dict], run: Run, anchor_s: float | None) -> bytes | None:
    """Complete events as one OTLP export (None when there are none); ``anchor_s`` the
    unix time of the trace clock's zero (None: the timestamps are unix µs)."""
    evs = list(events)
    if not evs:
        return None
    req, scope = _export(run)
    trace_id = _rand.getrandbits(128).to_bytes(16, "big")
    for ev in evs:
        start = _ns(anchor_s, ev["ts"])
        _span(scope, trace_id, ev["name"], start, start + int(ev["dur"] * 1000),
              {k: v for k, v in ev["args"].items() if v is not None})
    return req.SerializeToString()


def step_windows(events: Iterable[dict], fw: Framework, anchor_s: float | None,
                 into: dict[int, list[int]] | None = None) -> dict[int, list[int]]:
    """step -> [first start, last end] (unix ns) of the events the table maps that carry
    the framework's step attribute, merged into ``into`` (the steps a torn read left
    open); empty when the framework has a step span of its own."""
    steps: dict[int, list[int]] = {} if into is None else into
    key = fw.step_from_attr
    if not key:
        return steps
    for ev in events:
        if key not in ev["args"] or fw.rule(ev["name"]) is None:
            continue
        try:
            step = int(ev["args"][key])
        except (TypeError, ValueError):
            continue
        start = _ns(anchor_s, ev["ts"])
        end = start + int(ev["dur"] * 1000)
        window = steps.setdefault(step, [start, end])
        window[0], window[1] = min(window[0], start), max(window[1], end)
    return steps


def marks_export(windows: Mapping[int, list[int]], run: Run) -> bytes | None:
    """One export of step marks, a ``train_step`` span on lane ``trainer`` per step."""
    if not windows:
        return None
    req, scope = _export(run)
    trace_id = _rand.getrandbits(128).to_bytes(16, "big")
    for step, (start, end) in sorted(windows.items()):
        _span(scope, trace_id, STEP_STATE, start, end,
              {LANE_ATTR: TRAINER, STATE_ATTR: STEP_STATE, STEP_ATTR: step,
               SEGMENT_ATTR: STEP_SEGMENT, "project": run.project,
               "experiment_name": run.experiment_name})
    return req.SerializeToString()


def step_marks(events: Iterable[dict], run: Run, anchor_s: float | None) -> bytes | None:
    """This package's own step marks for a framework with no step span (AReaL): step k
    from the first start to the last end of the events its table maps that carry k in
    the framework's step attribute. None when the framework has a step span, or no event
    carries a step."""
    return marks_export(step_windows(events, run.framework, anchor_s), run)


def _step_ends(events: list[dict], fw: Framework, anchor_s: float | None) -> list[int]:
    """Where a trace's steps end (unix ns): its own step spans' ends (NeMo-RL's)."""
    ends = []
    for ev in events:
        rule = fw.rule(ev["name"])
        if rule is not None and rule.lane == STEP:
            ends.append(_ns(anchor_s, ev["ts"]) + int(ev["dur"] * 1000))
    return sorted(ends)


def chrome_exports(events: list[dict], run: Run, anchor_s: float | None,
                   size: int = EXPORT_SPANS) -> Iterator[tuple[bytes, int]]:
    """(export, spans) of a trace's events, a step at a time in the order they ended:
    the events that ended in it (at most ``size`` an export), then its step mark where
    the framework has no step span. The server makes each step's row as its mark comes,
    so a long file is read step by step, never more of a lane at once than it holds."""
    fw = run.framework
    windows = step_windows(events, fw, anchor_s)
    bounds = sorted(e for _, e in windows.values()) or _step_ends(events, fw, anchor_s)
    by_end = sorted(events, key=lambda ev: ev["ts"] + ev["dur"])
    marks = {e: step for step, (_, e) in windows.items()}
    i = 0
    for bound in [*bounds, None]:
        chunk = []
        while i < len(by_end) and (bound is None or
                                   _ns(anchor_s, by_end[i]["ts"] + by_end[i]["dur"]) <= bound):
            chunk.append(by_end[i])
            i += 1
        for k in range(0, len(chunk), size):
            payload = chrome_export(chunk[k:k + size], run, anchor_s)
            if payload:
                yield payload, len(chunk[k:k + size])
        if bound is not None and bound in marks:
            step = marks[bound]
            payload = marks_export({step: windows[step]}, run)
            if payload:
                yield payload, 0


def otlp_json_export(line: str, run: Run) -> bytes | None:
    """One OTLP/JSON export (a line of ROLL's traces.jsonl) as protobuf, each resource
    given the run and the framework where it does not name them."""
    line = line.strip()
    if not line:
        return None
    try:
        req = parse_json(line)
    except ValueError as exc:
        raise TraceFileError(f"not an OTLP/JSON export: {exc}") from None
    if not req.resource_spans:
        return None
    for rs in req.resource_spans:
        have = {kv.key for kv in rs.resource.attributes}
        rs.resource.attributes.extend(
            _kvs({k: v for k, v in run.resource_attrs().items()
                  if k not in have and k != SERVICE_NAME_ATTR}))
    return req.SerializeToString()


def sniff(text: str) -> str:
    """``chrome-array``, ``chrome-lines`` or ``otlp-lines``: what a file holds, from
    its first non-blank character and line."""
    head = text.lstrip()
    if not head:
        return "chrome-lines"
    if head[0] == "[":
        return "chrome-array"
    first = head.splitlines()[0]
    try:
        obj = json.loads(first)
    except ValueError:
        if head[0] == "{" and '"traceEvents"' in head[:4096]:
            return "chrome-array"
        raise TraceFileError("neither a Chrome trace nor OTLP/JSON lines (the first line "
                             "is no JSON object)") from None
    if isinstance(obj, dict) and "resourceSpans" in obj:
        return "otlp-lines"
    if isinstance(obj, dict) and "traceEvents" in obj:
        return "chrome-array"
    if isinstance(obj, dict) and "ph" in obj:
        return "chrome-lines"
    raise TraceFileError("neither a Chrome trace (events with 'ph') nor OTLP/JSON "
                         "(objects with 'resourceSpans')")


def chrome_events(text: str, kind: str) -> list[dict]:
    """The events of a Chrome trace's text (an array, ``{"traceEvents": ...}``, or
    one event a line; a torn last line is left for the next read)."""
    if kind == "chrome-array":
        data = json.loads(text)
        return list(data.get("traceEvents", []) if isinstance(data, dict) else data)
    out = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line and line not in ("[", "]"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def anchor_from_mtime(events: list[dict], mtime_s: float) -> float | None:
    """The unix time of a trace clock's zero, taking the last event to end when the
    file was last written; None for unix-time timestamps."""
    ends = [e["ts"] + e["dur"] for e in events]
    if not ends or max(ends) > WALL_US:
        return None
    return mtime_s - max(ends) / 1e6


def rank_of(path: str) -> int | None:
    """AReaL's ``traces-r{rank}.jsonl``: the rank in the file's name."""
    import re

    m = re.search(r"-r(\d+)\.json", os.path.basename(path))
    return int(m.group(1)) if m else None


class Follower:
    """Files matching a pattern, read as they grow (new files too: ROLL rotates its
    traces.jsonl), each new complete line turned into exports for ``send``. One
    ``poll()`` a call; never raises for a file (a bad one is counted and said once)."""

    def __init__(self, pattern: str, run: Run, send: Callable[[bytes], bool],
                 anchor_s: float | None = None) -> None:
        self.pattern = pattern
        self.run = run
        self.send = send
        self.anchor_s = anchor_s  # the clock's zero, if known (the in-process tracer)
        self.files: dict[str, dict] = {}  # path -> {offset, partial, anchor}
        self.spans_sent = 0
        self.exports_failed = 0
        self.bad: dict[str, str] = {}
        # exports the server did not take, sent again at the next poll (the oldest
        # dropped past 256: a server down for long loses the oldest, counted)
        self.unsent: deque[tuple[bytes, int]] = deque(maxlen=256)
        self.dropped_exports = 0

    def poll(self) -> int:
        """Read what the files got since the last poll; returns the spans sent."""
        sent = 0
        for _ in range(len(self.unsent)):
            payload, n = self.unsent.popleft()
            sent += self._send(payload, n)
        for path in sorted(glob.glob(self.pattern)):
            try:
                sent += self._read(path)
            except (OSError, TraceFileError, ValueError) as exc:
                self.bad.setdefault(path, str(exc))
        self.spans_sent += sent
        return sent

    def _read(self, path: str) -> int:
        st = self.files.setdefault(path, {"offset": 0, "partial": "", "anchor": None,
                                          "kind": None, "steps": {}})
        size = os.path.getsize(path)
        if size < st["offset"]:  # rewritten from the start
            st.update(offset=0, partial="")
        if size == st["offset"]:
            return 0
        with open(path, "rb") as f:
            f.seek(st["offset"])
            chunk = f.read()
            st["offset"] += len(chunk)
        text = st["partial"] + chunk.decode("utf-8", errors="replace")
        if st["kind"] is None:
            st["kind"] = sniff(text)
        if st["kind"] == "chrome-array":  # one document: read when whole
            try:
                events = chrome_events(text, st["kind"])
            except ValueError:
                st["partial"] = text
                return 0
            st["partial"] = ""
            return self._chrome(path, events)
        lines = text.split("\n")
        st["partial"] = lines.pop()  # an unfinished last line waits
        if st["kind"] == "otlp-lines":
            n = 0
            for line in lines:
                payload = otlp_json_export(line, self.run)
                if payload:
                    n += self._send(payload, line.count('"spanId"'))
            return n
        return self._chrome(path, chrome_events("\n".join(lines), st["kind"]),
                            torn=bool(st["partial"]))

    def _chrome(self, path: str, events: list[dict], torn: bool = False) -> int:
        """The events' spans, then the step marks of the steps they hold. A read that
        ended inside a line caught the framework writing (AReaL writes a step's events
        at its end, a buffer at a time): the rest of those steps comes with the next
        read, so their marks wait for it (a mark sent early would end the step short,
        and the server keeps a step's first mark)."""
        spans = list(complete_events(events))
        st = self.files[path]
        if not spans and not st["steps"]:
            return 0
        if st["anchor"] is None and spans:
            st["anchor"] = self.anchor_s if self.anchor_s is not None else \
                anchor_from_mtime(spans, os.path.getmtime(path))
        rank = rank_of(path)
        run = self.run if rank is None else Run(
            self.run.framework, self.run.project, self.run.experiment_name,
            {**self.run.resource, "rank": rank})
        sent = 0
        for i in range(0, len(spans), EXPORT_SPANS):
            payload = chrome_export(spans[i:i + EXPORT_SPANS], run, st["anchor"])
            if payload:
                sent += self._send(payload, len(spans[i:i + EXPORT_SPANS]))
        step_windows(spans, run.framework, st["anchor"], into=st["steps"])
        if st["steps"] and not torn:
            marks = marks_export(st["steps"], run)
            st["steps"] = {}
            if marks:
                self._send(marks, 0)
        return sent

    def _send(self, payload: bytes, spans: int) -> int:
        if self.send(payload):
            return spans
        self.exports_failed += 1
        if len(self.unsent) == self.unsent.maxlen:
            self.dropped_exports += 1
        self.unsent.append((payload, spans))
        return 0


def read_all(paths: Iterable[str | Path], run: Run, anchor_s: float | None = None
             ) -> Iterator[tuple[str, bytes, int]]:
    """(file, export, spans) for every file, read whole (``rl-insight import``)."""
    for path in paths:
        path = str(path)
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        kind = sniff(text)
        if kind == "otlp-lines":
            for line in text.splitlines():
                payload = otlp_json_export(line, run)
                if payload:
                    yield path, payload, line.count('"spanId"')
            continue
        spans = list(complete_events(chrome_events(text, kind)))
        anchor = anchor_s if anchor_s is not None else \
            anchor_from_mtime(spans, os.path.getmtime(path))
        rank = rank_of(path)
        own = run if rank is None else Run(run.framework, run.project, run.experiment_name,
                                           {**run.resource, "rank": rank})
        for payload, n in chrome_exports(spans, own, anchor):
            yield path, payload, n
