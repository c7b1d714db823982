"""Step anatomy at the server: the one place that sees every lane of a run. It keeps the
replica (of every role: :mod:`rl_insight.wire.laneid`) and rank lanes' state spans and the
trainer's step marks, turns each step into a row (:func:`rl_insight.anatomy.step_row`)
once its spans are in, and exports the rows as ``rl_insight_step_*`` series.

A row's series carry the step's end as their sample timestamp, so Prometheus stores one
sample per step (bounded series: per run, replica and phase, never per step). The
stall alert's two gauges (last step end, median step time) are plain gauges of active
runs.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily

from rl_insight import frameworks
from rl_insight.anatomy import ranks, verdict, whatif
from rl_insight.anatomy.requests import Request
from rl_insight.anatomy.rows import StepRow, step_row, timing_row
from rl_insight.config import AnatomySettings
from rl_insight.frameworks.table import parts, wait_causes
from rl_insight.server.analyses.anatomy_series import Families
from rl_insight.wire import laneid, rank_evidence
from rl_insight.wire.attributes import STEP_STATE
from rl_insight.wire.frameworks import IMPORT_PROCESS
from rl_insight.wire.laneid import TRAINER as TRAINER_LANE

# a lane has a handful of states per step and a step needs its own and the previous
# window: 64 is a dozen steps, and bounds a run without step marks (nothing is ever
# finalized, so nothing is pruned) to 64 spans a lane (~8 KB) whatever its lanes send
# (4,128 lanes at 256 spans each held a quarter of the server's memory: scale_tier.py)
MAX_SPANS_PER_LANE = 64
DROP_BUCKET_NS = 100_000_000
RUN = ("project", "experiment_name")
REDO_ROWS = 8  # final rows a late lane can still be put in (with max_wait_s)
MAX_TIMING_STEPS = 64  # steps whose timing keys wait for their row (the oldest dropped)
MAX_BUCKET_SPANS = 4096  # goodput-bucket intervals held per run (a few steps' worth)


def _told_again(q: deque, iv: tuple) -> bool:
    """Whether ``iv`` is a phase the lane holds already (a rank monitored live and
    imported from its profile: the same block twice): the two made one in place, the
    one whose evidence summarises its collectives winning, the other's keys added."""
    for i, have in enumerate(q):
        if have[0] == iv[0] and have[1] < iv[2] and iv[1] < have[2]:
            a = ranks.unpack(have[3] if len(have) > 3 else None)
            b = ranks.unpack(iv[3] if len(iv) > 3 else None)
            keep, other = (iv, a) if _summarised(b) and not _summarised(a) else (have, b)
            ev = {**other, **ranks.unpack(keep[3] if len(keep) > 3 else None)}
            q[i] = (keep[0], keep[1], keep[2], ranks.pack(ev)) if ev else keep[:3]
            return True
    return False


def _summarised(evidence: dict) -> bool:
    return bool(evidence.get(rank_evidence.COLLECTIVES)) and \
        evidence.get(rank_evidence.MEAN_TO_END) is not None


def _from_lanes(row: StepRow) -> bool:
    """Whether any lane put something in the row (else it is all `other`)."""
    return bool(row.replicas or row.phases or row.generate_s > 0)


class _Timings:
    """A step's timing keys as the framework trackers send them (several processes may
    each send some: slime's rollout manager and its training rank)."""

    __slots__ = ("framework", "values", "first_ns", "last_ns")

    def __init__(self, framework: str, at_ns: int) -> None:
        self.framework = framework
        self.values: dict[str, float] = {}
        self.first_ns = self.last_ns = at_ns


