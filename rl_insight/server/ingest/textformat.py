"""Parsing pushed bodies in the Prometheus text format, fast for what collectors send.

prometheus_client's parser reads character by character (about 30 µs a sample); pushes
are most of the server's intake. When every line of a body is plain (metric names and
label names of the legacy charset, label values without backslashes or quotes, no
timestamps, HELP texts without backslashes), this reads it with a few regular
expressions into exactly what ``text_string_to_metric_families`` returns (the tests hold
the two equal); anything else goes to prometheus_client's parser, unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_SAMPLE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL}(?:,{_LABEL})*,?)?)\}})?[ \t]+(\S+)")
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_NAME_RE = re.compile(_NAME)
_WS = re.compile(r"[ \t\n\r\x0b\x0c]+")  # string.whitespace
_SUFFIXES = {"counter": ("",), "gauge": ("",), "summary": ("_count", "_sum", ""),
             "histogram": ("_count", "_sum", "_bucket")}


class NotPlain(Exception):
    """A line the fast path does not read; the library parser reads the whole body."""


def parse(text: str) -> list[Metric]:
    """Families of a text-format body, as prometheus_client's parser yields them."""
    return parse_plain(text) or parse_library(text)


def parse_library(text: str) -> list[Metric]:
    """prometheus_client's own reading (for a body parse_plain gave up on)."""
    return list(text_string_to_metric_families(text))


def parse_plain(text: str) -> list[Metric] | None:
    """The families of a body whose every line is plain, else None."""
    try:
        return list(_plain(text))
    except NotPlain:
        return None


def number(s: str) -> float:
    """A sample's value as the library reads it; NotPlain for what only it reads."""
    if "_" in s:
        raise NotPlain
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            raise NotPlain from None


def _build(name: str, doc: str, typ: str, samples: list[Sample]) -> Metric:
    if typ == "counter":  # the library's OpenMetrics munging of counters
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [Sample(s.name + "_total", *s[1:]) for s in samples]
    metric = Metric(name, doc, typ)
    metric.samples = samples
    return metric


def _plain(text: str) -> Iterator[Metric]:
    """The library's family state machine (text_fd_to_metric_families), fast lines."""
    name, doc, typ = "", "", "untyped"
    samples: list[Sample] = []
    allowed: tuple[str, ...] = ()
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            if "\\" in line or '"' in line:
                raise NotPlain
            parts = _WS.split(line, 3)  # at ASCII whitespace only, as the library does
            if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
                continue  # another comment
            kind, candidate = parts[1], parts[2]
            rest = parts[3] if len(parts) > 3 else ""
            if not _NAME_RE.fullmatch(candidate):
                raise NotPlain
            if kind == "HELP":
                if "\\" in rest:
                    raise NotPlain
                if candidate != name:
                    if name:
                        yield _build(name, doc, typ, samples)
                    name, typ, samples, allowed = candidate, "untyped", [], (candidate,)
                doc = rest
            else:
                if not rest:
                    raise NotPlain
                if candidate != name:
                    if name:
                        yield _build(name, doc, typ, samples)
                    name, doc, samples = candidate, "", []
                typ = rest.strip()
                allowed = tuple(name + s for s in _SUFFIXES.get(typ, ("",)))
            continue
        m = _SAMPLE.fullmatch(line)
        if m is None:
            raise NotPlain
        sname, labels, value = m.group(1), m.group(2), m.group(3)
        if labels and "__" in labels:  # reserved label names: the library's own verdict
            raise NotPlain
        sample = Sample(sname, dict(_PAIR.findall(labels)) if labels else {}, number(value),
                        None)
        if sname in allowed:
            samples.append(sample)
        else:
            if name:
                yield _build(name, doc, typ, samples)
            name, doc, typ, samples, allowed = "", "", "untyped", [], ()
            yield _build(sname, "", "untyped", [sample])
    if name:
        yield _build(name, doc, typ, samples)
