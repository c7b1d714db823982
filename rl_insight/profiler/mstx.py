"""Ascend PyTorch Profiler output of verl's NPU workers (``global_profiler.tool=npu``,
verl's ``mstx_profile.py``) read into a :class:`~rl_insight.profiler.model.RankTrace`:
one ``*_ascend_pt`` directory per profile, as ``torch_npu.profiler.
tensorboard_trace_handler`` names it (``<hostname>_<pid>_<timestamp>_ascend_pt``),
under verl's ``<save_path>/[<step>/]<role>/``.

What is read, and from where:

- ``profiler_info_<rank>.json`` (upstream RL-Insight's sample data and
  ``docs/data/data_specification.md``): ``rank_id`` (the rank; the file name's number
  where it is absent), ``end_info.collectionTimeEnd`` (unix ns, the collection's end),
  ``end_info.MonotonicTimeEnd`` and ``start_info.start_monotonic`` (monotonic ns): the
  collection's window in wall time, which the events must fall in;
- ``profiler_metadata.json`` (optional): ``role`` where the run added one (upstream
  reads it), ``parallel_group_info`` -> ``default_group``'s ``global_ranks`` (the world);
- ``ASCEND_PROFILER_OUTPUT/trace_view.json``: a Chrome-trace array (the CANN profiling
  guide, "trace_view.json"; opened in Perfetto). Processes are named by ``process_name``
  metadata events (``ph`` ``M``), threads by ``thread_name``; ``ts`` is unix
  microseconds, a string with decimals (``"1773285904640626.314"``), ``dur``
  microseconds. The layers, named as msprof's timeline names them
  (``trace_view_header_constant.py``): ``MsprofTx`` holds the application's MSTX
  ranges (verl's stage names: RANGE), ``Ascend Hardware`` the device's tasks per stream
  (KERNEL; ``hcom_*`` tasks are communication), ``HCCL`` the communication operators per
  communicator on threads ``Group <g> Communication`` (COLLECTIVE; its ``Plane`` threads
  are their small steps, not read), ``Overlap Analysis`` the profiler's own
  computing/communication split (not read: :mod:`rl_insight.profiler.kernels` makes
  ours). A profile without MSTX ranges (verl's ranges lost, an older torch_npu) gets
  one range named by its role over its device work, as upstream draws it.

The array is streamed (:mod:`rl_insight.profiler.jsonstream`); events of processes not
read are dropped as they come once their process is named.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rl_insight.profiler import jsonstream
from rl_insight.profiler.kernels import is_collective
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, BadFile, Event, RankTrace

SUFFIX = "_ascend_pt"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
TRACE = "trace_view.json"
RANGES, HARDWARE, HCCL = "MsprofTx", "Ascend Hardware", "HCCL"
READ = {RANGES: RANGE, HARDWARE: KERNEL, HCCL: COLLECTIVE}
INFO = re.compile(r"^profiler_info(?:_(?P<rank>\d+))?\.json$")
DIR = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<ts>\d+)" + SUFFIX + "$")
STEP = re.compile(r"^(?:global_)?step[_-]?(?P<n>\d+)$")
SLACK_NS = 60 * 10**9  # events this far outside the collection's window still belong
MSTX_ARGS = ("Category", "Payload_type")  # msprof's MsprofTx events carry these args


def files(root: str | Path) -> Iterator[Path]:
    """The ``*_ascend_pt`` directories under ``root`` (a directory is itself), in order."""
    root = Path(root)
    if root.name.endswith(SUFFIX):
        yield root
        return
    yield from sorted(p for p in root.rglob("*" + SUFFIX) if p.is_dir())


def step_of(path: str | Path) -> int | None:
    """The step verl's save layout names for a profile (``.../step_<N>/<role>/...``)."""
    path = Path(path)
    return _step(path.parent.parent if path.name == TRACE else path)


