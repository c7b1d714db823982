"""A repeated push read once: lane actors and the hub push the same series of a group
every tick, only the values change.

A body's *shape* is its text with the value of every sample line cut off. The first
body of a shape is parsed and checked in full (``pushstore.parse_body``); what it gave,
less its values, is kept as a ``Shape``. A later push to the same group with the same
shape only has its values read: the same families, labels and checks follow from the
same lines, and the exposition's sample lines are the kept prefixes plus the new values
(``render_blocks`` writes them the same way). Anything not plain (library-parsed
bodies, repeated family names, unusual types) is never kept and always parsed in full.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Block = tuple[str, str, str]  # (# HELP line, # TYPE line, sample lines) of one name
_NEW_SAMPLE = tuple.__new__

# value text -> (number, rendered); most values repeat (0, 1, small counts)
_VALUES: dict[str, tuple[float, str]] = {}
_MAX_VALUES = 50_000


def split(text: str) -> tuple[str, list[str]] | None:
    """(shape, value texts in line order), or None when a sample line has no space
    before its value (a tab: left to the full parser)."""
    parts: list[str] = []
    values: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            parts.append(line)
            continue
        i = line.rfind(" ")
        if i < 0:
            return None
        parts.append(line[:i])
        values.append(line[i + 1:])
    return "\n".join(parts), values


def read_value(text: str, parse) -> tuple[float, str]:
    """The number a value text holds (``parse`` is the full parser's own reading, which
    raises on anything it does not read) and its rendering in the exposition."""
    got = _VALUES.get(text)
    if got is None:
        number = parse(text)
        got = (number, floatToGoString(number))
        if len(_VALUES) >= _MAX_VALUES:
            _VALUES.clear()
        _VALUES[text] = got
    return got


class Shape:
    """What a body of one shape parsed to, less its values: per family, its fields and
    per sample the name, labels (grouping applied) and rendered prefix."""

    __slots__ = ("text", "families", "count")

    def __init__(self, text: str, families: list[tuple]) -> None:
        self.text = text
        self.families = families
        self.count = sum(len(f[4]) for f in families)

    @classmethod
    def of(cls, text: str, families: Sequence[Metric], blocks: dict[str, Block],
           prefix) -> Shape:
        """The shape of a fully parsed plain body (families in line order, each rendered
        line by line into ``blocks``); ``prefix(sample)`` is a sample line before its
        value."""
        kept = []
        for fam in families:
            exposed = exposed_name(fam)
            head, typ_line, _ = blocks[exposed]
            kept.append((fam.name, fam.documentation, fam.type, fam.unit,
                         [(s.name, s.labels, prefix(s)) for s in fam.samples],
                         exposed, head, typ_line))
        return cls(text, kept)

    def fill(self, values: list[str], parse) -> tuple[dict[str, Metric], dict[str, Block]]:
        """Families and rendered blocks for this shape's lines with ``values``; raises
        what ``parse`` raises on a value it does not read."""
        families: dict[str, Metric] = {}
        blocks: dict[str, Block] = {}
        i = 0
        for name, doc, typ, unit, samples, exposed, head, typ_line in self.families:
            metric = Metric.__new__(Metric)
            metric.name, metric.documentation, metric.type, metric.unit = name, doc, typ, unit
            got = []
            lines = []
            for sname, labels, pre in samples:
                number, shown = read_value(values[i], parse)
                i += 1
                got.append(_NEW_SAMPLE(Sample, (sname, labels, number, None, None, None)))
                lines.append(pre + shown + "\n")
            metric.samples = got
            families[name] = metric
            blocks[exposed] = (head, typ_line, "".join(lines))
        return families, blocks


_EXPOSED_SUFFIX = {"counter": "_total", "info": "_info"}  # as generate_latest names them


def exposed_name(fam: Metric) -> str:
    """The name a family is exposed under in the text format."""
    return fam.name + _EXPOSED_SUFFIX.get(fam.type, "")
