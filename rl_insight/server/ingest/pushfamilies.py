"""A pushed group's families held as plain tuples of strings and numbers.

Why: the server holds every group's samples until the group's next push, so all of them
at once. As prometheus_client's ``Metric`` and ``Sample`` objects each sample was two
objects the garbage collector tracks (about 90,000 for 800 lane groups), and every full
collection walked them all: 30-90 ms with every request waiting, every 10 s
(bench/registrations.py). CPython's collector stops tracking an exact tuple of strings
and numbers once it has seen it; ``Metric`` objects are made from these only where a
reader needs them (a group read back at start, the latched states, the tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

# one family: (type, documentation, unit, sample names, sample labels as (name, value)
# pairs, sample values), each a tuple
Family = tuple[str, str, str, tuple[str, ...], tuple[tuple[tuple[str, str], ...], ...],
               tuple[float, ...]]
TYPE, DOC, UNIT, NAMES, LABELS, VALUES = range(6)
Packed = dict[str, Family]  # family name -> family, in the push's order

# each (label, value) pair once: the samples of 800 lane groups hold about 400,000 pairs,
# a few thousand of them distinct (job, run, lane, state, bucket); bounded as
# pushshape._VALUES is
_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_MAX_PAIRS = 100_000


def label_pairs(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A sample's labels as (name, value) pairs, each pair shared with every other sample
    that has it."""
    if len(_PAIRS) >= _MAX_PAIRS:
        _PAIRS.clear()
    return tuple(_PAIRS.setdefault(pair, pair) for pair in labels.items())


def pack(families: Mapping[str, Metric]) -> Packed:
    """Checked families (pushtext.check_families) as tuples."""
    return {name: (f.type, f.documentation, f.unit, tuple(s.name for s in f.samples),
                   tuple(label_pairs(s.labels) for s in f.samples),
                   tuple(s.value for s in f.samples))
            for name, f in families.items()}


def metric(name: str, fam: Family) -> Metric:
    """One family as prometheus_client's Metric (made afresh on every call)."""
    out = Metric.__new__(Metric)  # the checks of Metric() were made when it was pushed
    out.name, out.documentation, out.type, out.unit = name, fam[DOC], fam[TYPE], fam[UNIT]
    out.samples = [Sample(n, dict(labels), v, None, None)
                   for n, labels, v in zip(fam[NAMES], fam[LABELS], fam[VALUES],
                                           strict=True)]
    return out


def unpack(packed: Packed) -> dict[str, Metric]:
    return {name: metric(name, fam) for name, fam in packed.items()}


def series(packed: Packed) -> int:
    return sum(len(f[VALUES]) for f in packed.values())


def types(packed: Packed) -> Iterable[tuple[str, str]]:
    """(family name, type) of each family."""
    return ((name, f[TYPE]) for name, f in packed.items())