def read(path: str | Path) -> Iterator[RankTrace]:
    """The profile's trace; ``path``: its ``*_ascend_pt`` directory or its
    ``trace_view.json``."""
    path = Path(path)
    folder = path.parent.parent if path.name == TRACE else path
    info = _info(folder)
    trace = folder / OUTPUT / TRACE
    if not trace.is_file():
        raise BadFile(f"{folder}: no {OUTPUT}/{TRACE}: the profile was not parsed (verl's "
                      "`analysis: False`) or was exported as a database only; parse it "
                      "offline first: `python -c \"from torch_npu.profiler.profiler import "
                      f"analyse; analyse('{folder}')\"` where torch_npu is installed")
    meta = _json(folder / "profiler_metadata.json", required=False) or {}
    events, device = _Events(info, trace).read()
    role = str(meta.get("role") or _role(folder))
    if not any(e.kind == RANGE for e in events):
        work = [e for e in events if e.kind != RANGE]
        events.append(Event(RANGE, role or "profile", min(e.start_ns for e in work),
                            max(e.end_ns for e in work), "profile"))
    m = DIR.match(folder.name)
    yield RankTrace(info["rank"], str(folder), _step(folder), role, _world(meta),
                    m.group("host") if m else "", device, events)


def _json(path: Path, required: bool = True) -> Any:
    if not path.is_file():
        if required:
            raise BadFile(f"{path}: missing")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError) as e:
        raise BadFile(f"{path}: no JSON ({e}); copy the profile again") from e


def _info(folder: Path) -> dict:
    """The rank and the collection's window (unix ns) from ``profiler_info_<rank>.json``."""
    found = sorted(p for p in folder.glob("profiler_info*.json") if INFO.match(p.name))
    if not found:
        raise BadFile(f"{folder}: no profiler_info_<rank>.json, so its rank and clock are "
                      "unknown; copy the whole *_ascend_pt directory")
    raw = _json(found[0])
    if not isinstance(raw, dict):
        raise BadFile(f"{found[0]}: not the profiler's info object; copy it again")
    rank = str(raw.get("rank_id", INFO.match(found[0].name).group("rank") or ""))
    if not rank.isdigit():
        raise BadFile(f"{found[0]}: no rank (rank_id {raw.get('rank_id')!r}): profile "
                      "with torch.distributed initialised, so torch_npu records the rank")
    out = {"rank": int(rank), "end": None, "mono_end": None, "mono_start": None}
    end, start = raw.get("end_info") or {}, raw.get("start_info") or {}
    try:
        out["end"] = int(end["collectionTimeEnd"])  # unix ns
        out["mono_end"] = int(end["MonotonicTimeEnd"])  # monotonic ns, the same instant
        out["mono_start"] = int(start["start_monotonic"])  # monotonic ns, the start
    except (KeyError, TypeError, ValueError):
        pass  # an older torch_npu: the events' own unix times are trusted
    return out


def _role(folder: Path) -> str:
    """verl's save layout ``<save_path>/[<step>/]<role>/<...>_ascend_pt``: the parent,
    unless it is a step."""
    parent = folder.parent.name
    return "" if STEP.match(parent) else parent


def _step(folder: Path) -> int | None:
    for part in reversed(folder.parts[:-1]):
        m = STEP.match(part)
        if m:
            return int(m.group("n"))
    return None


def _world(meta: dict) -> int | None:
    groups = meta.get("parallel_group_info") or {}
    for g in groups.values() if isinstance(groups, dict) else ():
        if isinstance(g, dict) and g.get("group_name") == "default_group":
            return len(g.get("global_ranks") or []) or None
    return None


def ns(ts: Any) -> int:
    """A trace_view timestamp (unix µs, a decimal string or a number) in ns, exactly."""
    if isinstance(ts, str):
        whole, _, frac = ts.strip().partition(".")
        return int(whole) * 1000 + int((frac + "000")[:3] or 0)
    return round(float(ts) * 1000)


