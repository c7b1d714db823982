"""Metric aggregation per run (project, experiment_name): counters add up, gauges keep
the last value, histograms count into buckets. A per-run series limit drops new series
beyond it and counts them; a name observed as two kinds keeps its first kind.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from rl_insight.collector.exposition import escape_help, fmt_value, labels_text
from rl_insight.wire.events import COUNTER, GAUGE, HISTOGRAM, Identity, Labels, Metric

log = logging.getLogger(__name__)

_INF = 'le="+Inf"'
DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                                      5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass
class _Hist:
    counts: list[int]
    total: float = 0.0
    n: int = 0


@dataclass
class Family:
    kind: str
    doc: str
    series: dict[Labels, float | _Hist] = field(default_factory=dict)
    buckets: tuple[float, ...] = DEFAULT_BUCKETS


class RunMetrics:
    """The families of one run. Not thread-safe by itself; :class:`Runs` locks."""

    def __init__(self, max_series: int, buckets: dict[str, Sequence[float]] | None = None
                 ) -> None:
        self.max_series = max_series
        self.buckets = dict(buckets or {})
        self.families: dict[str, Family] = {}
        self.series = 0
        self.dropped_series_limit = 0
        self.dropped_kind_conflict = 0
        self.dirty = False
        self.last_applied = time.monotonic()
        self._warned: set[str] = set()

    def bucket_bounds(self, name: str) -> tuple[float, ...]:
        b = self.buckets.get(name) or self.buckets.get("default")
        return tuple(sorted(float(x) for x in b)) if b else DEFAULT_BUCKETS

    def apply(self, m: Metric) -> bool:
        fam = self.families.get(m.name)
        if fam is None:
            bounds = ()
            if m.kind == HISTOGRAM:
                bounds = tuple(sorted(m.buckets)) if m.buckets else self.bucket_bounds(m.name)
            fam = self.families[m.name] = Family(m.kind, m.doc, buckets=bounds)
        elif fam.kind != m.kind:
            self.dropped_kind_conflict += 1
            if m.name not in self._warned:
                self._warned.add(m.name)
                log.warning("metric %s was first reported as a %s; %s observations of it "
                            "are dropped", m.name, fam.kind, m.kind)
            return False
        if not fam.doc and m.doc:
            fam.doc = m.doc
        cur = fam.series.get(m.labels)
        if cur is None:
            if self.series >= self.max_series:
                self.dropped_series_limit += 1
                if "__limit__" not in self._warned:
                    self._warned.add("__limit__")
                    log.warning("run reached its limit of %d series; new series are "
                                "dropped and counted", self.max_series)
                return False
            self.series += 1
            if m.kind == HISTOGRAM:
                cur = fam.series[m.labels] = _Hist([0] * (len(fam.buckets) + 1))
        if m.kind == COUNTER:
            fam.series[m.labels] = (cur or 0.0) + m.value
        elif m.kind == GAUGE:
            fam.series[m.labels] = m.value
        else:
            cur.counts[bisect.bisect_left(fam.buckets, m.value)] += 1
            cur.total += m.value
            cur.n += 1
        self.dirty = True
        return True

    def render(self, extra: Labels = ()) -> str:
        """The text format; ``extra`` labels (a run's identity) go on every series."""
        out: list[str] = []
        for name, fam in self.families.items():
            if not fam.series:
                continue
            out.append(f"# HELP {name} {escape_help(fam.doc or name)}")
            out.append(f"# TYPE {name} {fam.kind}")
            if fam.kind != HISTOGRAM:
                for labels, v in fam.series.items():
                    out.append(f"{name}{labels_text(extra + labels)} {fmt_value(v)}")
                continue
            for labels, h in fam.series.items():
                labels = extra + labels
                acc = 0
                for bound, c in zip(fam.buckets, h.counts, strict=False):
                    acc += c
                    le = f'le="{float(bound)!r}"'  # as prometheus_client writes it
                    out.append(f"{name}_bucket{labels_text(labels, le)} {acc}")
                out.append(f"{name}_bucket{labels_text(labels, _INF)} {h.n}")
                out.append(f"{name}_sum{labels_text(labels)} {fmt_value(h.total)}")
                out.append(f"{name}_count{labels_text(labels)} {h.n}")
        return "\n".join(out) + "\n" if out else ""


class Runs:
    """RunMetrics per identity, thread-safe: one thread applies, another renders."""

    def __init__(self, max_series: int = 10_000,
                 buckets: dict[str, Sequence[float]] | None = None) -> None:
        self.max_series = max_series
        self.buckets = buckets
        self._runs: dict[Identity, RunMetrics] = {}
        self._finished: dict[Identity, float] = {}  # when finish() was called (monotonic)
        self._lock = threading.Lock()
        self.applied = 0
        self.dropped = 0

    def apply(self, identity: Identity, metrics: Iterable[Metric]) -> None:
        with self._lock:
            run = self._runs.get(identity)
            if run is None:
                run = self._runs[identity] = RunMetrics(self.max_series, self.buckets)
            run.last_applied = time.monotonic()
            for m in metrics:
                if run.apply(m):
                    self.applied += 1
                else:
                    self.dropped += 1

    def take_dirty(self) -> list[tuple[Identity, str]]:
        """Render every run changed since the last call; marks them clean. A failed push
        calls :meth:`mark_dirty` so the run is sent again."""
        with self._lock:
            out = []
            for ident, run in self._runs.items():
                if run.dirty:
                    run.dirty = False
                    out.append((ident, run.render()))
            return out

    def mark_all_dirty(self) -> None:
        with self._lock:
            for run in self._runs.values():
                run.dirty = True

    def seed(self, identity: Identity, metrics: Iterable[Metric]) -> None:
        """Start from values already at the server (a restarted hub): counters continue
        instead of resetting; only series the run does not hold yet are taken."""
        with self._lock:
            run = self._runs.get(identity)
            if run is None:
                run = self._runs[identity] = RunMetrics(self.max_series, self.buckets)
            for m in metrics:
                fam = run.families.get(m.name)
                if fam is None or m.labels not in fam.series:
                    run.apply(m)
            run.dirty = False

    def finish(self, identity: Identity, now: float) -> None:
        """The run ended: forget it ``grace_s`` later (:meth:`forget_finished`)."""
        with self._lock:
            self._finished.setdefault(identity, now)

    def forget_finished(self, now: float, grace_s: float) -> list[Identity]:
        """Drop the runs that finished ``grace_s`` ago and have nothing left to push, so a
        process that sees runs come and go for weeks keeps only the live ones."""
        with self._lock:
            return self._drop([i for i, t in self._finished.items() if now - t >= grace_s
                               and not (i in self._runs and self._runs[i].dirty)])

    def forget_idle(self, now: float, idle_s: float,
                    keep: Callable[[Identity], bool] = lambda i: False) -> list[Identity]:
        """Drop the runs nothing was applied to for ``idle_s`` and with nothing left to
        push (unless ``keep`` says otherwise): for processes that never hear of a finish."""
        with self._lock:
            return self._drop([i for i, r in self._runs.items()
                               if now - r.last_applied >= idle_s and not r.dirty
                               and not keep(i)])

    def _drop(self, gone: list[Identity]) -> list[Identity]:
        for i in gone:  # under the lock
            self._runs.pop(i, None)
            self._finished.pop(i, None)
        return gone

    def any_dirty(self) -> bool:
        with self._lock:
            return any(r.dirty for r in self._runs.values())

    def mark_dirty(self, identity: Identity) -> None:
        with self._lock:
            run = self._runs.get(identity)
            if run is not None:
                run.dirty = True

    def render_all(self) -> str:
        """Every run in one exposition, each series labelled with its run (for serving
        /metrics when there is no server to push to)."""
        with self._lock:
            texts = [run.render((("experiment_name", i.experiment_name),
                                 ("project", i.project)))
                     for i, run in self._runs.items()]
        return merge_expositions(texts)

    def identities(self) -> list[Identity]:
        with self._lock:
            return list(self._runs)

    def stats(self) -> dict:
        with self._lock:
            return {
                "runs": len(self._runs),
                "series": sum(r.series for r in self._runs.values()),
                "dropped_series_limit": sum(r.dropped_series_limit for r in self._runs.values()),
                "dropped_kind_conflict": sum(r.dropped_kind_conflict
                                             for r in self._runs.values()),
            }


def merge_expositions(texts: list[str]) -> str:
    """Join expositions so each family's HELP and TYPE appear once."""
    seen: set[str] = set()
    families: dict[str, list[str]] = {}
    order: list[str] = []
    for text in texts:
        current = None
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                current = line.split(" ", 3)[2]
                if current not in families:
                    families[current] = []
                    order.append(current)
                key = line[:7] + current
                if key in seen:
                    continue
                seen.add(key)
                families[current].append(line)
            elif current is not None and line:
                families[current].append(line)
    return "".join("\n".join(families[n]) + "\n" for n in order)
