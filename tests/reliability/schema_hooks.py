"""Schemathesis hooks: the server's schema names its push bodies' format
(``prometheus-text``, rl_insight/server/routes/schema.py); this writes bodies in it, so a
generated push is a valid one and the run tests the server, not the generator."""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

NAME = st.from_regex(r"\A[a-zA-Z_][a-zA-Z0-9_]{0,15}\Z")
LABEL = st.from_regex(r"\A[a-zA-Z][a-zA-Z0-9_]{0,10}\Z")  # not __reserved, not job
# min_size 1: an empty value is no label at all
VALUE = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
NUMBER = st.floats(allow_nan=False, allow_infinity=False, width=32)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@st.composite
def exposition(draw) -> str:
    """Gauge families with distinct names, each with samples of distinct label sets."""
    lines = []
    names = draw(st.lists(NAME, min_size=0, max_size=4, unique=True))
    for i, base in enumerate(names):
        name = f"st{i}_{base}"  # distinct, and never a name the server exposes itself
        lines.append(f"# TYPE {name} gauge")
        label_sets = draw(st.lists(st.dictionaries(LABEL, VALUE, max_size=3), min_size=1,
                                   max_size=3, unique_by=lambda d: tuple(sorted(d.items()))))
        for labels in label_sets:
            inner = ",".join(f'l_{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{inner}}} {draw(NUMBER)!r}" if inner
                         else f"{name} {draw(NUMBER)!r}")
    return "".join(line + "\n" for line in lines)


@st.composite
def promql(draw) -> str:
    """A PromQL expression Prometheus parses: a selector, maybe in a function or a sum."""
    metric = draw(st.sampled_from(["up", "rl_insight_requests_total", "vllm:num_requests_running",
                                   draw(NAME)]))
    matcher = draw(st.sampled_from(["", '{job="x"}', '{project=~".+"}']))
    shape = draw(st.sampled_from(["{m}", "sum({m})", "rate({m}[1m])", "max by (job) ({m})",
                                  "{m} > 0", "count({m}) or vector(0)"]))
    return shape.format(m=metric + matcher)


schemathesis.openapi.format("prometheus-text", exposition())
schemathesis.openapi.format("promql", promql())