class _Events:
    """The trace's events as they stream by, kept by process until it is named."""

    def __init__(self, info: dict, path: Path) -> None:
        self.info, self.path = info, path
        self.process: dict[Any, str] = {}
        self.threads: dict[tuple, str] = {}
        self.device = ""
        self.pending: dict[Any, list[tuple]] = {}
        self.kept: list[tuple] = []  # (layer, pid, tid, name, start ns, end ns)
        self.offset: int | None = None

    def read(self) -> tuple[list[Event], str]:
        try:
            with jsonstream.open_text(self.path) as f:
                for _, ev in jsonstream.items(f):
                    if isinstance(ev, dict):
                        self._event(ev)
        except jsonstream.BadJson as e:
            raise BadFile(f"{self.path}: {e}; copy the profile again") from e
        except (KeyError, TypeError, ValueError) as e:
            raise BadFile(f"{self.path}: an event the format does not allow ({e}); "
                          "parse the profile again") from e
        return self._events(), self.device

    def _event(self, ev: dict) -> None:
        ph, pid = ev.get("ph"), ev.get("pid")
        if ph == "M":
            args = ev.get("args") or {}
            if ev.get("name") == "process_name":
                self.process[pid] = name = str(args.get("name", ""))
                for held in self.pending.pop(pid, []):
                    self._keep(name, *held)
            elif ev.get("name") == "thread_name":
                self.threads[(pid, ev.get("tid"))] = str(args.get("name", ""))
            elif ev.get("name") == "process_labels" and not self.device:
                self.device = str(args.get("labels", "")).replace("NPU", "").strip()
            return
        if ph != "X" or "ts" not in ev:
            return
        start = self._placed(ns(ev["ts"]))
        held = (pid, ev.get("tid"), str(ev.get("name", "")), start,
                start + round(float(ev.get("dur") or 0) * 1000),
                any(k in (ev.get("args") or {}) for k in MSTX_ARGS))
        if pid in self.process:
            self._keep(self.process[pid], *held)
        else:
            self.pending.setdefault(pid, []).append(held)

    def _keep(self, layer: str, pid, tid, name, start, end, mstx) -> None:
        if layer in READ:
            self.kept.append((layer, pid, tid, sys.intern(name), start, end))
        elif mstx:  # msprof's MSTX fields on an event of another host layer
            self.kept.append((RANGES, pid, tid, sys.intern(name), start, end))

    def _placed(self, t: int) -> int:
        """Wall time: the events' own, checked against the collection's window; times on
        the monotonic clock (the window's other side) moved onto the wall clock."""
        if self.offset is None:
            self.offset = self._offset(t)
        return t + self.offset

    def _offset(self, t: int) -> int:
        end, mono_end, mono_start = (self.info[k] for k in ("end", "mono_end", "mono_start"))
        if end is None:
            if t >= 10**18:  # after 2001 in unix ns: the trace's own wall time
                return 0
            raise BadFile(f"{self.path}: its times are no unix times and profiler_info "
                          "gives no clock to place them; parse the profile again")
        start = end - (mono_end - mono_start)
        if start - SLACK_NS <= t <= end + SLACK_NS:
            return 0
        if mono_start - SLACK_NS <= t <= mono_end + SLACK_NS:
            return end - mono_end
        raise BadFile(f"{self.path}: its events ({t} ns) lie outside its collection's window "
                      f"({start}-{end} unix ns, profiler_info): it is not this profile's "
                      "trace, or its clock cannot be placed; copy the directory whole")

    def _events(self) -> list[Event]:
        hccl = any(layer == HCCL for layer, *_ in self.kept)
        kept, lanes = self.kept, {}
        for i, (layer, pid, tid, name, start, end) in enumerate(kept):  # in place
            thread = self.threads.get((pid, tid)) or f"thread {tid}"
            thread = lanes.setdefault(thread, thread)
            kind = READ[layer]
            kept[i] = None  # type: ignore[call-overload]  (left out unless set below)
            if layer == HCCL and "Communication" not in thread:
                continue  # a plane's small steps of the group's operators
            if layer == HARDWARE and is_collective(name):
                if hccl:
                    continue  # the same operator the HCCL layer names
                kind = COLLECTIVE
            kept[i] = Event(kind, name, start, max(start, end), thread)
        out, self.kept = [e for e in kept if e is not None], []
        if not out:
            raise BadFile(f"{self.path}: no MSTX range, device task or HCCL operator in "
                          "it; profile with the NPU activity on (verl's contents: npu) at "
                          "level0 or above")
        return out
