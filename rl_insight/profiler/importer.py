"""One import of profiler files into a run: the files read one at a time (a reader from
:mod:`rl_insight.profiler.readers`), each file's spans sent only once the file was read
whole (a damaged file is named with why and skipped, nothing of it sent), a step's mark
once its files are in; optionally every rank's events written to a merged timeline.

Memory holds one file's events at a time and, per step not yet marked, its window: a
1,000-rank directory costs what its largest file does (docs/performance.md).
``send`` is the caller's (the CLI's HTTP client, a test's): it returns whether the server
took the export.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

from rl_insight.profiler import experts, export, readers
from rl_insight.profiler.model import BadFile
from rl_insight.profiler.stages import phase_of
from rl_insight.profiler.timeline import RankTimeline
from rl_insight.wire.attributes import STEP_ATTR
from rl_insight.wire.events import Span

READ_ERRORS = (BadFile, OSError, EOFError, ValueError, UnicodeError, RecursionError)


class SendFailed(RuntimeError):
    """The server did not take an export: the import stops there (what was sent is
    whole files; sending them again is harmless, see ``Import.run``)."""


@dataclass
class Tally:
    """What an import did, for its progress and its summary."""

    files: int = 0  # inputs found
    read: int = 0  # files read whole and sent
    bytes: int = 0  # of the files read
    spans: int = 0
    ranks: set[int] = field(default_factory=set)
    steps: set[int] = field(default_factory=set)
    roles: set[str] = field(default_factory=set)
    unmarked: int = 0  # ranges that are no verl stage (in the timeline only)
    bad: dict[str, str] = field(default_factory=dict)  # file -> why it was skipped
    experts: int = 0  # (step, stage) expert loads put on a span


def inputs(reader: readers.Reader, paths: Iterable[str | Path]) -> list[Path]:
    """Every input under ``paths`` (directories walked by the reader), each once, a
    step's together and in step order where the reader's names tell steps."""
    seen: dict[Path, None] = {}
    for p in paths:
        for f in reader.files(p):
            seen.setdefault(Path(f), None)
    step_of = getattr(reader, "step_of", None)

    def key(p: Path) -> tuple:
        step = step_of(p) if step_of else None
        return (step is None, step or 0, str(p))

    return sorted(seen, key=key)


@dataclass
class Digest:
    """What an import keeps of one file read whole (small: the events are let go):
    its ranks' stage spans, their steps' windows, its figures; or why it is bad."""

    path: str
    bad: str = ""
    spans: list[Span] = field(default_factory=list)
    windows: dict[int, export.Window] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    roles: set[str] = field(default_factory=set)
    unmarked: int = 0
    bytes: int = 0


def digest(profiler: str, path: Path, options: dict,
           timeline: RankTimeline | None = None) -> Digest:
    """One file read whole and reduced to what the import sends (in a worker process
    with ``--jobs``); its events go to ``timeline`` first where there is one."""
    try:
        traces = list(readers.get(profiler).read(path, **options))
    except READ_ERRORS as exc:
        why = str(exc) if isinstance(exc, BadFile) else \
            f"cannot be read ({exc.__class__.__name__}: {exc})"
        return Digest(str(path), bad=why)
    if not traces:
        return Digest(str(path), bad="no rank's events in it")
    d = Digest(str(path))
    for t in traces:
        d.spans += export.rank_spans(t, profiler, export.process_of(t))
        d.unmarked += sum(1 for r in t.ranges() if phase_of(r.name) is None)
        d.ranks.add(t.rank)
        if t.role:
            d.roles.add(t.role)
        if timeline is not None:
            timeline.add(t)
    export.steps_of(traces, d.windows)
    try:
        d.bytes = os.path.getsize(path)
    except OSError:
        pass
    return d


class Import:
    """An import's state: the reader, the run, the sender, the steps not yet marked."""

    def __init__(self, profiler: str, project: str, experiment: str,
                 send: Callable[[bytes], bool], timeline: RankTimeline | None = None,
                 options: dict | None = None,
                 experts: Mapping[tuple[int, str], Mapping[int, list[int]]] | None = None
                 ) -> None:
        self.profiler = profiler
        self.options = options or {}  # the reader's own (nvtx: ranks=, from --rank-from)
        self.reader = readers.get(profiler)
        self.project, self.experiment = project, experiment
        self.send_export = send
        self.timeline = timeline
        self.tally = Tally()
        self.pending: dict[int, export.Window] = {}  # steps read, not yet marked
        self.marked_end = 0  # the newest mark's end (the next starts there at the earliest)
        self.step_of = getattr(self.reader, "step_of", None)
        # an MoE model's expert loads (profiler/experts.py), (step, phase) -> layers: each
        # goes on the first span of that stage in that step, once (the ranks' summed)
        self.experts = {(step, phase_of(stage) or stage): layers
                        for (step, stage), layers in (experts or {}).items()}
        self._experts_put: set[tuple[int, str]] = set()

    def digest(self, path: Path) -> Digest:
        return digest(self.profiler, path, self.options, self.timeline)

    def take(self, d: Digest) -> None:
        """A file read whole: its ranks' spans sent, its steps' windows kept for their
        marks; a bad one named with why."""
        if d.bad:
            self.tally.bad[d.path] = d.bad
            return
        self.send([self._with_experts(s) for s in d.spans] if self.experts else d.spans)
        for step, w in d.windows.items():
            export.widen(self.pending, step, w)
        t = self.tally
        t.read += 1
        t.bytes += d.bytes
        t.unmarked += d.unmarked
        t.ranks |= d.ranks
        t.roles |= d.roles

    def _with_experts(self, span: Span) -> Span:
        """The span with its stage's expert loads, if it is the first of that stage and
        step to come."""
        key = (dict(span.attributes).get(STEP_ATTR), span.name)
        if key not in self.experts or key in self._experts_put:
            return span
        self._experts_put.add(key)
        self.tally.experts += 1
        return span._replace(attributes=span.attributes + tuple(
            experts.span_attributes(self.experts[key]).items()))

    def send(self, spans: list[Span]) -> None:
        for payload, n in export.exports(spans, self.project, self.experiment,
                                         self.profiler):
            if not self.send_export(payload):
                raise SendFailed(f"the server did not take {n} spans")
            self.tally.spans += n

    def mark(self, steps: Iterable[int] | None = None) -> None:
        """The marks of the pending steps (``steps``: of these only)."""
        chosen = sorted(self.pending if steps is None else
                        [s for s in steps if s in self.pending])
        if not chosen:
            return
        windows = {}
        for s in chosen:  # a step's window starts where the one before ended: a rank's
            w = self.pending[s]  # phase is read in the step it ended in, once
            w[0] = min(max(w[0], self.marked_end), w[1])
            self.marked_end = max(self.marked_end, w[1])
            windows[s] = w
        self.send(export.marks(windows))
        for s in chosen:
            del self.pending[s]
            self.tally.steps.add(s)

    def run(self, files: list[Path], progress: Callable[[Path], None] = lambda p: None,
            jobs: int = 1) -> Tally:
        """Every file in order (read by ``jobs`` processes; one with a timeline, which
        needs the events here); a step's mark as soon as the next file is of another
        step (the reader's names say so), the rest at the end. Raises SendFailed when
        the server stops taking exports: the files before were sent whole, and sending
        them again is harmless (the server takes a rank's phase told twice as one)."""
        self.tally.files += len(files)
        for path, d in self._digests(files, jobs):
            hint = self.step_of(path) if self.step_of else None
            if hint is not None:
                self.mark([s for s in self.pending if s != hint])
            self.take(d)
            progress(path)
        self.mark()
        return self.tally

    def _digests(self, files: list[Path], jobs: int) -> Iterator[tuple[Path, Digest]]:
        if jobs <= 1 or self.timeline is not None or len(files) < 2:
            for path in files:
                yield path, self.digest(path)
            return
        with ProcessPoolExecutor(jobs) as pool:  # results in order, each small
            yield from zip(files, pool.map(digest, repeat(self.profiler), files,
                                           repeat(self.options)), strict=True)