class RunAnatomy:
    """One run's pending step marks, recent lane spans and final rows."""

    def __init__(self, keep_steps: int, max_requests: int = 65_536) -> None:
        self.marks: dict[int, tuple[int, int]] = {}  # end_ns -> (step, start_ns)
        # engine requests not yet in a final step, and those that came too late for one
        self.requests: deque[Request] = deque(maxlen=max_requests)
        self.requests_dropped = 0
        # of those, the ones no row has counted yet, by their end in 100 ms buckets (a
        # step learns of its drops when it is made; ten buckets a second pending at most)
        self.dropped_at: dict[int, int] = {}
        self.requests_late = 0
        self.lanes: dict[str, deque] = {}  # lane -> (state, start, end[, evidence])
        self.last_end: dict[str, int] = {}
        self.first_start: dict[str, int] = {}  # a lane's first state: `startup` before it
        self.rows: deque[StepRow] = deque(maxlen=keep_steps)
        self.durations: deque[float] = deque(maxlen=1000)  # of every mark, final or not
        self.last_mark_end = 0
        self.final_end = 0
        self.late_spans = 0  # arrived after their step was final (its row is redone)
        self.late: list[int] | None = None  # [first start, last end] of those spans
        self.horizon = 0  # spans ending before this were pruned
        # (due, before): spans before a final row's previous window go max_wait_s after
        # it was final, or once REDO_ROWS newer rows are final; until then a lane actor
        # that started late or restarted can still put its spans in the row (redone)
        self.prunes: deque[tuple[int, int]] = deque()
        # timing keys per step, for a run whose lanes say nothing (a framework that logs
        # timings and no spans): rows "from timing keys" once a later step reported
        self.timings: OrderedDict[int, _Timings] = OrderedDict()
        self.timing_final = -1  # the newest step a timing row was made for
        self.timing_end = 0  # that row's end: the next row's start without a step time
        self.timings_late = 0  # timing keys of a step whose row was made (or dropped)
        self.lane_rows = False  # a row had lane data: the lanes win over timing keys
        self.buckets: deque[tuple[str, int, int]] = deque(maxlen=MAX_BUCKET_SPANS)
        self.mark_steps: deque[int] = deque(maxlen=MAX_SPANS_PER_LANE)  # recent marks' steps
        # the windows of the newest final marks, made into rows or not (nothing but
        # timing keys told them yet): a late lane's spans make them again
        self.windows: OrderedDict[int, tuple[int, int]] = OrderedDict()
        # profiler imports (rl_insight/profiler/export.py): steps whose mark an import
        # made (later marks of the step widen it), lanes it put spans on (a phase told
        # twice there, live and from the profile, is one)
        self.imported_steps: deque[int] = deque(maxlen=MAX_SPANS_PER_LANE)
        self.imported_lanes: set[str] = set()
        # the verdict and the what-if over the newest steps, made again as rows are made:
        # the per-step series and the status page read it
        self.summary: dict | None = None

    def add_timing(self, framework: str, step: int, at_ns: int,
                   values: dict[str, float]) -> None:
        """A step's timing keys (several records may hold some each)."""
        if frameworks.get(framework) is None:
            return
        if step <= self.timing_final:
            self.timings_late += len(values)
            return
        entry = self.timings.get(step)
        if entry is None:
            entry = self.timings[step] = _Timings(framework, at_ns)
            self.timings = OrderedDict(sorted(self.timings.items()))
            while len(self.timings) > MAX_TIMING_STEPS:
                self.timings.popitem(last=False)
        entry.values.update(values)
        entry.last_ns = max(entry.last_ns, at_ns)

    def add_bucket(self, bucket: str, start: int, end: int) -> None:
        self.buckets.append((bucket, start, end))

    def _buckets(self, start: int, end: int) -> dict[str, list[tuple[int, int]]]:
        out: dict[str, list[tuple[int, int]]] = {}
        for bucket, s, e in self.buckets:
            if e > start and s < end:
                out.setdefault(bucket, []).append((s, e))
        return out

    def _timing_rows(self, now_ns: int, settings: AnatomySettings, finished: bool
                     ) -> list[StepRow]:
        """Rows of the steps whose timing keys are all in: a later step reported and
        settle_s passed, or the run finished, or max_wait_s passed."""
        out: list[StepRow] = []
        settle, wait = int(settings.settle_s * 1e9), int(settings.max_wait_s * 1e9)
        steps = list(self.timings)
        for i, step in enumerate(steps):
            entry = self.timings[step]
            later = i + 1 < len(steps)  # a later step reported: this one's keys are in
            if not (finished or now_ns >= entry.last_ns + wait or
                    (later and now_ns >= entry.last_ns + settle)):
                break
            del self.timings[step]
            self.timing_final = step
            if self.lane_rows:
                continue  # the lanes tell this run's steps
            fw = frameworks.get(entry.framework)
            start = self.timing_end or None
            got = parts(fw, entry.values)
            row = timing_row(step, entry.last_ns, got, fw.name,
                             start_ns=start if start is not None else entry.first_ns,
                             wait_causes=wait_causes(fw, got.waits))
            self.timing_end = entry.last_ns
            self._replace_or_append(row)
            out.append(row)
        return out

    def _replace_or_append(self, row: StepRow) -> None:
        """Put a row in, in place of a row of the same step (lanes that came after its
        timing keys replace that row; a redone row its old self), else in step order."""
        i = len(self.rows)
        for _ in range(min(len(self.rows), 2 * REDO_ROWS)):
            if self.rows[i - 1].step == row.step:
                self.rows[i - 1] = row
                return
            if self.rows[i - 1].step < row.step:
                break
            i -= 1
        if i == len(self.rows):
            self.rows.append(row)
        else:
            if len(self.rows) == self.rows.maxlen:  # full: the oldest goes, as append's
                self.rows.popleft()
                i -= 1
            self.rows.insert(max(i, 0), row)

    def add_span(self, lane: str, state: str, start: int, end: int, step,
                 evidence: dict | None = None, process: str = "") -> None:
        imported = process.startswith(IMPORT_PROCESS)
        if lane == TRAINER_LANE and state == STEP_STATE:
            try:
                number = int(step)
            except (TypeError, ValueError):
                return
            # one mark per step: a framework's own step span and its tracker's mark (two
            # processes, or two paths, telling the same step) are one step, the first;
            # an imported step's later marks widen it (its files came one at a time)
            if number in self.mark_steps:
                if imported and number in self.imported_steps:
                    self._widen(number, start, end)
                return
            if end not in self.marks and end > self.final_end:
                self.mark_steps.append(number)
                if imported:
                    self.imported_steps.append(number)
                self.marks[end] = (number, start)
                self.durations.append((end - start) / 1e9)
                self.last_mark_end = max(self.last_mark_end, end)
            return
        if not laneid.is_dedicated(lane):
            return
        if end <= self.final_end or start < self.final_end:
            self._late(start, end)
            self.late_spans += end <= self.final_end
        q = self.lanes.get(lane)
        if q is None:
            q = self.lanes[lane] = deque(maxlen=MAX_SPANS_PER_LANE)
        iv = (state, start, end, ranks.pack(evidence)) if evidence else (state, start, end)
        if imported:
            self.imported_lanes.add(lane)
        if not (lane in self.imported_lanes and _told_again(q, iv)):
            q.append(iv)
        if end > self.last_end.get(lane, 0):
            self.last_end[lane] = end
        if start < self.first_start.get(lane, 1 << 62):
            self.first_start[lane] = start

    def _late(self, start: int, end: int) -> None:
        self.late = [min(start, self.late[0]), max(end, self.late[1])] if self.late \
            else [start, end]

    def _widen(self, number: int, start: int, end: int) -> None:
        """An imported step's mark widened by another of its files, never into its
        neighbours' windows (a phase is read in the step it ended in: windows that
        overlap would count it twice): pending, its window; final, its window and its
        row made again (as for a late span)."""
        steps = [(n, s, at) for at, (n, s) in self.marks.items()] + \
            [(n, s, e) for n, (s, e) in self.windows.items()]
        start = max([start, *(e for n, _, e in steps if n < number)])
        end = min([end, *(s for n, s, _ in steps if n > number)])
        for at, (n, s) in list(self.marks.items()):
            if n == number:
                del self.marks[at]
                self.marks[max(at, end)] = (n, min(s, start))
                return
        if number in self.windows:
            s, e = self.windows[number]
            self.windows[number] = (min(s, start), max(e, end))
            self.final_end = max(self.final_end, end)
            self._late(min(s, start), max(e, end))

    def add_request(self, r: Request) -> None:
        if r.end_ns <= self.final_end:
            self.requests_late += 1  # its step is final: counted, not joined
            return
        if len(self.requests) == self.requests.maxlen:
            self.requests_dropped += 1
            bucket = self.requests[0].end_ns // DROP_BUCKET_NS
            self.dropped_at[bucket] = self.dropped_at.get(bucket, 0) + 1
        self.requests.append(r)

    def _take_requests(self, start: int, end: int) -> list[Request]:
        """The requests that ended in the step (start, end]: the rule that joins a
        request to a step; those ending before are the previous windows' late ones."""
        mine, keep = [], []
        for r in self.requests:
            if r.end_ns > end:
                keep.append(r)  # a later step's
            elif r.end_ns > start:
                mine.append(r)
            else:
                self.requests_late += 1  # before the first window seen
        self.requests.clear()
        self.requests.extend(keep)
        return mine

    def _take_dropped(self, start: int, end: int) -> int:
        """How many of the dropped requests ended in the step (start, end], to the
        bucket; those ending before it are forgotten with it."""
        n = 0
        for bucket in [b for b in self.dropped_at if b * DROP_BUCKET_NS <= end]:
            count = self.dropped_at.pop(bucket)
            n += count if bucket * DROP_BUCKET_NS >= start else 0
        return n

    def finalize(self, now_ns: int, settings: AnatomySettings, finished: bool
                 ) -> list[StepRow]:
        """Rows of the steps whose spans are in: every lane active around the step has
        reported past its end, or the run finished, or max_wait_s passed; and settle_s
        passed in any case (spans of different lanes arrive through different actors)."""
        out = self._redo_late(settings)
        out += self._timing_rows(now_ns, settings, finished)
        settle, wait = int(settings.settle_s * 1e9), int(settings.max_wait_s * 1e9)
        while self.prunes and (self.prunes[0][0] <= now_ns or
                               len(self.prunes) > REDO_ROWS):
            self._prune(self.prunes.popleft()[1])
        for end in sorted(self.marks):
            step, start = self.marks[end]
            if now_ns < end + settle:
                break
            active = [lane for lane, last in self.last_end.items()
                      if last >= start - (end - start)]
            if not (finished or now_ns >= end + wait or
                    all(self.last_end[lane] >= end for lane in active)):
                break
            del self.marks[end]
            row = step_row(step, start, end, {lane: list(q) for lane, q in self.lanes.items()},
                           self._take_requests(start, end), settings.gpus_per_replica,
                           settings.gpus_per_rank, self._buckets(start, end),
                           self.first_start)
            row.requests_dropped = self._take_dropped(start, end)
            self.final_end = end
            self.windows[step] = (start, end)
            while len(self.windows) > 2 * REDO_ROWS:
                self.windows.popitem(last=False)
            if _from_lanes(row):
                self.lane_rows = True
                self._replace_or_append(row)
                out.append(row)
            elif not (self.timings or self.timing_final >= 0):
                self.rows.append(row)  # all `other`: nothing else tells this step
                out.append(row)
            self.prunes.append((now_ns + wait, start - (end - start)))
        return out

    def _redo_late(self, settings: AnatomySettings) -> list[StepRow]:
        """Rows of final steps that a late span overlaps, computed again (a lane actor
        that restarted sends what it had not delivered, after newer spans; a framework's
        own spans come seconds after its step's mark), as long as their spans are still
        held. Lanes that come late replace a row made from timing keys meanwhile."""
        late, self.late = self.late, None
        if late is None:
            return []
        lanes = {lane: list(q) for lane, q in self.lanes.items()}
        rows = {r.step: r for r in self.rows if r.start_ns >= self.horizon}
        redone = []
        for step, (start, end) in self.windows.items():
            if start < self.horizon or not (start < late[1] and late[0] < end):
                continue
            new = step_row(step, start, end, lanes, (), settings.gpus_per_replica,
                           settings.gpus_per_rank, self._buckets(start, end),
                           self.first_start)
            if not _from_lanes(new):
                continue
            row = rows.get(step)
            if row is not None and row.source == "lanes":
                # its requests were joined when it was first made: they stay
                for k in ("requests", "tail", "critical", "tail_share",
                          "generated_tokens"):
                    setattr(new, k, getattr(row, k))
                total = sum(g["busy"] + g["idle"] for g in new.gpu_seconds.values())
                if new.generated_tokens is not None and total > 0:
                    new.tokens_per_gpu_second = new.generated_tokens / total
                if row.bound is not None and row.bound.inputs is not None and \
                        new.bound is not None and new.bound.inputs is not None:
                    old = row.bound.inputs  # what its requests told of it stays too
                    new.bound.inputs = new.bound.inputs._replace(
                        longest_s=old.longest_s, work_s=old.work_s,
                        tail_cut_s=old.tail_cut_s, samples=old.samples, tokens=old.tokens)
                    if old.samples is not None:
                        new.bound.missing = tuple(m for m in new.bound.missing
                                                  if not m.startswith("no engine request"))
            self.lane_rows = True
            self._replace_or_append(new)
            redone.append(new)
        return redone

    def _prune(self, before_ns: int) -> None:
        """Drop spans that ended before the previous window: staleness looks one back."""
        self.horizon = max(self.horizon, before_ns)
        for q in self.lanes.values():
            while q and q[0][2] < before_ns:
                q.popleft()
        while self.buckets and self.buckets[0][2] < before_ns:
            self.buckets.popleft()


