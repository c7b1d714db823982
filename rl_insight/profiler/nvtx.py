"""Nsight Systems reports of verl's workers, as ``nsys export --type jsonlines`` writes
them, read into a :class:`~rl_insight.profiler.model.RankTrace`: verl's NVTX ranges, the
CUDA kernels, memory copies and NCCL's kernels of one worker process.

verl 0.9.1 (``verl/utils/profiler/nvtx_profile.py``) marks each stage with an NVTX range
named by its ``role`` (``actor_compute_log_prob``, ``actor_update``, ...) or the
method's name, and Ray's nsight plugin writes one report per worker process and capture
range, ``worker_process_<PID>.<RID>.nsys-rep``; ``relocate_results`` moves it to
``<prefix>_<hostname>_worker_process_<PID>.<RID>.nsys-rep`` (``<prefix>``: the
profiler's ``save_file_prefix``, the role). The export keeps that name with
``.jsonl``.

The format (NVIDIA Nsight Systems Analysis Guide, "JSON Lines"): one JSON object per
line, each a row of the report's SQLite export, its ``table`` field naming the table.
The tables and columns read (Nsight Systems' SQLite schema reference):

- ``StringIds`` (``id``, ``value``): the string table the rows refer to by id;
- ``TARGET_INFO_SESSION_START_TIME`` (``utcEpochNs``): the session's start in unix
  time; every event's ``start``/``end`` counts nanoseconds from it, so wall time is
  their sum (a file without it cannot be placed and is skipped, not guessed);
- ``TARGET_INFO_SYSTEM_ENV`` (``name`` ``Hostname``, ``value``): the node;
- ``META_DATA_CAPTURE`` (``name`` ``PROCESS_<n>:ENVIRONMENT_VARIABLE``, ``value``
  ``RANK="0"``): the profiled process's environment, where verl's worker group sets
  ``RANK`` and ``WORLD_SIZE`` (``verl/single_controller/ray/base.py``); upstream
  RL-Insight reads the rank from the same row (``rl_insight/parser/nvtx_parser.py``);
- ``NVTX_EVENTS`` (``eventType`` 59 push/pop and 60 start/end ranges, ``start``,
  ``end``, ``text`` or ``textId``, ``globalTid``, ``domainId``; 75 names a domain):
  the ranges, library domains (NCCL's API ranges) left out;
- ``CUPTI_ACTIVITY_KIND_KERNEL`` (``start``, ``end``, ``shortName`` (a string id),
  ``streamId``, ``deviceId``): kernels; NCCL's (``ncclDevKernel_*``) are collectives;
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` and ``..._MEMSET`` (``start``, ``end``, ``streamId``):
  device work too.

``globalTid`` packs the process id in bits 24-47 (the schema reference's "Serialized
process and thread identifiers"). Read line by line: rows of other tables are skipped
before they are decoded, and memory holds the string table and the kept events, never
the file.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from rl_insight.profiler import jsonstream
from rl_insight.profiler.kernels import is_collective
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, BadFile, Event, RankTrace

NAME = re.compile(r"^(?:(?P<lead>.+)_)?worker_process_(?P<pid>\d+)(?:\.(?P<rid>\d+))?"
                  r"(?:\.nsys-rep)?\.(?:jsonl|json)(?:\.gz)?$")
RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange (the schema's event types)
DOMAIN_CREATE = 75  # NvtxDomainCreate: ``text`` names the domain ``domainId``
LIBRARY_DOMAINS = frozenset({"nccl", "cublas", "cudnn", "cub", "nvshmem", "cufft"})
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
COPIES = {"CUPTI_ACTIVITY_KIND_MEMCPY": "memcpy", "CUPTI_ACTIVITY_KIND_MEMSET": "memset"}
TABLES = frozenset({"StringIds", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_SYSTEM_ENV",
                    "META_DATA_CAPTURE", "NVTX_EVENTS", KERNELS, *COPIES})
ENV_ROW = ":ENVIRONMENT_VARIABLE"
ENV = re.compile(r'^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<q>"?)(?P<value>.*)(?P=q)\s*$')
_TABLE = '"table":"'


class UnknownRank(BadFile):
    """A report that does not say whose rank it is: named and skipped (a rank guessed
    from a file's order would put one GPU's kernels on another's lane)."""


def files(root: str | Path) -> Iterator[Path]:
    """The exported reports under ``root`` (a file is itself), in name order."""
    root = Path(root)
    if root.is_file():
        yield root
        return
    yield from sorted(p for p in root.rglob("*") if p.is_file() and NAME.match(p.name))


def read(path: str | Path, ranks: Mapping[str, int] | None = None) -> Iterator[RankTrace]:
    """The worker's trace. ``ranks``: the rank of a report whose process's environment
    says none (``--rank-from``), by its file name, ``<host>:<pid>`` or ``<pid>``."""
    path = Path(path)
    rows = _Rows(path)
    rows.read()
    yield rows.trace(ranks or {})


class _Rows:
    """The rows of one export that matter, as they are read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        m = NAME.match(path.name)
        lead = (m.group("lead") or "") if m else ""
        self.pid = m.group("pid") if m else ""
        self.prefix, _, self.host = lead.rpartition("_") if "_" in lead else ("", "", lead)
        self.strings: dict[int, str] = {}
        self.session: int | None = None
        self.env: dict[str, str] = {}
        self.domains: dict[int, object] = {}
        # device work as it comes (times from the session's start, placed at the end); a
        # name whose string is not in yet waits in ``unnamed`` (index -> string id)
        self.work: list[Event] = []
        self.unnamed: dict[int, int] = {}
        self.lanes: dict[object, str] = {}
        # ranges: (name or string id, start, end, lane, domain id), the domains named later
        self.ranges: list[tuple] = []

    def read(self) -> None:
        try:
            for n, line in jsonstream.lines(self.path):
                table = _table_of(line)
                if table is not None and table not in TABLES:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadFile(f"{self.path}: line {n} is no JSON ({e.msg}): the export "
                                  "was cut short or damaged; export the report again with "
                                  "`nsys export --type jsonlines`") from e
                if not isinstance(row, dict):
                    continue
                try:
                    self._row(row)
                except (KeyError, TypeError, ValueError) as e:
                    raise BadFile(f"{self.path}: line {n}: a {row.get('table')} row the "
                                  f"schema does not allow ({type(e).__name__}: {e}); "
                                  "export the report again") from e
        except jsonstream.BadJson as e:
            raise BadFile(f"{self.path}: {e}; copy or export it again") from e

    def _row(self, row: dict) -> None:
        table = row.get("table")
        if table == "StringIds":  # (id, value)
            self.strings[int(row["id"])] = str(row.get("value", ""))
        elif table == "TARGET_INFO_SESSION_START_TIME":  # utcEpochNs: the session's start
            self.session = int(row["utcEpochNs"])
        elif table == "TARGET_INFO_SYSTEM_ENV" and row.get("name") == "Hostname":
            self.env.setdefault("__host__", str(row.get("value", "")))
        elif table == "META_DATA_CAPTURE" and str(row.get("name", "")).endswith(ENV_ROW):
            m = ENV.match(str(row.get("value", "")))  # RANK="0"
            if m:
                self.env.setdefault(m.group("key"), m.group("value"))
        elif table == "NVTX_EVENTS":
            self._nvtx(row)
        elif table == KERNELS:  # start, end, shortName (string id), streamId
            self._work(row.get("shortName", row.get("demangledName")), row)
        elif table in COPIES:
            self._work(COPIES[table], row)

    def _work(self, ref: object, row: dict) -> None:
        stream = row.get("streamId", "")
        lane = self.lanes.get(stream) or self.lanes.setdefault(stream, f"stream {stream}")
        if isinstance(ref, int):
            name = self.strings.get(ref)
            if name is None:
                self.unnamed[len(self.work)] = ref
        else:
            name = "" if ref is None else str(ref)
        self.work.append(Event(KERNEL, sys.intern(name or ""), int(row["start"]),
                               int(row["end"]), lane))

    def _nvtx(self, row: dict) -> None:
        kind = row.get("eventType")
        text = row.get("text") if row.get("text") is not None else row.get("textId")
        if kind == DOMAIN_CREATE:
            self.domains[int(row.get("domainId") or 0)] = text
        elif kind in RANGE_TYPES and row.get("end") is not None:
            tid = int(row.get("globalTid") or 0) & 0xFFFFFF
            self.ranges.append((text, int(row["start"]), int(row["end"]), f"thread {tid}",
                                int(row.get("domainId") or 0)))

    def _name(self, ref: object) -> str:
        if isinstance(ref, int):
            return self.strings.get(ref, f"string {ref}")
        return "" if ref is None else str(ref)

    def trace(self, ranks: Mapping[str, int]) -> RankTrace:
        if self.session is None:
            raise BadFile(f"{self.path}: no session start (table TARGET_INFO_SESSION_START_"
                          "TIME), so its times cannot be placed in wall time; export the "
                          ".nsys-rep again with `nsys export --type jsonlines` (a file cut "
                          "down by hand loses it)")
        if not self.work and not self.ranges:
            raise BadFile(f"{self.path}: no NVTX range and no CUDA kernel in it; profile "
                          "with nsys' --trace=cuda,nvtx (verl's worker_nsight_options)")
        library = {d for d, name in self.domains.items()
                   if self._name(name).lower() in LIBRARY_DOMAINS}
        host = self.env.get("__host__") or self.host
        rank = self._rank(ranks, host)
        events, self.work = self._placed(self.session), []
        events += [Event(RANGE, self._name(ref), self.session + s, self.session + e, lane)
                   for ref, s, e, lane, domain in self.ranges
                   if e >= s and domain not in library]
        world = self.env.get("WORLD_SIZE", "")
        device = self.env.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        return RankTrace(rank, str(self.path), None, self.prefix,
                         int(world) if world.isdigit() else None, host, device, events)

    def _placed(self, base: int) -> list[Event]:
        """The device work in wall time, NCCL's kernels as collectives; in place, one
        event at a time (a million kernels are not held twice)."""
        work, comm = self.work, {}
        for i, e in enumerate(work):
            name = sys.intern(self._name(self.unnamed[i])) if i in self.unnamed else e.name
            kind = comm.get(name)
            if kind is None:
                kind = comm[name] = COLLECTIVE if is_collective(name) else KERNEL
            if e.end_ns >= e.start_ns:
                work[i] = Event(kind, name, base + e.start_ns, base + e.end_ns, e.lane)
            else:
                work[i] = None  # type: ignore[call-overload]  (dropped below)
        return [e for e in work if e is not None]

    def _rank(self, ranks: Mapping[str, int], host: str) -> int:
        told = self.env.get("RANK", "")
        if told.isdigit():
            return int(told)
        for key in (self.path.name, f"{host}:{self.pid}", self.pid):
            if key and key in ranks:
                return int(ranks[key])
        raise UnknownRank(
            f"{self.path}: no rank: its process's environment (table META_DATA_CAPTURE) "
            f"has no RANK (process {self.pid or '?'} on {host or '?'}); give each such "
            "report's rank with --rank-from FILE, lines `<file name or host:pid or pid> "
            "<rank>` (verl's finish hook exports VERL_PROFILE_PID and VERL_PROFILE_RANK)")


def _table_of(line: str) -> str | None:
    """The row's table without decoding the line (None: not spelt as nsys spells it)."""
    i = line.find(_TABLE)
    if i < 0:
        return None
    j = line.find('"', i + len(_TABLE))
    return line[i + len(_TABLE):j] if j > 0 else None

