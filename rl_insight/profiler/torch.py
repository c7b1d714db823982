"""torch.profiler's Chrome traces, as verl writes them (``global_profiler.tool=torch``),
read into a :class:`~rl_insight.profiler.model.RankTrace`, streamed: the events come one
at a time from the (gzip) stream (:mod:`rl_insight.profiler.jsonstream`) and only what
the model needs of each is kept (a multi-hundred-MB file is never in memory whole).

What verl 0.9.1 writes (``verl/utils/profiler/torch_profile.py``): one file per rank and
RL step in continuous mode, one per stage in discrete mode, named by
``build_trace_basename``: ``[<save_file_prefix>_][<role>_][step<N>_]rank<R>[-of-<W>]
[_<tp..pp..dp..cp..>]_pid<P>_<timestamp>[_part<i>|_mb<a>[-<b>]].json.gz`` (every part
but the fixed ones sanitised to ``[0-9A-Za-z.=+-]``, so ``_`` only separates); each stage
a ``record_function`` named by its role (:mod:`rl_insight.profiler.stages`).

What torch writes inside (measured on torch 2.13, CPU and gloo): a JSON object with
``distributedInfo`` (``rank``, ``world_size``, ``backend``), ``host_name``,
``baseTimeNanoseconds`` and ``traceEvents``; an event's ``ts`` (µs) counts from
``baseTimeNanoseconds`` (``baseTimeNanoseconds + ts * 1000`` fell within the file's
writing, as the wall clock read it); ``record_function`` regions are ``ph: X`` events of
``cat: user_annotation``, operators ``cpu_op``, device work ``kernel``, ``gpu_memcpy``,
``gpu_memset`` (``args``: ``device``, ``stream``); gloo's collectives run on its own
thread as ``user_annotation`` events named ``gloo:<op>``, beside the caller's
``c10d::<op>_`` operators (one of each per collective). Communication kept per file:
NCCL's device kernels where there are any, else the CPU side's, in this order of
preference: the backend's own (``gloo:``, ``nccl:``...: its work and how long it took),
``c10d::`` operators (the call), ``record_param_comms``; one family, so a collective
counts once.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_insight.profiler import jsonstream
from rl_insight.profiler.kernels import C10D_CALL, PARAM_COMMS, is_collective
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, BadFile, Event, RankTrace
from rl_insight.profiler.stages import STAGES

SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
BACKENDS = ("gloo:", "nccl:", "hccl:", "ucc:", "mpi:")  # a backend's own collective regions
WALL_US = 1e15  # a ts in µs above this is unix time already (older torch, no base)
MAX_NS = (1 << 63) - 1
MAX_US = 1e16  # a ts or dur beyond (300 years in µs) is no time of a trace
MAX_BASE = 1 << 62
MAX_RANK = (1 << 31) - 1
_RANK = re.compile(r"rank(\d+)(?:-of-(\d+))?")
_STEP = re.compile(r"step(\d+)")
_PID = re.compile(r"pid(\d+)")
_INT = (int, float)

# One uploaded file as the API takes it (POST /api/v1/import/torch): what `read` needs
# inside a file when no name tells it anything
UPLOAD: dict[str, Any] = {
    "type": "object", "required": ["distributedInfo", "baseTimeNanoseconds"],
    "description": "a torch.profiler Chrome trace (prof.export_chrome_trace), gzip or not "
                   "(Content-Encoding: gzip)",
    "properties": {
        "traceEvents": {"type": "array", "items": {"type": "object"}},
        "distributedInfo": {"type": "object", "required": ["rank"], "properties": {
            "rank": {"type": "integer", "minimum": 0, "maximum": MAX_RANK},
            "world_size": {"type": "integer", "minimum": 1, "maximum": MAX_RANK + 1}}},
        "baseTimeNanoseconds": {"type": "integer", "minimum": 0, "maximum": MAX_BASE},
        "host_name": {"type": "string"}}}


@dataclass(frozen=True)
class FileName:
    """What verl's name of a trace file says (each part "" or None where it says none)."""

    prefix: str = ""  # save_file_prefix: the worker's role (actor, ref, critic)
    role: str = ""  # the profiling role: train (continuous), the stage (discrete)
    step: int | None = None
    rank: int | None = None
    world: int | None = None
    pid: str = ""


