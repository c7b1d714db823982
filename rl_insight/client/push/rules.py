"""Scrape rules: an engine's /metrics text translated into sink operations, and the rule
packs shipped for vLLM and TransferQueue.

The rule types and their arithmetic are upstream's (verl-project/rl-insight
``rl_insight/client/push/translate.py`` at 8bfafe83, ``gauge_timer`` and ``group`` from
its ``tests/monitor/ut/client/push/test_push_translate.py`` at 56d5cb88):

- ``gauge``: every sample of ``source`` as a store, with the sample's labels;
- ``gauge_timer``: the same values as timers;
- ``counter_delta``: a counter's growth since the previous scrape, as a counter; the
  first scrape only sets the baseline, and a counter that went down (the engine
  restarted) sets it again;
- ``summary_mean_us``: a summary's or histogram's mean over the scrape interval,
  ``(sum - sum') / (count - count')`` seconds, as a timer in microseconds; nothing
  while no new observation came;
- ``ratio``: ``numerator``'s first sample over ``denominator``'s, as a store.

A rule's ``tags`` join the sample's labels (the rule's win); its ``group`` (a pack's
rules have the pack's name) decides which sinks get it (``rollout_groups``). ``source``
may name a counter with or without ``_total``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any, NamedTuple

import yaml
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

TYPES = ("gauge", "gauge_timer", "counter_delta", "summary_mean_us", "ratio")
PACKS = "rl_insight.client.push.packs"


class Emission(NamedTuple):
    """One sink operation: ``name`` relative to the sink's rollout prefix."""

    name: str
    op: str  # counter, store or timer
    value: float
    tags: dict[str, str]
    group: str = ""


def load_pack(name: str) -> list[dict[str, Any]]:
    """A shipped pack's rules, each in the pack's group unless it names its own;
    FileNotFoundError for a pack that is not shipped."""
    text = resources.files(PACKS).joinpath(f"{name}.yaml").read_text()
    return [{"group": str(name), **rule} for rule in yaml.safe_load(text) or []]


def rollout_rules(packs: Iterable[str], inline: Iterable[Mapping[str, Any]]
                  ) -> list[dict[str, Any]]:
    """The packs' rules, then the inline ones; a pack that is not shipped, or a rule that
    cannot work, is said and left out."""
    rules: list[dict[str, Any]] = []
    for pack in packs:
        try:
            rules.extend(load_pack(str(pack)))
        except (FileNotFoundError, yaml.YAMLError) as exc:
            shipped = sorted(p.name[:-5] for p in resources.files(PACKS).iterdir()
                             if p.name.endswith(".yaml"))
            log.warning("rl-insight: push.rollout.packs: %r is not a pack here (%s); the "
                        "packs are %s", pack, type(exc).__name__, ", ".join(shipped))
    for i, rule in enumerate(inline):
        kind = str(rule.get("type"))
        needs = ("numerator", "denominator", "name") if kind == "ratio" \
            else ("source", "name")
        if kind not in TYPES or any(not rule.get(k) for k in needs):
            log.warning("rl-insight: push.rollout.metrics[%d] %r: a rule needs a type "
                        "(one of %s) and %s; left out", i, dict(rule), ", ".join(TYPES),
                        ", ".join(needs))
            continue
        rules.append(dict(rule))
    return rules


def families(text: str) -> dict[str, Any]:
    """The text's families by name, and by each sample's name (``..._total``)."""
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = fam
        for s in fam.samples:
            if not s.name.endswith("_created"):
                out.setdefault(s.name, fam)
    return out


def _key(labels: Mapping[str, str]) -> tuple:
    return tuple(sorted(labels.items()))


class ScrapeState:
    """One target's previous values, for the rules that need two scrapes."""

    def __init__(self) -> None:
        self.prev: dict[tuple, Any] = {}

    def translate(self, text: str, rules: Iterable[Mapping[str, Any]]) -> list[Emission]:
        fams = families(text)
        out: list[Emission] = []
        for rule in rules:
            kind, group = str(rule.get("type")), str(rule.get("group") or "")
            tags = {str(k): str(v) for k, v in (rule.get("tags") or {}).items()}
            name = str(rule.get("name"))
            if kind == "ratio":
                out.extend(self._ratio(fams, rule, name, tags, group))
                continue
            fam = fams.get(str(rule.get("source")))
            if fam is None:
                continue
            made = {"gauge": self._gauge, "gauge_timer": self._gauge,
                    "counter_delta": self._delta,
                    "summary_mean_us": self._mean}.get(kind)
            if made is not None:
                out.extend(Emission(name, op, v, {**labels, **tags}, group)
                           for op, v, labels in made(fam, rule, kind))
        return out

    @staticmethod
    def _gauge(fam: Any, rule: Mapping, kind: str) -> Iterable[tuple]:
        op = "timer" if kind == "gauge_timer" else "store"
        return [(op, float(s.value), dict(s.labels)) for s in fam.samples]

    def _delta(self, fam: Any, rule: Mapping, kind: str) -> Iterable[tuple]:
        out = []
        for s in fam.samples:
            if s.name not in (fam.name, fam.name + "_total"):
                continue  # _created
            key = (rule.get("source"), s.name, _key(s.labels))
            previous, self.prev[key] = self.prev.get(key), float(s.value)
            if previous is not None and s.value >= previous:
                out.append(("counter", float(s.value) - previous, dict(s.labels)))
        return out

    def _mean(self, fam: Any, rule: Mapping, kind: str) -> Iterable[tuple]:
        sums, counts, labels_of = {}, {}, {}
        for s in fam.samples:
            k = _key(s.labels)
            if s.name.endswith("_sum"):
                sums[k], labels_of[k] = float(s.value), dict(s.labels)
            elif s.name.endswith("_count"):
                counts[k] = float(s.value)
        out = []
        for k, total in sums.items():
            if k not in counts:
                continue
            key = (rule.get("source"), "mean", k)
            previous, self.prev[key] = self.prev.get(key), (total, counts[k])
            if previous is not None and counts[k] > previous[1]:
                mean_s = (total - previous[0]) / (counts[k] - previous[1])
                out.append(("timer", mean_s * 1_000_000.0, labels_of[k]))
        return out

    @staticmethod
    def _ratio(fams: Mapping, rule: Mapping, name: str, tags: dict,
               group: str) -> list[Emission]:
        num, den = fams.get(str(rule.get("numerator"))), fams.get(str(rule.get("denominator")))
        if num is None or den is None or not num.samples or not den.samples:
            return []
        d = float(den.samples[0].value)
        return [] if d == 0 else [Emission(name, "store", float(num.samples[0].value) / d,
                                           tags, group)]