@dataclass
class Seen:
    size: int
    mtime: float
    since: float  # monotonic: when it was first seen this way


class Follower:
    """Files read as a run writes them (``--follow``): a file once it stopped growing
    for ``settle_s`` (torch gzips a trace as it writes it), a step's mark once no file
    of it came for ``settle_s``. A bad file is said once and tried again only when it
    changes."""

    def __init__(self, job: Import, paths: list[str], settle_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.job, self.paths, self.settle_s, self.clock = job, paths, settle_s, clock
        self.seen: dict[Path, Seen] = {}
        self.done: dict[Path, tuple[int, float]] = {}  # read (or bad) at this size, mtime
        self.last_file: dict[int, float] = {}  # step -> when its last file was read

    def poll(self) -> list[Path]:
        """Read the files that settled since the last poll; mark the steps that did."""
        now = self.clock()
        read = []
        for path in inputs(self.job.reader, self.paths):
            try:
                st = path.stat()
            except OSError:
                continue
            shape = (st.st_size, st.st_mtime)
            if self.done.get(path) == shape:
                continue
            seen = self.seen.get(path)
            if seen is None or (seen.size, seen.mtime) != shape:
                self.seen[path] = Seen(st.st_size, st.st_mtime, now)
                continue
            if now - seen.since < self.settle_s:
                continue
            self.done[path] = shape
            self.job.tally.bad.pop(str(path), None)
            self.job.tally.files += 1
            d = self.job.digest(path)
            before = set(self.job.pending)
            self.job.take(d)
            for step in d.windows:
                self.last_file[step] = now
            self._late(before, d.windows)
            read.append(path)
        ready = [s for s in self.job.pending if now - self.last_file.get(s, now) >= self.settle_s]
        self.job.mark(ready)
        return read

    def _late(self, before: set[int], steps: Iterable[int]) -> None:
        """A file of a step already marked: its mark sent again, widened (the server
        widens an imported step's mark with it)."""
        for step in steps:
            if step in self.job.tally.steps and step not in before:
                self.last_file[step] = self.clock() - self.settle_s  # mark it now

    def finish(self) -> None:
        self.job.mark()