def parse_name(name: str) -> FileName:
    """The parts of a trace file's name as ``build_trace_basename`` joins them."""
    stem = name
    for suffix in SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[:-len(suffix)]
            break
    tokens = stem.split("_")
    pid_at = next((i for i, t in enumerate(tokens) if _PID.fullmatch(t)), len(tokens))
    at = next((i for i in range(pid_at - 1, -1, -1) if _RANK.fullmatch(tokens[i])), None)
    if at is None:
        return FileName()
    m = _RANK.fullmatch(tokens[at])
    lead = tokens[:at]
    step = None
    if lead and _STEP.fullmatch(lead[-1]):
        step = int(lead.pop()[4:])
    prefix = role = ""
    if len(lead) >= 2:
        prefix, role = lead[0], "_".join(lead[1:])
    elif lead:  # one part: the profiling role where it names one, else the prefix
        if lead[0] == "train" or lead[0].replace("-", "_") in STAGES:
            role = lead[0]
        else:
            prefix = lead[0]
    pid = tokens[pid_at][3:] if pid_at < len(tokens) else ""
    return FileName(prefix, role, step, int(m.group(1)),
                    int(m.group(2)) if m.group(2) else None, pid)


def files(root: str | Path) -> Iterator[Path]:
    """The trace files under ``root`` (a file is itself): verl's names (``..rank<R>
    [-of-<W>]_.._pid<P>_..``) and torch's own handler's (``*.pt.trace.json[.gz]``), in
    name order; other JSON beside them is left alone."""
    root = Path(root)
    if root.is_file():
        yield root
        return
    found = []
    for p in root.rglob("*"):
        name = p.name
        if not p.is_file() or not name.endswith((".json", ".json.gz")):
            continue
        if ".pt.trace.json" in name or parse_name(name).pid:
            found.append(p)
    yield from sorted(found)


def read(path: str | Path, *, name: str | None = None, step: int | None = None,
         strict: bool = False) -> Iterator[RankTrace]:
    """The rank's trace in one file. ``name``: the file's name as verl wrote it (an
    upload's, where ``path`` is a temporary file); ``step`` where the name tells none;
    ``strict``: what the file says of itself must be inside it (rank, wall clock: the
    API's upload, ``UPLOAD``), not read from its name."""
    path = Path(path)
    fname = parse_name(name or path.name)
    try:
        with jsonstream.open_text(path) as f:
            trace = _Reader(str(name or path), fname, strict).read(f)
    except jsonstream.BadJson as exc:
        if str(exc).startswith("cannot be read to its end"):  # the gzip stream broke
            raise BadFile(f"a truncated or damaged gzip ({exc}): a file copied or written "
                          "in part; copy it again, or export it again") from None
        raise BadFile(f"not a whole JSON document ({exc}): a torch trace cut short or "
                      "damaged; export it again") from None
    except (OSError, EOFError, UnicodeError, RecursionError) as exc:
        raise BadFile(f"cannot be read ({exc.__class__.__name__}: {exc}); a damaged "
                      "or truncated gzip: copy or export it again") from None
    if trace.step is None:
        trace.step = step
    yield trace


def _integer(value: Any, what: str, lo: int, hi: int) -> int:
    """A field JSON Schema calls an integer (3.0 is one; true is none), within bounds."""
    if isinstance(value, bool) or not isinstance(value, _INT) or \
            (isinstance(value, float) and not value.is_integer()) or not lo <= value <= hi:
        raise BadFile(f"{what} is {value!r}, no integer from {lo} to {hi}: not a torch "
                      "trace as torch writes it")
    return int(value)


