"""Families as the text exposition, a block per exposed name (HELP, TYPE, samples): what
a group caches and /metrics joins; plain families written line by line, anything
unusual by prometheus_client's generate_latest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from rl_insight.server.ingest.pushshape import Block, exposed_name

_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


_OM_SUFFIXES = ("_created", "_gsum", "_gcount")


def render_blocks(families: Iterable[Metric]) -> dict[str, Block]:
    """What ``split_blocks(render(families))`` gives, written directly for the families a
    push holds (checked names, no timestamps): a fraction of generate_latest's cost,
    which validates and escapes every name of every sample again. Anything unusual is
    rendered by generate_latest."""
    out: dict[str, tuple[str, str, list[str]]] = {}
    for fam in families:
        if not plain_family(fam):
            blocks = split_blocks(render([fam]).decode())
        else:
            name = exposed_name(fam)
            doc = fam.documentation.replace("\\", r"\\").replace("\n", r"\n")
            lines = [sample_prefix(sample) + floatToGoString(sample.value) + "\n"
                     for sample in fam.samples]
            blocks = {name: (f"# HELP {name} {doc}\n", f"# TYPE {name} {fam.type}\n",
                             "".join(lines))}
        for name, (h, t, body) in blocks.items():  # two collectors of one name: joined
            out.setdefault(name, (h, t, []))[2].append(body)
    return {name: (h, t, "".join(bodies)) for name, (h, t, bodies) in out.items()}


def plain_family(fam: Metric) -> bool:
    """Rendered line by line by render_blocks (else by generate_latest)."""
    return fam.type in _TYPES and not any(
        s.timestamp is not None or s.name in (fam.name + x for x in _OM_SUFFIXES)
        for s in fam.samples)


def sample_prefix(sample: Sample) -> str:
    """A sample's exposition line up to its value."""
    if sample.labels:
        pairs = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(sample.labels.items()))
        return f"{sample.name}{{{pairs}}} "
    return f"{sample.name} "


def _escape_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return v


def split_blocks(text: str) -> dict[str, Block]:
    """The text format split at each ``# HELP``: name -> (HELP, TYPE, samples)."""
    out: dict[str, list] = {}
    current: list | None = None
    for line in text.split("\n")[:-1]:  # at \n only: a HELP text may hold \r
        line += "\n"
        if line.startswith("# HELP "):
            current = out.setdefault(line.split(" ", 3)[2], [line, "", []])
        elif current is None:
            continue
        elif line.startswith("# TYPE "):
            current[1] = line
        else:  # joined once at the end: adding to a block's string copied it each line
            current[2].append(line)
    return {name: (b[0], b[1], "".join(b[2])) for name, b in out.items()}


class _Families:
    """Adapts a list of families to what generate_latest expects of a registry."""

    def __init__(self, families: Mapping[str, Metric] | Iterable[Metric]) -> None:
        self._families = list(families.values()) if isinstance(families, Mapping) \
            else list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(families: Iterable[Metric]) -> bytes:
    """The text exposition of families (the Prometheus text format 0.0.4)."""
    return generate_latest(_Families(list(families)))
