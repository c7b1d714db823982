"""Prometheus-safe names. A key such as ``val-aux/gsm8k/reward/mean@1`` becomes
``rl_insight_monitor_val_aux_gsm8k_reward_mean_1``; the caller keeps the raw key as a
label so nothing is lost. One scrape can never be broken by a name."""

from __future__ import annotations

import re
from functools import lru_cache

from rl_insight.wire.events import COUNTER

PREFIX = "rl_insight_monitor_"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_REPEATS = re.compile(r"__+")
RESERVED_LABELS = frozenset({"project", "experiment_name", "job", "instance"})
KEY_LABEL = "metric_key"  # holds the raw key when the name had to change


@lru_cache(maxsize=65536)
def sanitize(name: str) -> str:
    """A valid metric-name fragment (no prefix): invalid characters become '_'."""
    out = _REPEATS.sub("_", _INVALID.sub("_", str(name))).strip("_")
    return out or "unnamed"


@lru_cache(maxsize=65536)
def metric_name(name: str, kind: str) -> tuple[str, bool]:
    """The exported family name and whether it differs from the raw key."""
    base = sanitize(name)
    if base.startswith(PREFIX):
        base = base[len(PREFIX):]
    if kind == COUNTER and not base.endswith("_total"):
        base += "_total"
    changed = base != str(name) and base != str(name) + "_total"
    return PREFIX + base, changed


@lru_cache(maxsize=4096)
def label_name(name: str) -> str:
    """A valid label name; reserved ones get an ``exported_`` prefix like Prometheus."""
    out = _INVALID.sub("_", str(name))
    if not out or out[0].isdigit():
        out = "_" + out
    if out.startswith("__"):
        out = "x" + out
    if out in RESERVED_LABELS:
        out = "exported_" + out
    return out




# the run's and Prometheus' own label names, everywhere in the package: left out of
# tests/test_wire.py's scan
EVERYDAY = frozenset({"RESERVED_LABELS"})