class _Reader:
    """One file's header and events as they stream by."""

    def __init__(self, source: str, fname: FileName, strict: bool) -> None:
        self.source, self.fname, self.strict = source, fname, strict
        self.header: dict[str, Any] = {}
        self.base: int | None = None  # baseTimeNanoseconds, once read
        self.events: list[Event] = []
        self.cpu: tuple[list[Event], list[Event], list[Event]] = ([], [], [])
        self.device = ""
        self.skipped = 0

    def read(self, f) -> RankTrace:
        for key, value in jsonstream.items(f, "traceEvents"):
            if key is None or (key == "traceEvents" and not isinstance(key, jsonstream.Member)):
                if key is None and self.strict:
                    raise BadFile("a bare array of events: the upload takes torch's "
                                  "object (traceEvents, distributedInfo, ...)")
                if not isinstance(value, dict):
                    raise BadFile(f"traceEvents holds {type(value).__name__}s, not "
                                  "events (objects): not a Chrome trace")
                self.event(value)
            else:
                self.member(key, value)
        return self.finish()

    def member(self, key: str, value: Any) -> None:
        if key == "traceEvents":
            raise BadFile(f"traceEvents is {type(value).__name__}, not an array of "
                          "events: not a Chrome trace")
        if key == "baseTimeNanoseconds":
            if self.base is None:
                self.base = _integer(value, key, 0, MAX_BASE)
                self.placed(self.base)
        elif key == "distributedInfo":
            if not isinstance(value, dict):
                raise BadFile("distributedInfo is no object: not a torch trace")
        elif key == "host_name" and not isinstance(value, str):
            raise BadFile("host_name is no string: not a torch trace")
        self.header[key] = value

    def event(self, ev: Mapping[str, Any]) -> None:
        if ev.get("ph") != "X":
            return
        cat, name = ev.get("cat"), ev.get("name")
        if not isinstance(name, str):
            return
        if cat in DEVICE_CATS:
            kind = COLLECTIVE if is_collective(name) else KERNEL
            args = ev.get("args")
            args = args if isinstance(args, dict) else {}
            if not self.device and isinstance(args.get("device"), (int, str)) \
                    and not isinstance(args.get("device"), bool):
                self.device = str(args["device"])
            self.add(self.events, kind, name, ev, f"stream {args.get('stream', '?')}")
        elif cat == "user_annotation":
            if name.startswith("ProfilerStep#"):  # torch's own step marker, no stage
                return
            if name.startswith(BACKENDS):
                self.add(self.cpu[0], COLLECTIVE, name, ev, f"thread {ev.get('tid')}")
            else:
                self.add(self.events, RANGE, name, ev, f"thread {ev.get('tid')}")
        elif cat == "cpu_op":
            if name.startswith(C10D_CALL):
                self.add(self.cpu[1], COLLECTIVE, name, ev, f"thread {ev.get('tid')}")
            elif name == PARAM_COMMS:
                self.add(self.cpu[2], COLLECTIVE, name, ev, f"thread {ev.get('tid')}")

    def add(self, into: list[Event], kind: str, name: str, ev: Mapping[str, Any],
            lane: str) -> None:
        ts, dur = ev.get("ts"), ev.get("dur", 0)
        if isinstance(ts, bool) or isinstance(dur, bool) or not isinstance(ts, _INT) or \
                not isinstance(dur, _INT) or not (0 <= ts < MAX_US and 0 <= dur < MAX_US):
            self.skipped += 1  # NaN too: it compares false
            return
        start = round(ts * 1000) + (self.base or 0)
        end = start + round(dur * 1000)
        if end > MAX_NS:
            self.skipped += 1
            return
        into.append(Event(kind, sys.intern(name), start, end, sys.intern(lane)))

    def placed(self, base: int) -> None:
        """Events read before ``baseTimeNanoseconds`` (torch writes it first; another
        writer may not) moved to wall time."""
        for events in (self.events, *self.cpu):
            events[:] = [e._replace(start_ns=e.start_ns + base, end_ns=e.end_ns + base)
                         for e in events if e.end_ns + base <= MAX_NS]

    def finish(self) -> RankTrace:
        rank, world = self.identity()
        events = self.events
        comm = [e for e in events if e.kind == COLLECTIVE]
        if not comm:  # no device collectives: the CPU side's, one family
            events.extend(next((c for c in self.cpu if c), []))
        if self.base is None:
            self.unplaced(events)
        events.sort(key=lambda e: (e.start_ns, -e.end_ns))
        host = self.header.get("host_name")
        fname = self.fname
        return RankTrace(rank=rank, source=self.source, step=fname.step,
                         role=fname.prefix or fname.role, world_size=world,
                         node=host if isinstance(host, str) else "", device=self.device,
                         events=events)

    def identity(self) -> tuple[int, int | None]:
        """(global rank, world size): distributedInfo's, else verl's name's."""
        info = self.header.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        world = _integer(info["world_size"], "distributedInfo.world_size", 1, MAX_RANK + 1) \
            if "world_size" in info else self.fname.world
        if "rank" in info:
            return _integer(info["rank"], "distributedInfo.rank", 0, MAX_RANK), world
        if self.strict:
            raise BadFile("no distributedInfo.rank inside: an upload must say its rank "
                          "(torch writes it when a process group is up)")
        if self.fname.rank is None:
            raise BadFile("no rank: neither distributedInfo.rank inside (torch writes it "
                          "when a process group is up) nor rank<R> in verl's file name; "
                          "keep verl's file names")
        return self.fname.rank, world

    def unplaced(self, events: list[Event]) -> None:
        """A file with no ``baseTimeNanoseconds``: its times must be unix time already
        (older torch wrote them so), or it cannot be placed and is refused, never
        guessed at."""
        if self.strict or not events or any(e.start_ns < WALL_US * 1000 for e in events):
            raise BadFile("no baseTimeNanoseconds (torch's wall clock of the trace's "
                          "zero): its times cannot be placed; export it with torch >= 2.0")


def step_of(path: str | Path) -> int | None:
    """The RL step a file's name says it holds (the importer reads a step's files
    together, then sends its mark)."""
    return parse_name(Path(path).name).step
