"""Two runs' configurations told apart, the differing keys first: what changed, what
only A has, what only B has, then what is the same, each sorted by key, with counts.
And which of a run's keys the server's /metrics shows when it holds more than a few
hundred: those that differ between the runs of its project first, so two runs side by
side on a dashboard show their differences whatever their size."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rl_insight.runconfig.flatten import Scalar
from rl_insight.wire.runconfig import MASK

CHANGED, ONLY_A, ONLY_B, SAME = "changed", "only_a", "only_b", "same"
ORDER = (CHANGED, ONLY_A, ONLY_B, SAME)  # the differing keys first


def equal(a: Scalar, b: Scalar) -> bool:
    """Alike as configuration values: 1 and 1.0 are, True and 1 are not (JSON's types)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and
                          math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def diff(a: Mapping[str, Scalar], b: Mapping[str, Scalar], *,
         cut_a: Mapping[str, int] | None = None,
         cut_b: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Run B's flat configuration against run A's: ``keys`` (one row a key: ``key``,
    ``status``, ``a`` and ``b`` where that side has it; ``masked`` where a side's value is
    a secret's, so "same" says nothing of it), ``counts`` per status, ``differing``, and
    ``cut``: what each side's bounds left out (a key only one side has may be one the
    other's cut)."""
    rows = []
    for key in set(a) | set(b):
        row: dict[str, Any] = {"key": key}
        if key in a:
            row["a"] = a[key]
        if key in b:
            row["b"] = b[key]
        if key not in b:
            row["status"] = ONLY_A
        elif key not in a:
            row["status"] = ONLY_B
        else:
            row["status"] = SAME if equal(a[key], b[key]) else CHANGED
        if MASK in (row.get("a"), row.get("b")):
            row["masked"] = True
        rows.append(row)
    rank = {s: i for i, s in enumerate(ORDER)}
    rows.sort(key=lambda r: (rank[r["status"]], r["key"]))
    counts = dict.fromkeys(ORDER, 0)
    for r in rows:
        counts[r["status"]] += 1
    cut = {"a": dict(cut_a or {}), "b": dict(cut_b or {})}
    return {"differing": len(rows) - counts[SAME], "counts": counts, "keys": rows,
            "complete": not any(v for side in cut.values() for v in side.values()),
            "cut": cut}


def exposed_keys(runs: Mapping[tuple[str, str], Mapping[str, Scalar]], limit: int
                 ) -> dict[tuple[str, str], list[str]]:
    """Per run (``(project, experiment_name)`` -> its values), the keys to show, at most
    ``limit``: first those whose value is not the same in every run of its project (or
    missing from one), then the rest, each in key order."""
    projects: dict[str, list[Mapping[str, Scalar]]] = {}
    for (project, _), values in runs.items():
        projects.setdefault(project, []).append(values)
    varying: dict[str, set[str]] = {}
    for project, configs in projects.items():
        keys: set[str] = set()
        if len(configs) > 1:
            first, *others = configs
            every = set(first).union(*others)
            keys = {k for k in every if any(k not in c for c in configs) or
                    any(not equal(first[k], c[k]) for c in others)}
        varying[project] = keys
    out = {}
    for run, values in runs.items():
        differ = varying[run[0]]
        ordered = sorted(values, key=lambda k: (k not in differ, k))
        out[run] = ordered[:limit]
    return out
