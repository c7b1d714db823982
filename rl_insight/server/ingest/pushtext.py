"""Pushed text read and checked: the Prometheus text format parsed (the fast reader of
``textformat`` first), the grouping labels applied, every name, label and sample checked;
a push that is not right raises PushError(400) and changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from rl_insight.server.ingest import textformat
from rl_insight.server.ingest.grouping import PushError, valid_label_name
from rl_insight.server.ingest.pushshape import exposed_name

METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


# names already checked (bounded: a push of ever-new names costs the check, nothing more)
_GOOD_NAMES: set[str] = set()


_GOOD_LABELS: set[str] = set()


def _remember(name: str, into: set[str] = _GOOD_NAMES) -> None:
    if len(into) > 100_000:
        into.clear()
    into.add(name)


def parse_body(text: str, grouping: Mapping[str, str]) -> dict[str, Metric]:
    """Parse the text format and apply the grouping labels; raise PushError(400)."""
    return check_families(parse_text(text), grouping)


def parse_text(text: str, plain_tried: bool = False) -> list[Metric]:
    """Families of a body; ``plain_tried``: the fast reader gave up on it already."""
    try:
        return textformat.parse_library(text) if plain_tried else textformat.parse(text)
    except (ValueError, IndexError, KeyError) as exc:
        raise PushError(400, f"text format parsing error: {exc}") from None


def check_families(families: Iterable[Metric], grouping: Mapping[str, str]
                   ) -> dict[str, Metric]:
    """Parsed families with the grouping labels applied, each name, label and sample
    checked; raise PushError(400)."""
    out: dict[str, Metric] = {}
    seen: set[tuple] = set()
    for fam in families:
        if not fam.samples and fam.name in out:
            continue
        if not METRIC_NAME_RE.match(fam.name):
            raise PushError(400, f"invalid metric name {fam.name!r}")
        metric = out.get(fam.name)
        if metric is not None and metric.type != fam.type:
            raise PushError(400, f"metric family {fam.name!r} appears twice in the push, "
                                 f"as {metric.type} and {fam.type}")
        if metric is None:  # untyped lines of one name arrive as separate families
            metric = Metric(fam.name, fam.documentation, fam.type, fam.unit)
        for s in fam.samples:
            if s.name not in _GOOD_NAMES:
                if not METRIC_NAME_RE.match(s.name):
                    raise PushError(400, f"invalid metric name {s.name!r}")
                _remember(s.name)
            if s.timestamp is not None:
                raise PushError(400, f"sample {s.name} has a timestamp; pushed metrics must "
                                     "not have timestamps")
            for ln in s.labels:
                if ln not in _GOOD_LABELS:
                    if not valid_label_name(ln):
                        raise PushError(400, f"invalid label name {ln!r} on {s.name}")
                    _remember(ln, _GOOD_LABELS)
            labels = {**s.labels, **grouping}
            labels.setdefault("instance", "")
            ident = (s.name, frozenset(labels.items()))
            if ident in seen:
                raise PushError(400, f"sample {s.name}{dict(ident[1])} appears twice")
            seen.add(ident)
            metric.samples.append(Sample(s.name, labels, s.value, None, None))
        out[fam.name] = metric
    kept = {k: v for k, v in out.items() if v.samples}
    exposed: dict[str, str] = {}
    for fam in kept.values():  # `x` as a counter and `x_total` would be one family on /metrics
        shown = exposed_name(fam)
        other = exposed.setdefault(shown, fam.name)
        if other != fam.name:
            raise PushError(400, f"metric families {other!r} and {fam.name!r} would both be "
                                 f"exposed as {shown!r}: rename one of them")
    return kept
