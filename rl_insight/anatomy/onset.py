"""A change's onset and shape, fitted to its values: which step it began at, whether it is
a step change or a creep, and which onsets fit about as well (rl_insight/anatomy/
changes.py dates its changes with it; docs/anatomy.md, "Why a change's onset is a fit").

Plain data in (a signal's values in baseline spreads), plain data out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

FIT_CAP = 9.0  # a step's squared residual counts at most 3 spreads: one outlier is no shape
# an onset fits "about as well" as the best when its loss (squared spreads) is within this
ONSET_MARGIN = 6.0
ONSET_WITHIN = 2  # an onset is told as one step when all that fit about as well are this near
WITNESS_CLARITY = 0.5  # a regression half as clear as the dating one must agree with it
REFIT_STEPS = 12  # an unclear onset is fitted again with each of this many steps after it


@dataclass(frozen=True)
class Fit:
    """A change's onset as its values tell it: the best step and shape, and the earliest
    and latest onsets that fit about as well (:data:`ONSET_MARGIN`)."""

    onset: int
    kind: str
    low: int
    high: int


def fit_onset(points: list[tuple[int, float]], base: list[float] | tuple = ()) -> Fit:
    """The onset of the change in ``points`` (step, value in baseline spreads above the
    baseline, unclipped), oldest first: the piecewise model that fits them best, a level
    before the onset and after it either a level (a step change: a throttled GPU, a
    slower rank) or a line (a creep: responses that grow every step). The level before
    is the median of the baseline's own values (``base``, in spreads) and the points
    before the onset: a baseline of few steps is itself noisy, and steps that sat above
    it from the first tested one are a level to learn, not a change from there.
    Residuals are capped (:data:`FIT_CAP`), the level is the median and the slope the
    median of the points' own slopes weighted by their distance from the onset (a line
    through the onset fitted to least absolute residuals), so one slow step moves
    neither; at equal fit the earlier onset and the level win (the simpler story)."""
    ys = [y for _, y in points]
    base = list(base)
    fits = []  # (loss, step, kind) per onset
    for k, (step, _) in enumerate(points):
        pre = base + ys[:k]
        level = statistics.median(pre) if pre else 0.0
        before = sum(min(FIT_CAP, (v - level) ** 2) for v in pre)
        (_, shift), (_, ramp) = _fits([y - level for y in ys[k:]])
        fits.append((before + ramp, step, "ramp") if ramp < shift - 1e-9
                    else (before + shift, step, "shift"))
    best = min(fits, key=lambda f: f[0])
    near = [step for loss, step, _ in fits if loss <= best[0] + ONSET_MARGIN]
    return Fit(best[1], best[2], min(near), max(near))


def fit_kind(after: list[float]) -> str:
    """"shift" or "ramp": the shape that fits the values since a known onset better."""
    (_, shift), (_, ramp) = _fits(after)
    return "ramp" if ramp < shift - 1e-9 else "shift"


def _weighted_median(values: list[float], weights: list[float]) -> float:
    """The value below and above which half the weight lies."""
    half, acc = sum(weights) / 2, 0.0
    for value, weight in sorted(zip(values, weights, strict=True)):
        acc += weight
        if acc >= half:
            return value
    return values[-1]


def _fits(after: list[float]) -> tuple[tuple[str, float], tuple[str, float]]:
    """The capped loss of a level and of a line from zero through ``after``."""
    level = statistics.median(after)
    slope = _weighted_median([y / (j + 1) for j, y in enumerate(after)],
                             [j + 1 for j in range(len(after))])
    return (("shift", sum(min(FIT_CAP, (y - level) ** 2) for y in after)),
            ("ramp", sum(min(FIT_CAP, (y - slope * (j + 1)) ** 2)
                         for j, y in enumerate(after))))
