"""What changed, at the server: each run's regressions found as its steps are finalized
(rl_insight/anatomy/changes.py), what moved with each ranked from what the server holds
(rl_insight/anatomy/association.py over rl_insight/server/analyses/candidates.py), and
the ``rl_insight_step_regression_*`` series the alert ``StepTimeRegressed`` and the
"What changed" section of the step anatomy dashboard read.

The detector runs on the anatomy's finalize path (microseconds a step); the ranking
queries Prometheus, so it runs on its own supervised thread, for open changes only, once
when a change opens and again every ``rank_every_steps`` steps. A run is forgotten with
its anatomy (the anatomy's ``max_runs``, or once finished and exposed); a finished run
asked about afterwards is analysed again from its ``rl_insight_step_*`` series.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily

from rl_insight.anatomy import association, verdict
from rl_insight.anatomy.changes import Change, RunChanges, analyze
from rl_insight.anatomy.ranks import where
from rl_insight.anatomy.rows import StepRow
from rl_insight.config import ChangesSettings
from rl_insight.server.analyses import candidates
from rl_insight.server.analyses.promapi import ApiUnavailable

log = logging.getLogger(__name__)
PREFIX = "rl_insight_step_regression_"
RUN = ("project", "experiment_name")
Key = tuple[str, str]


class Prom:
    """How this module reads Prometheus: a range query and raw samples (promapi)."""

    def __init__(self, url: str, auth: tuple[str, str] | None, scrape_s: float) -> None:
        self.url, self.auth, self.scrape_s = url, auth, scrape_s

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        from rl_insight.server.analyses.promapi import query_range

        return query_range(self.url, expr, start, end, step, auth=self.auth)

    def samples(self, expr: str, start: float, end: float) -> list[dict]:
        from rl_insight.server.analyses.promapi import samples

        return samples(self.url, expr, start, end, auth=self.auth)


class Ranking:
    """A change's latest ranking: at which step, what it found, where it lives; and, while
    it finds nothing, its empty tries (each at a step the run had not reached before:
    the newest steps' series are the ones a ranking lacks) since the first (its time)."""

    __slots__ = ("step", "candidates", "scope", "empty_tries", "empty_since")

    def __init__(self, step: int, candidates: list[dict], scope: dict | None,
                 empty_tries: int, empty_since: float | None) -> None:
        self.step, self.candidates, self.scope = step, candidates, scope
        self.empty_tries, self.empty_since = empty_tries, empty_since

    def settled(self, now: float) -> bool:
        """Found something, or tried EMPTY_TRIES steps (or EMPTY_WAIT_S: a stalled run)
        and goes out saying it found nothing."""
        return bool(self.candidates) or self.empty_tries >= EMPTY_TRIES or (
            self.empty_since is not None and now - self.empty_since >= EMPTY_WAIT_S)

    def after(self, step: int, candidates: list[dict], scope: dict | None,
              now: float) -> Ranking:
        """The ranking made at ``step`` after this one."""
        if candidates:
            return Ranking(step, candidates, scope, 0, None)
        if self.candidates:  # found before, not now (its series aged out of the window):
            # what it found stands, so its alert's cause does not go and come back
            return Ranking(step, self.candidates, self.scope, 0, None)
        return Ranking(step, candidates, scope, self.empty_tries + (step > self.step),
                       now if self.empty_since is None else self.empty_since)


class _Run:
    __slots__ = ("changes", "dirty", "ranked", "last_row_end")

    def __init__(self, settings: ChangesSettings) -> None:
        self.changes = RunChanges(settings)
        self.dirty = False  # a row already fed was made again: analyse the rows again
        self.ranked: dict[str, Ranking] = {}  # change id -> its latest ranking
        self.last_row_end = 0.0


# a change whose ranking found nothing moving with it is ranked again at the next passes
# until it was tried at this many steps (a candidate needs association.MIN_STEPS steps
# of its series since the onset, and the newest are the last scraped: a CI run of
# 2026-12-07 on a loaded host alerted "not ranked yet" after three passes 5 s apart
# that saw few new steps), or for this long (a run that stopped making steps), before
# its series (and alert) go out saying so
EMPTY_TRIES = 3
EMPTY_WAIT_S = 60.0


class ChangeStore:
    """Every followed run's changes; fed by the anatomy, read by routes and /metrics."""

    def __init__(self, settings: ChangesSettings, rows: Callable[[str, str], list | None],
                 prom: Prom | None, max_runs: int = 200,
                 finished: Callable[[str, str], bool] = lambda p, e: False,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock  # wall time: how long a ranking has found nothing
        self.rows = rows  # the anatomy's final rows of a run (AnatomyStore.rows)
        self.prom = prom
        self.max_runs = max_runs
        self.finished = finished
        self._runs: OrderedDict[Key, _Run] = OrderedDict()
        self._lock = threading.Lock()
        self.ranking_errors = 0

    # -- fed by the anatomy --------------------------------------------------------------
    def observe(self, key: Key, made: list[StepRow]) -> None:
        """Rows the anatomy just made (or made again) for a run."""
        if not self.settings.enabled or not made:
            return
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = _Run(self.settings)
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            else:
                self._runs.move_to_end(key)
            for row in sorted(made, key=lambda r: r.step):
                last = run.changes.last_step
                if last is not None and row.step <= last:
                    run.dirty = True
                else:
                    run.changes.add(row.as_dict())
                run.last_row_end = max(run.last_row_end, row.end_ns / 1e9)

    def forget(self, keep: Callable[[Key], bool]) -> None:
        """Drop the runs ``keep`` says no (the anatomy dropped them)."""
        with self._lock:
            for key in [k for k in self._runs if not keep(k)]:
                del self._runs[key]

    def _current(self, key: Key) -> RunChanges | None:
        """The run's changes, analysed again from its rows if a row was made again."""
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                return None
            dirty = run.dirty
        if dirty:
            rows = self.rows(*key) or []
            fresh = analyze([r.as_dict() for r in rows], self.settings)
            with self._lock:
                run.changes, run.dirty = fresh, False
        return run.changes

    # -- ranking -------------------------------------------------------------------------
    def rank_due(self) -> int:
        """Rank what moved with each open change not ranked for rank_every_steps steps
        (or not settled: Ranking.settled); the number ranked."""
        now = self.clock()
        with self._lock:
            keys = list(self._runs)
        n = 0
        for key in keys:
            current = self._current(key)
            if current is None:
                continue
            due = []
            with self._lock:
                run = self._runs.get(key)
                if run is None:
                    continue
                for change in current.report():
                    if not change.open:
                        continue
                    at = run.ranked.get(change.id)
                    last = max(r.last_step for r in change.regressions)
                    if last - change.onset_step + 1 < association.MIN_STEPS:
                        continue  # nothing can be compared since the onset yet: unranked,
                        # so its alert waits a step for its first cause
                    # a ranking that found nothing is tried again at the next pass (the
                    # engines' series of the newest steps not yet scraped, Prometheus
                    # slow to answer) until it is settled (Ranking.settled); then its
                    # alert goes out without a cause
                    if at is None or not at.settled(now) or \
                            last - at.step >= self.settings.rank_every_steps:
                        due.append((change, last, at))
            if not due:
                continue
            rows = [r.as_dict() for r in self.rows(*key) or []]
            extra = self.gather(key, rows, min(c.onset_step for c, _, _ in due))
            association.annotate([c for c, _, _ in due], rows, extra)
            with self._lock:
                run = self._runs.get(key)
                if run is not None:
                    for change, last, at in due:
                        run.ranked[change.id] = (at or _FIRST).after(
                            last, change.candidates, change.scope, now)
                        if not change.candidates:
                            log.info("what changed: nothing ranked yet with the change of "
                                     "%s/%s from step %s (at step %s, %d candidate series "
                                     "read; empty %d of %d steps)", *key,
                                     change.onset_step, last, len(extra),
                                     run.ranked[change.id].empty_tries, EMPTY_TRIES)
            n += len(due)
        return n

    def gather(self, key: Key, rows: list[dict], onset: int | None) -> list:
        """Candidates from Prometheus over the steps from before_steps before ``onset``
        (every step without one): the trainer's scalars, engines, hardware."""
        if self.prom is None or not rows:
            return []
        first = (onset or 0) - self.settings.before_steps
        use = [r for r in rows if r["step"] >= first and r.get("start_ns")]
        if len(use) < 3:
            return []
        windows = {r["step"]: (r["start_ns"] / 1e9, r["end_ns"] / 1e9) for r in use}
        start = min(a for a, _ in windows.values())
        end = max(b for _, b in windows.values()) + 2 * self.prom.scrape_s
        step_s = statistics.median(r["duration_s"] for r in use)
        res = candidates.resolution(start, end, step_s, self.prom.scrape_s)
        out = []
        try:
            out += candidates.scalars(self.prom.range, *key, start, end, res,
                                      self.settings.max_series)
            out += candidates.engines(self.prom.range, *key, windows, res,
                                      max(step_s, 3 * self.prom.scrape_s))
            out += candidates.hardware(self.prom.range, windows, res)
        except Exception:  # a ranking without Prometheus' series is still a ranking
            self.ranking_errors += 1
            log.exception("what changed: reading Prometheus for %s/%s failed", *key)
        return out

    # -- read ----------------------------------------------------------------------------
    def report(self, project: str, experiment: str, now: float | None = None,
               from_prometheus: bool = False) -> dict | None:
        """The run's changes with what moved with each (ranked now), or None for a run
        neither followed nor in Prometheus; ``from_prometheus``: from its step series
        alone, as for a run the server no longer follows."""
        key = (project, experiment)
        current = None if from_prometheus else self._current(key)
        source = "live"
        rows = None
        if current is None:
            rows = self.rows_from_prometheus(key, now)
            if not rows:
                return None
            current, source = analyze(rows, self.settings), "prometheus"
        found = current.report()
        if rows is None:
            rows = [r.as_dict() for r in self.rows(*key) or []]
        if found:
            extra = self.gather(key, rows, min(c.onset_step for c in found))
            association.annotate(found, rows, extra)
        out = []
        for c in found:  # the side the run waited on, before the change and since
            d = c.as_dict()
            d["verdict"] = verdict.around(rows, c.onset_step)
            out.append(d)
        return {"project": project, "experiment_name": experiment, "source": source,
                "steps": len(rows), "rule": _rule(self.settings), "changes": out}

    def rows_from_prometheus(self, key: Key, now: float | None) -> list[dict]:
        """A run no longer followed: its rows from the last 30 days of step series."""
        if self.prom is None:
            return []
        end = now or time.time()
        try:
            return candidates.rows(self.prom.samples, *key, end - 30 * 86400, end)
        except ApiUnavailable as exc:
            log.info("what changed: %s/%s from Prometheus: %s", *key, exc)
            return []

    def open_changes(self) -> list[tuple[Key, Change, Ranking | None]]:
        out = []
        with self._lock:
            keys = list(self._runs)
        for key in keys:
            current = self._current(key)
            if current is None:
                continue
            with self._lock:
                run = self._runs.get(key)
                ranked = dict(run.ranked) if run else {}
            for change in current.report():
                if change.open:
                    out.append((key, change, ranked.get(change.id)))
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """``rl_insight_step_regression_*`` of the open changes of active runs, once
        ranked (the alert names the first cause from its first notification). A change is
        known by the step its first regression was dated at when found (``onset_step``),
        which stays as other signals join it and as its onset is fitted again; ``signal``
        is its headline now."""
        size = GaugeMetricFamily(
            PREFIX + "seconds", "An open regression of the run's steps: how many seconds "
            "longer than their baseline (the step time's, else the part's)",
            labels=[*RUN, "onset_step", "signal", "part", "cause", "scope", "rank"])
        ratio = GaugeMetricFamily(PREFIX + "ratio", "An open regression's size over its "
                                  "baseline", labels=[*RUN, "onset_step", "signal"])
        baseline = GaugeMetricFamily(PREFIX + "baseline", "The regressed signal's baseline "
                                     "(its median before the onset)",
                                     labels=[*RUN, "onset_step", "signal"])
        cand = GaugeMetricFamily(
            PREFIX + "candidate_change_ratio", "What moved with an open regression, ranked "
            "(1 first): the candidate's change over its value before the onset",
            labels=[*RUN, "onset_step", "rank", "candidate", "where", "direction"])
        now = self.clock()
        for (project, experiment), change, ranked in self.open_changes():
            if ranked is None or self.finished(project, experiment) or \
                    not ranked.settled(now):
                continue  # its alert names the first cause from its first notification
            head = change.headline
            onset = str(change.first.first_onset)
            ranked_list, scope = ranked.candidates, ranked.scope
            parts = change.parts()
            seconds = change.seconds()
            if seconds is not None:
                size.add_metric([project, experiment, onset, head.signal,
                                 parts[0]["part"] if parts else head.signal,
                                 _cause(ranked_list), _where(scope),
                                 str((scope or {}).get("rank", ""))], seconds)
            ratio.add_metric([project, experiment, onset, head.signal],
                             head.size / abs(head.baseline) if head.baseline else 0.0)
            baseline.add_metric([project, experiment, onset, head.signal], head.baseline)
            for i, c in enumerate(ranked_list, 1):
                pct = c.get("change_pct")
                cand.add_metric([project, experiment, onset, str(i), c["name"],
                                 _where(c["labels"]), c["direction"]],
                                 (pct or 0.0) / 100.0)
        yield from (size, ratio, baseline, cand)


# what a change's first ranking comes after: none, found nothing at no step
_FIRST = Ranking(-1, [], None, 0, None)


def _cause(ranked: list[dict]) -> str:
    if not ranked:
        return "not ranked yet"
    c = ranked[0]
    pct = c.get("change_pct")
    where = _where(c["labels"])
    return (f"{c['name']}{' on ' + where if where else ''} "
            f"{'+' if (pct or 0) >= 0 else ''}{pct:.0f}%" if pct is not None
            else c["name"])


def _where(labels: dict | None) -> str:
    return where(labels) if labels else ""


def _rule(s: ChangesSettings) -> dict:
    return {k: getattr(s, k) for k in ("warmup_steps", "baseline_min_steps", "window",
                                       "threshold", "min_change", "min_part_share")}
