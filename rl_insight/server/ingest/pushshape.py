"""A repeated push read once: lane actors and the hub push the same series of a group
every tick, only the values change.

A body's *shape* is its text with the value of every sample line cut off. The first
body of a shape is parsed and checked in full (``pushtext.parse_body``); what it gave,
less its values, is kept as a ``Shape``. A later push to the same group with the same
shape only has its values read: the same families, labels and checks follow from the
same lines, and the exposition's sample lines are the kept prefixes plus the new values
(``render_blocks`` writes them the same way). Anything not plain (library-parsed
bodies, repeated family names, unusual types) is never kept and always parsed in full.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from rl_insight.server.ingest.pushfamilies import Packed, label_pairs

Block = tuple[str, str, str]  # (# HELP line, # TYPE line, sample lines) of one name

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
    """What a body of one shape parsed to, less its values: per family, its fields, the
    names and labels of its samples (grouping applied) and their rendered prefixes; all
    tuples (pushfamilies), as the families filled from it are."""

    __slots__ = ("text", "families", "count")

    def __init__(self, text: str, families: tuple[tuple, ...]) -> None:
        self.text = text
        self.families = families
        self.count = sum(len(f[6]) for f in families)

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
            kept.append((fam.name, fam.type, fam.documentation, fam.unit,
                         tuple(s.name for s in fam.samples),
                         tuple(label_pairs(s.labels) for s in fam.samples),
                         tuple(prefix(s) for s in fam.samples), exposed, head, typ_line))
        return cls(text, tuple(kept))

    def fill(self, values: list[str], parse) -> tuple[Packed, dict[str, Block]]:
        """Families and rendered blocks for this shape's lines with ``values``; raises
        what ``parse`` raises on a value it does not read."""
        families: Packed = {}
        blocks: dict[str, Block] = {}
        i = 0
        for name, typ, doc, unit, names, labels, prefixes, exposed, head, typ_line \
                in self.families:
            numbers = []
            lines = []
            for pre in prefixes:
                number, shown = read_value(values[i], parse)
                i += 1
                numbers.append(number)
                lines.append(pre + shown + "\n")
            families[name] = (typ, doc, unit, names, labels, tuple(numbers))
            blocks[exposed] = (head, typ_line, "".join(lines))
        return families, blocks


_EXPOSED_SUFFIX = {"counter": "_total", "info": "_info"}  # as generate_latest names them


def exposed_name(fam: Metric) -> str:
    """The name a family is exposed under in the text format."""
    return fam.name + _EXPOSED_SUFFIX.get(fam.type, "")
