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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rl_insight.events import Span
from rl_insight.profiler import export, readers
from rl_insight.profiler.model import BadFile, RankTrace
from rl_insight.profiler.stages import phase_of
from rl_insight.profiler.timeline import RankTimeline

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


class Import:
    """An import's state: the reader, the run, the sender, the steps not yet marked."""

    def __init__(self, profiler: str, project: str, experiment: str,
                 send: Callable[[bytes], bool], timeline: RankTimeline | None = None,
                 options: dict | None = None) -> None:
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

    def read(self, path: Path) -> list[RankTrace] | None:
        """The file's ranks, whole; None (and why, in the tally) when it is bad."""
        try:
            traces = list(self.reader.read(path, **self.options))
        except READ_ERRORS as exc:
            why = str(exc) if isinstance(exc, BadFile) else \
                f"cannot be read ({exc.__class__.__name__}: {exc})"
            self.tally.bad[str(path)] = why
            return None
        if not traces:
            self.tally.bad[str(path)] = "no rank's events in it"
            return None
        return traces

    def take(self, path: Path, traces: list[RankTrace]) -> None:
        """A file read whole: its ranks' spans sent, its steps' windows kept for their
        marks, its events written to the timeline."""
        spans: list[Span] = []
        for t in traces:
            spans += export.rank_spans(t, self.profiler, export.process_of(t))
            self.tally.unmarked += sum(1 for r in t.ranges()
                                       if phase_of(r.name) is None)
            self.tally.ranks.add(t.rank)
            if t.role:
                self.tally.roles.add(t.role)
            if self.timeline is not None:
                self.timeline.add(t)
        self.send(spans)
        export.steps_of(traces, self.pending)
        self.tally.read += 1
        try:
            self.tally.bytes += os.path.getsize(path)
        except OSError:
            pass

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

    def run(self, files: list[Path], progress: Callable[[Path], None] = lambda p: None
            ) -> Tally:
        """Every file in order; a step's mark as soon as the next file is of another
        step (the reader's names say so), the rest at the end. Raises SendFailed when
        the server stops taking exports: the files before were sent whole, and sending
        them again is harmless (the server takes a rank's phase told twice as one)."""
        self.tally.files += len(files)
        for path in files:
            hint = self.step_of(path) if self.step_of else None
            if hint is not None:
                self.mark([s for s in self.pending if s != hint])
            traces = self.read(path)
            if traces is not None:
                self.take(path, traces)
            progress(path)
        self.mark()
        return self.tally


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
            traces = self.job.read(path)
            if traces is not None:
                before = set(self.job.pending)
                self.job.take(path, traces)
                for t in traces:
                    if t.step is not None:
                        self.last_file[t.step] = now
                self._late(before, traces)
            read.append(path)
        ready = [s for s in self.job.pending if now - self.last_file.get(s, now) >= self.settle_s]
        self.job.mark(ready)
        return read

    def _late(self, before: set[int], traces: list[RankTrace]) -> None:
        """A file of a step already marked: its mark sent again, widened (the server
        widens an imported step's mark with it)."""
        for t in traces:
            if t.step is not None and t.step in self.job.tally.steps and \
                    t.step not in before:
                self.last_file[t.step] = self.clock() - self.settle_s  # mark it now

    def finish(self) -> None:
        self.job.mark()