class AnatomyStore:
    """Every run's anatomy, bounded in runs (least recently active dropped first)."""

    def __init__(self, settings: AnatomySettings,
                 finished: Callable[[str, str], bool] = lambda p, e: False) -> None:
        self.settings = settings
        self.finished = finished
        self._runs: OrderedDict[tuple[str, str], RunAnatomy] = OrderedDict()
        self._lock = threading.Lock()
        # told every row made (or made again), outside the lock: what changed
        # (rl_insight/server/analyses/changes.py) follows each run's steps
        self.listener: Callable[[tuple[str, str], list[StepRow]], None] | None = None

    def add(self, rows: Iterable[tuple]) -> None:
        """OTLP state rows: (project, experiment, lane, state, start, end, process, step
        [, evidence]): a rank's evidence is what its client measured of the phase."""
        if not self.settings.enabled:
            return
        with self._lock:
            for project, experiment, lane, state, start, end, process, step, *ev in rows:
                if lane != TRAINER_LANE and not laneid.is_dedicated(lane):
                    continue
                self._run((project, experiment)).add_span(lane, state, start, end, step,
                                                          ev[0] if ev else None, process)

    def add_timings(self, rows: Iterable[tuple[str, str, str, int, int, dict]]) -> None:
        """Framework trackers' timing keys: (project, experiment, framework, step, sent
        at ns, {key: seconds})."""
        if not self.settings.enabled:
            return
        with self._lock:
            for project, experiment, framework, step, at_ns, values in rows:
                self._run((project, experiment)).add_timing(framework, step, at_ns, values)

    def add_buckets(self, rows: Iterable[tuple[str, str, str, int, int]]) -> None:
        """Goodput buckets of a framework's spans: (project, experiment, bucket, start,
        end)."""
        if not self.settings.enabled:
            return
        with self._lock:
            for project, experiment, bucket, start, end in rows:
                self._run((project, experiment)).add_bucket(bucket, start, end)

    def add_requests(self, rows: Iterable[tuple[str, str, Request]]) -> None:
        """Engine request spans of runs (rl_insight/server/ingest/engine_requests.py), held until
        the step they ended in is final."""
        if not self.settings.enabled:
            return
        with self._lock:
            for project, experiment, r in rows:
                self._run((project, experiment)).add_request(r)

    def _run(self, key: tuple[str, str]) -> RunAnatomy:
        """The run's anatomy, made on first sight (the least recently active dropped past
        max_runs); the caller holds the lock."""
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = RunAnatomy(self.settings.keep_steps,
                                               self.settings.max_requests_per_run)
            while len(self._runs) > self.settings.max_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        return run

    def update(self, now: float | None = None) -> int:
        """Finalize what is ready, and redo final rows that late spans overlap; returns
        the number of rows made or made again."""
        now_ns = int((time.time() if now is None else now) * 1e9)
        with self._lock:
            runs = list(self._runs.items())
        n = 0
        for (project, experiment), run in runs:
            finished = self.finished(project, experiment)
            with self._lock:
                made = run.finalize(now_ns, self.settings, finished)
            n += len(made)
            if made:
                self._summarize(run)
            if made and self.listener is not None:
                self.listener((project, experiment), made)
        return n

    def _summarize(self, run: RunAnatomy) -> None:
        """The verdict and what-if of the run's newest ``median_steps`` steps."""
        with self._lock:
            recent = [r for r in list(run.rows)[-self.settings.median_steps:]
                      if r.bound is not None]
        if not recent:
            return
        lean = [{"step": r.step, "duration_s": r.duration_s,
                 "bound": r.bound.as_dict(replicas=False)} for r in recent]
        acc = verdict.account(lean)
        run.summary = {**verdict.decide(acc), "first_step": acc["first_step"],
                       "last_step": acc["last_step"], "step_s": acc["step_s"],
                       "what_if": whatif.predict(lean)}

    def summary(self, project: str, experiment: str) -> dict | None:
        """The verdict and what-if of the run's newest steps (None before its first)."""
        with self._lock:
            run = self._runs.get((project, experiment))
            return None if run is None else run.summary

    def has(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._runs

    def rows(self, project: str, experiment: str) -> list[StepRow] | None:
        """The run's final rows, oldest first; None for a run never seen."""
        with self._lock:
            run = self._runs.get((project, experiment))
            return None if run is None else list(run.rows)

    def runs(self) -> list[dict]:
        with self._lock:
            return [{"project": p, "experiment_name": e, "steps": len(r.rows),
                     "pending_steps": len(r.marks), "late_spans": r.late_spans,
                     "pending_requests": len(r.requests), "late_requests": r.requests_late,
                     "dropped_requests": r.requests_dropped,
                     "pending_timing_steps": len(r.timings), "late_timings": r.timings_late}
                    for (p, e), r in self._runs.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The ``rl_insight_step_*`` families for the server's /metrics."""
        self.update()
        now = time.time()
        fams = Families()
        with self._lock:
            runs = [(k, r.rows[-1] if r.rows else None, r.last_mark_end,
                     list(r.durations)[-self.settings.median_steps:], r.summary)
                    for k, r in self._runs.items()]
        for (project, experiment), row, last_mark, recent, summary in runs:
            run = [project, experiment]
            if last_mark and not self.finished(project, experiment):
                fams.add("last_end_timestamp_seconds", "When the newest step ended (unix "
                         "time): the training-stalled alert compares it with now", run,
                         last_mark / 1e9)
                fams.add("median_duration_seconds", "Median duration of the recent steps",
                         run, statistics.median(recent))
            if row is None or now - row.end_ns / 1e9 > self.settings.expose_s:
                continue
            fams.row(run, row)
            if summary is not None and summary.get("last_step") == row.step:
                fams.summary(run, summary, row.end_ns / 1e9)
        yield from fams.families.values()


