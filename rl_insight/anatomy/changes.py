"""What changed over a run: sustained regressions of its step time, of each part of its
steps and of its throughput, found as each step is finalized.

Plain data in (the step-anatomy rows, one at a time, as ``/api/v1/anatomy`` answers
them), plain data out (:class:`Regression` records). No clock and no I/O: the server
feeds it each final row, the tests and ``report --changes`` on a finished run feed it
every row, and the same rows give the same regressions.

The rule (docs/anatomy.md, "What changed", has the measured false alarms and delays):

- each signal (``step_time``; ``generate:<role>``, ``phase:<state>``, ``other``; and
  ``tokens_per_gpu_second``, where lower is worse) has a *baseline*: the median and a
  robust spread (the larger of 1.4826 MAD, the spread of step-to-step differences, and
  ``floor`` of the median) of its calm steps after ``warmup_steps``: at most
  ``baseline_max_steps`` of them, the newest ``guard_steps`` kept out, so the baseline
  follows a run that changes slowly and legitimately but never the change being tested;
- each new step becomes a z-score against it, clipped to ``clip`` (one slow step, a
  checkpoint save, weighs no more than three sigma);
- a change is called when, over the last L steps (``min_steps`` <= L <= ``window``), a
  generalized likelihood ratio statistic passes ``threshold``: the mean shift
  ``sum(z) / sqrt(L)`` (a step change: a throttled GPU) or the ramp
  ``sum(j * z_j) / sqrt(sum(j^2))`` (a creep: responses that grow a little every step).
  One slow step cannot pass it (three clipped spreads over three steps is 1.7); three
  slow steps in a row can;
- its onset and kind are a fit (:func:`fit_onset`) with the onsets that fit about as
  well; one found before its values can date it is fitted again with each step after
  (``REFIT_STEPS``) until they can; a change is dated by the series that shows it most
  clearly (:attr:`Change.dated_by`), and said unclear, with where it may be, when its
  values or a second series disagree (:meth:`Change.onset_unclear`);
- and only when it matters: its size (the median since the onset minus the baseline)
  is at least ``min_change`` of the baseline (step time, throughput) or
  ``min_part_share`` of the baseline step time (a part);
- it recovers when the median z of the last ``recover_steps`` steps is below 1; a change
  that holds ``accept_after`` steps becomes the run's new level (its baseline is learned
  again), so a week-long run is not alerted about one change forever.

Why this and not a fixed band (3 of 5 steps outside a KDE of the first 30, as upstream's
after-the-fact tool does): a fixed band's false alarms grow with the run's length and its
onset is where the band was first crossed, steps after the creep began; the ramp test
sees a creep of 1 % a step through 1 % noise within five steps, and the guarded
baseline keeps its false alarms per step constant however long the run.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from rl_insight.anatomy.explain import parts
from rl_insight.anatomy.onset import (  # noqa: F401  (the fit's names, as before)
    FIT_CAP,
    ONSET_MARGIN,
    ONSET_WITHIN,
    REFIT_STEPS,
    WITNESS_CLARITY,
    Fit,
    fit_kind,
    fit_onset,
)
from rl_insight.anatomy.ranks import profile_lines, where, why_rank
from rl_insight.config import ChangesSettings as Rule

STEP_TIME = "step_time"
THROUGHPUT = "tokens_per_gpu_second"
HEADLINES = (STEP_TIME, THROUGHPUT)  # regressions of the run; parts say where they live
MAX_SIGNALS = 64  # parts of a run followed at once (roles and phases: a dozen)
MAX_REGRESSIONS = 100  # kept per run, the oldest closed ones dropped first
PART_SHARE = 0.2  # a part "holds" a regression when it moved this share of its size


def signals(row: Mapping) -> dict[str, tuple[float, int]]:
    """A row's signals: name -> (value, direction): +1 where more is worse (seconds),
    -1 where less is (tokens per GPU-second)."""
    out = {STEP_TIME: (float(row["duration_s"]), 1)}
    out.update({k: (float(v), 1) for k, v in parts(row).items()})
    tps = row.get("tokens_per_gpu_second")
    if tps is not None:
        out[THROUGHPUT] = (float(tps), -1)
    return out


@dataclass
class Regression:
    """A sustained change of one signal."""

    signal: str
    direction: int  # +1: the signal went up (seconds); -1: down (throughput)
    onset_step: int
    detected_step: int
    baseline: float  # the signal's baseline median
    sigma: float  # its baseline spread
    size: float = 0.0  # now: median since the onset (the last ``window`` steps) - baseline
    peak: float = 0.0  # the largest size so far
    last_step: int = 0
    end_step: int | None = None  # the first step back at the baseline
    end: str | None = None  # "recovered", or "new_level" (held accept_after steps)
    statistic: float = 0.0  # the test statistic when it was called
    kind: str = "ramp"  # "ramp" (a creep) or "shift" (a step change)
    # the onsets that fit the values nearly as well as ``onset_step`` (:func:`fit_onset`):
    # an onset is told as one step only when they are all within ONSET_WITHIN of it
    onset_low: int | None = None
    onset_high: int | None = None
    # the onset it was dated at when found: its identity (``id``, the alert's label),
    # which stays as the onset is fitted again over the steps after it
    found_onset: int | None = None
    parts: list[dict] = field(default_factory=list)  # where it lives (headlines)
    # every part that held it while it was open (headlines): they join its change, also
    # once a part's own regression became its new level and it holds it no more
    held: set[str] = field(default_factory=set)

    @property
    def open(self) -> bool:
        return self.end_step is None and self.end is None

    @property
    def size_pct(self) -> float:
        return 100.0 * self.size / abs(self.baseline) if self.baseline else 0.0

    @property
    def id(self) -> str:
        return f"{self.signal}@{self.first_onset}"

    @property
    def first_onset(self) -> int:
        """The onset it was dated at when found (its identity)."""
        return self.onset_step if self.found_onset is None else self.found_onset

    @property
    def onset_span(self) -> tuple[int, int]:
        """The earliest and latest onsets its values fit about as well."""
        return (self.onset_step if self.onset_low is None else self.onset_low,
                self.onset_step if self.onset_high is None else self.onset_high)

    @property
    def onset_unclear(self) -> bool:
        """Onsets further than ONSET_WITHIN steps from ``onset_step`` fit about as well:
        its values cannot date it to a step (a creep's first steps within the noise)."""
        low, high = self.onset_span
        return self.onset_step - low > ONSET_WITHIN or high - self.onset_step > ONSET_WITHIN

    @property
    def clarity(self) -> float:
        """How many of its own baseline spreads it moved."""
        return self.size / self.sigma if self.sigma else 0.0

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(id=self.id, open=self.open, size_pct=self.size_pct,
                   onset_unclear=self.onset_unclear)
        out.pop("parts")
        out.pop("held")
        return out


class _Signal:
    """One signal's baseline, recent z-scores and open regression."""

    __slots__ = ("name", "direction", "seen", "baseline", "pending", "recent", "z",
                 "open", "_stats", "fit_from")

    def __init__(self, name: str, direction: int, rule: Rule) -> None:
        self.name, self.direction, self.seen = name, direction, 0
        self.baseline: deque[float] = deque(maxlen=rule.baseline_max_steps)
        self.pending: deque[tuple[int, float]] = deque()  # the guard: not baseline yet
        self.recent: deque[tuple[int, float]] = deque(maxlen=rule.accept_after)
        self.z: deque[tuple[int, float]] = deque(maxlen=rule.window)
        self.open: Regression | None = None
        self._stats: tuple[float, float] | None = None
        self.fit_from = 0  # the open regression's first tested step: its onset's search

    def stats(self, rule: Rule) -> tuple[float, float]:
        """(median, spread) of the baseline."""
        if self._stats is None:
            b = list(self.baseline)
            m = statistics.median(b)
            mad = 1.4826 * statistics.median([abs(x - m) for x in b])
            diffs = [abs(b[i] - b[i - 1]) for i in range(1, len(b))]
            step = statistics.median(diffs) / 0.954 if diffs else 0.0  # sqrt(2)*0.6745
            self._stats = (m, max(mad, step, rule.floor * abs(m), 1e-9))
        return self._stats

    def _learn(self, value: float) -> None:
        self.baseline.append(value)
        self._stats = None

    def add(self, step: int, value: float, rule: Rule, step_scale: float | None
            ) -> tuple[Regression | None, Regression | None]:
        """Feed one step; (the regression it opened, the one it closed)."""
        self.seen += 1
        if self.seen <= rule.warmup_steps:
            return None, None
        self.recent.append((step, value))
        if len(self.baseline) < rule.baseline_min_steps:
            self._learn(value)
            return None, None
        if self.open is None:
            self.pending.append((step, value))
            while len(self.pending) > rule.guard_steps:
                self._learn(self.pending.popleft()[1])
        m, s = self.stats(rule)
        z = max(-rule.clip, min(rule.clip, self.direction * (value - m) / s))
        self.z.append((step, z))
        if self.open is not None:
            return None, self._follow(step, rule)
        return self._test(step, m, s, rule, step_scale), None

    def _test(self, step: int, m: float, s: float, rule: Rule, step_scale: float | None
              ) -> Regression | None:
        zs = list(self.z)
        stat = 0.0
        for n in range(rule.min_steps, len(zs) + 1):
            tail = [z for _, z in zs[-n:]]
            shift = sum(tail) / math.sqrt(n)
            ramp = sum((j + 1) * z for j, z in enumerate(tail)) / \
                math.sqrt(n * (n + 1) * (2 * n + 1) / 6)
            stat = max(stat, shift, ramp)
        if stat < rule.threshold:
            return None
        # the test says that something changed; its onset and kind are what fits the
        # values best (the clipped z-scores above make every large change look flat)
        self.fit_from = zs[0][0]
        fit = self._fit(m, s)
        onset = fit.onset
        since = [v for st, v in self.recent if st >= onset]
        size = self.direction * (statistics.median(since) - m)
        material = rule.min_change * abs(m) if self.name in HEADLINES else \
            rule.min_part_share * (step_scale if step_scale else abs(m))
        if size < material:
            return None
        reg = Regression(self.name, self.direction, onset, step, m, s, size=size, peak=size,
                         last_step=step, statistic=round(stat, 2), kind=fit.kind,
                         onset_low=fit.low, onset_high=fit.high, found_onset=onset)
        self.open = reg
        # what came in since the onset is the change, never the baseline
        self.pending = deque((st, v) for st, v in self.pending if st < onset)
        return reg

    def _fit(self, m: float, s: float) -> Fit:
        """The onset and shape of the values since the first tested step, in spreads of
        the baseline (``m``, ``s``) it was found against (kept while it is open)."""
        return fit_onset([(st, self.direction * (v - m) / s) for st, v in self.recent
                          if st >= self.fit_from],
                         [self.direction * (v - m) / s for v in self.baseline])

    def _follow(self, step: int, rule: Rule) -> Regression | None:
        """Update the open regression; close it when it recovered or held too long."""
        reg = self.open
        m = reg.baseline
        if reg.onset_unclear and step - reg.detected_step <= REFIT_STEPS:
            # found before its values could date it: each step after it says more
            fit = self._fit(m, reg.sigma)
            # an onset that moved is unclear until a step after confirms it: its span
            # keeps where it was dated before
            low, high = fit.low, fit.high
            if abs(fit.onset - reg.onset_step) > ONSET_WITHIN:
                low, high = min(low, reg.onset_step), max(high, reg.onset_step)
            reg.onset_step, reg.onset_low, reg.onset_high = fit.onset, low, high
        since = [v for st, v in self.recent if st >= reg.onset_step][-rule.window:]
        reg.size = self.direction * (statistics.median(since) - m)
        reg.peak = max(reg.peak, reg.size)
        reg.last_step = step
        if step - reg.onset_step < rule.window:  # its shape is clearer with each step
            reg.kind = fit_kind([self.direction * (v - m) / reg.sigma
                                 for st, v in self.recent if st >= reg.onset_step])
        last = list(self.z)[-rule.recover_steps:]
        if len(last) == rule.recover_steps and \
                statistics.median(z for _, z in last) < 1.0 and last[0][0] > reg.onset_step:
            reg.end_step = next(st for st, z in last if z < 1.0)  # the first back
            reg.end = "recovered"
        elif step - reg.onset_step + 1 >= rule.accept_after:
            reg.end_step, reg.end = step + 1, "new_level"
            self.baseline.clear()
            for _, v in list(self.recent)[-rule.baseline_min_steps:]:
                self._learn(v)
        else:
            return None
        self.open = None
        self.z.clear()
        self.pending.clear()
        return reg

    def shift_since(self, onset: int) -> float | None:
        """Median since ``onset`` minus the baseline median, in the signal's units."""
        if len(self.baseline) == 0:
            return None
        since = [v for st, v in self.recent if st >= onset]
        if not since:
            return None
        return statistics.median(since) - statistics.median(self.baseline)


class RunChanges:
    """One run's signals and regressions, fed its final rows in step order."""

    def __init__(self, rule: Rule | None = None) -> None:
        self.rule = rule or Rule()
        self.signals: dict[str, _Signal] = {}
        self.regressions: list[Regression] = []
        self.last_step: int | None = None
        self.dropped_signals = 0

    def add(self, row: Mapping) -> list[Regression]:
        """Feed one final row (a row of a step at or before the last one fed is ignored:
        :func:`analyze` the rows again for redone rows); the regressions it opened or
        closed."""
        step = int(row["step"])
        if self.last_step is not None and step <= self.last_step:
            return []
        self.last_step = step
        changed: list[Regression] = []
        scale = None
        base = self.signals.get(STEP_TIME)
        if base is not None and len(base.baseline) >= self.rule.baseline_min_steps:
            scale = base.stats(self.rule)[0]
        for name, (value, direction) in signals(row).items():
            sig = self.signals.get(name)
            if sig is None:
                if len(self.signals) >= MAX_SIGNALS:
                    self.dropped_signals += 1
                    continue
                sig = self.signals[name] = _Signal(name, direction, self.rule)
            if not math.isfinite(value):
                continue
            opened, closed = sig.add(step, value, self.rule, scale)
            if opened is not None:
                self.regressions.append(opened)
                changed.append(opened)
            if closed is not None:
                changed.append(closed)
        for reg in self.regressions:
            if reg.open and reg.signal in HEADLINES:
                reg.parts = self._where(reg)
                reg.held.update(p["part"] for p in reg.parts)
        self._bound()
        return changed

    def _where(self, reg: Regression) -> list[dict]:
        """The parts a headline regression lives in: each part's shift since its onset
        (seconds; a throughput drop is told by the parts that slowed), largest first."""
        if reg.signal == STEP_TIME:
            total = reg.size
        else:  # throughput: the step time's own change, when there is one
            sig = self.signals.get(STEP_TIME)
            total = sig.shift_since(reg.onset_step) if sig else None
        out = []
        for name, sig in self.signals.items():
            if name in HEADLINES:
                continue
            shift = sig.shift_since(reg.onset_step)
            if shift is None or not total or total <= 0 or shift < PART_SHARE * total:
                continue
            out.append({"part": name, "over_s": round(shift, 4),
                        "share": round(min(1.0, shift / total), 3)})
        return sorted(out, key=lambda p: -p["over_s"])

    def _bound(self) -> None:
        while len(self.regressions) > MAX_REGRESSIONS:
            gone = next((r for r in self.regressions if not r.open), self.regressions[0])
            self.regressions.remove(gone)

    def open(self) -> list[Regression]:
        return [r for r in self.regressions if r.open]

    def report(self) -> list[Change]:
        """The run's changes, oldest first: the regressions of the step time and the
        throughput whose spans overlap are one change, and a part's joins it where the
        part holds it (a creeping generation shows in its part before the step time
        confirms it: the change is found when the first of them is). A part that moved
        at the time on its own (the driver's overhead on a busy host, beside a slower
        generation) is a change of its own: it lends the other neither its onset nor
        the step it was found at."""
        regs = sorted(self.regressions, key=lambda r: (r.onset_step, r.detected_step))
        heads = _by_overlap([r for r in regs if r.signal in HEADLINES])
        loose = []
        for reg in regs:
            if reg.signal in HEADLINES:
                continue
            home = next((g for g in heads if any(
                _overlaps(reg, h) and reg.signal in h.held
                for h in g)), None)
            if home is None:
                loose.append(reg)
            else:
                home.append(reg)
        changes = [Change.of(g) for g in heads + _by_overlap(loose)]
        return sorted(changes, key=lambda c: (c.first.onset_step, c.detected_step))


@dataclass
class Change:
    """One change of a run: the regressions of its signals at the same time. Its
    headline is the step time's regression when there is one (else the throughput's, else
    the part's that changed most); the parts are where it lives."""

    regressions: list[Regression]
    candidates: list[dict] = field(default_factory=list)  # what moved with it, ranked
    scope: dict | None = None  # the one replica or node it is in

    @classmethod
    def of(cls, regs: list[Regression]) -> Change:
        return cls(regs)

    @property
    def headline(self) -> Regression:
        by = {r.signal: r for r in self.regressions}
        for name in HEADLINES:
            if name in by:
                return by[name]
        return max(self.regressions, key=lambda r: r.size)

    @property
    def dated_by(self) -> Regression:
        """The regression that shows it most clearly, in its own spreads (a weight sync
        that grows by two of its spreads a step is a creep of a tenth of a spread in the
        step time): its onset and kind are the change's. At equal clarity a headline;
        the throughput (tokens over seconds, each with its own noise) only alone."""
        return max(self._timed(), key=lambda r: (r.clarity, r.signal in HEADLINES))

    def _timed(self) -> list[Regression]:
        return [r for r in self.regressions if r.signal != THROUGHPUT] or self.regressions

    def witnesses(self) -> list[Regression]:
        """The change's other regressions that show it about as clearly as the one that
        dates it (:data:`WITNESS_CLARITY` of its spreads): its onset must agree with
        theirs."""
        dated = self.dated_by
        return [r for r in self._timed()
                if r is not dated and r.clarity >= WITNESS_CLARITY * dated.clarity]

    @property
    def onset_step(self) -> int:
        return self.dated_by.onset_step

    @property
    def kind(self) -> str:
        return self.dated_by.kind

    @property
    def onset_range(self) -> list[int]:
        """The earliest and latest onsets its values (its dating regression's and its
        witnesses') fit about as well."""
        spans = [r.onset_span for r in (self.dated_by, *self.witnesses())]
        return [min(lo for lo, _ in spans), max(hi for _, hi in spans)]

    def onset_unclear(self) -> str | None:
        """Why its values cannot date it to a step, or None: onsets further than
        ONSET_WITHIN steps away fit about as well, or a witness dates it elsewhere (the
        evidence disagrees with itself: no confident answer is given)."""
        dated = self.dated_by
        lo, hi = dated.onset_span
        if dated.onset_unclear:
            return (f"{dated.signal}'s values fit any onset from step {lo} to {hi} about "
                    "as well (its first steps are within its noise)")
        for w in self.witnesses():
            w_lo, w_hi = w.onset_span
            if w_hi < lo or w_lo > hi:
                return (f"{dated.signal} dates it from step {dated.onset_step} ({lo}-{hi}), "
                        f"{w.signal} from step {w.onset_step} ({w_lo}-{w_hi})")
        return None

    @property
    def detected_step(self) -> int:
        return min(r.detected_step for r in self.regressions)

    @property
    def open(self) -> bool:
        return any(r.open for r in self.regressions)

    @property
    def first(self) -> Regression:
        """The regression found first: the change's identity while others join it."""
        return min(self.regressions, key=lambda r: (r.detected_step, r.onset_step))

    @property
    def id(self) -> str:
        return self.first.id

    def seconds(self) -> float | None:
        """How much longer its steps take: the step time's regression, else the part's
        (a throughput drop alone: None)."""
        head = self.headline
        if head.signal == THROUGHPUT:
            step = next((r for r in self.regressions if r.signal == STEP_TIME), None)
            return step.size if step is not None else None
        return head.size

    def parts(self) -> list[dict]:
        """Where it lives: the headline's parts, or the parts that regressed."""
        if self.headline.parts:
            return self.headline.parts
        out = [{"part": r.signal, "over_s": round(r.size, 4), "share": 1.0}
               for r in self.regressions if r.signal not in HEADLINES]
        return sorted(out, key=lambda p: -p["over_s"])

    def as_dict(self) -> dict:
        head = self.headline
        ends = [r.end_step for r in self.regressions]
        return {"id": self.id, "signal": head.signal, "open": self.open,
                "first_onset_step": self.first.first_onset,
                "onset_step": self.onset_step, "onset_range": self.onset_range,
                "onset_unclear": self.onset_unclear(),
                "dated_by": self.dated_by.signal, "detected_step": self.detected_step,
                "last_step": max(r.last_step for r in self.regressions),
                "end_step": None if self.open or None in ends else max(ends),
                "end": None if self.open else head.end,
                "kind": self.kind, "baseline": head.baseline, "size": head.size,
                "size_pct": head.size_pct, "peak": head.peak,
                "unit": "tokens/GPU-s" if head.signal == THROUGHPUT else "s",
                "parts": self.parts(), "candidates": self.candidates, "scope": self.scope,
                "signals": [r.as_dict() for r in self.regressions]}


def _by_overlap(regs: list[Regression]) -> list[list[Regression]]:
    """Regressions in onset order, grouped where each overlaps one of its group's."""
    groups: list[list[Regression]] = []
    for reg in regs:
        if groups and any(_overlaps(reg, other) for other in groups[-1]):
            groups[-1].append(reg)
        else:
            groups.append([reg])
    return groups


def _overlaps(a: Regression, b: Regression) -> bool:
    a_end = a.end_step if a.end_step is not None else a.last_step + 1
    b_end = b.end_step if b.end_step is not None else b.last_step + 1
    return a.onset_step < b_end and b.onset_step < a_end


def analyze(rows: Iterable[Mapping], rule: Rule | None = None) -> RunChanges:
    """Every row of a run, in step order, through one :class:`RunChanges`."""
    run = RunChanges(rule)
    for row in sorted(rows, key=lambda r: r["step"]):
        run.add(row)
    return run


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def render(report: Mapping) -> str:
    """``/api/v1/anatomy/changes`` as lines for a terminal."""
    run = f"{report['project']}/{report['experiment_name']}"
    found = report["changes"]
    head = (f"what changed in {run} ({report['steps']} steps, "
            f"{'followed live' if report['source'] == 'live' else 'from Prometheus'})")
    if not found:
        return (head + ": nothing; its step time, parts and throughput stayed within "
                "their baselines\n")
    lines = [head + ":"]
    for i, c in enumerate(found, 1):
        unit = c["unit"]
        size = f"+{c['size']:.2f} s" if unit == "s" else f"-{c['size']:.3g} {unit}"
        state = "open" if c["open"] else \
            f"{c['end'] or 'ended'} at step {c['end_step']}"
        lines.append(f"{i}. {c['signal']} {size} ({c['size_pct']:+.0f}%) since step "
                     f"{c['onset_step']} ({c['kind']}), found at step {c['detected_step']}; "
                     f"{state}")
        if c.get("onset_unclear"):
            lo, hi = c["onset_range"]
            lines.append(f"   its onset is unclear, somewhere in steps {lo}-{hi}: "
                         f"{c['onset_unclear']}")
        for p in c["parts"][:4]:
            lines.append(f"   in {p['part']}: +{p['over_s']:.2f} s "
                         f"({100 * p['share']:.0f}% of it)")
        v = c.get("verdict")
        if v and v.get("changed"):
            lines.append(f"   the run is {v['after']} since (it was {v['before']}): "
                         f"{v['why']}")
        if c.get("scope"):
            lines.append(f"   only on {where(c['scope'])}")
            if c["scope"].get("rank") is not None:
                lines.append(f"   {why_rank(c['scope'])}")
                lines += ["   " + line for line in profile_lines(c.get("profile"))]
        if c["candidates"]:
            lines.append("   what moved with it:")
        for j, m in enumerate(c["candidates"], 1):
            at = " ".join(f"{k}={v}" for k, v in m["labels"].items() if k != "role")
            pct = f" ({m['change_pct']:+.0f}%)" if m.get("change_pct") is not None else ""
            share = f", accounts for {100 * m['accounts_for']:.0f}%" \
                if m.get("accounts_for") else ""
            lines.append(f"     {j}. {m['name']}{' [' + at + ']' if at else ''}: "
                         f"{_num(m['before'])} -> {_num(m['after'])}{pct}, "
                         f"correlation {m['correlation']:+.2f}{share}"
                         f"{' (a symptom)' if m['role'] != 'cause' else ''}")
    return "\n".join(lines) + "\n"
