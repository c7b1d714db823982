"""An MoE model's expert load in a step: tokens per expert per layer, written on a phase
span as one compact string (``rank.expert_tokens``: ``"<layer>:<t0>,<t1>,...;<layer>:..."``,
the step's ranks summed) and read back into the step's row: per layer the tokens of each
expert, the most loaded expert of the step and its share of its layer's tokens. Plain
data; the files it comes from: :mod:`rl_insight.profiler.experts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

MAX_CELLS = 65_536  # layers x experts a string may carry (a 64-layer, 1,024-expert model)


def encode(layers: Mapping[int, Sequence[int]]) -> str:
    """Tokens per expert per layer as the span attribute's string."""
    return ";".join(f"{layer}:{','.join(str(int(t)) for t in tokens)}"
                    for layer, tokens in sorted(layers.items()))


def decode(text: str) -> dict[int, list[int]]:
    """The attribute's string read back; a malformed part is left out (what the server
    is sent is never trusted to be well formed)."""
    out: dict[int, list[int]] = {}
    cells = 0
    for part in str(text).split(";"):
        layer, _, tokens = part.partition(":")
        try:
            row = [max(0, int(t)) for t in tokens.split(",")]
            n = int(layer)
        except ValueError:
            continue
        cells += len(row)
        if cells > MAX_CELLS:
            break
        out[n] = row
    return out


def add(into: dict[int, list[int]], more: Mapping[int, Sequence[int]]) -> None:
    """Sum another set of loads into ``into`` (ranks' loads of one layer add up)."""
    for layer, tokens in more.items():
        have = into.setdefault(layer, [])
        if len(have) < len(tokens):
            have.extend([0] * (len(tokens) - len(have)))
        for i, t in enumerate(tokens):
            have[i] += int(t)


def summary(layers: Mapping[int, Sequence[int]]) -> dict:
    """The step's expert load: per layer its experts' tokens, and ``top``: the expert
    that took the largest share of its layer's tokens (``layer``, ``expert``, ``tokens``,
    ``share``, ``balanced``: the share each would take if the layer were balanced)."""
    out: dict = {"layers": {str(k): list(v) for k, v in sorted(layers.items())}, "top": None}
    best = None
    for layer, tokens in sorted(layers.items()):
        total = sum(tokens)
        if total <= 0 or not tokens:
            continue
        expert = max(range(len(tokens)), key=lambda i: (tokens[i], -i))
        share = tokens[expert] / total
        if best is None or share > best["share"]:
            best = {"layer": layer, "expert": expert, "tokens": tokens[expert],
                    "share": share, "balanced": 1.0 / len(tokens)}
    out["top"] = best
    return out


def from_evidence(evidences: Iterable[tuple[str, Mapping]], key: str) -> dict[str, dict]:
    """Per phase, the summary of the expert loads its spans carry (``evidences``: (phase,
    a span's evidence) pairs; several carrying one phase add up)."""
    per: dict[str, dict[int, list[int]]] = {}
    for phase, ev in evidences:
        text = ev.get(key)
        if text:
            add(per.setdefault(phase, {}), decode(text))
    return {phase: summary(layers) for phase, layers in sorted(per.items()) if layers}


def line(phase: str, s: Mapping) -> str:
    """The most loaded expert in a line for the report."""
    top = s.get("top")
    if not top:
        return f"experts in {phase}: no tokens counted"
    return (f"experts in {phase} ({len(s.get('layers') or {})} MoE layers): layer "
            f"{top['layer']}'s expert {top['expert']} took {100 * top['share']:.1f}% of "
            f"its layer's tokens ({top['tokens']:,}; balanced: "
            f"{100 * top['balanced']:.1f}% each)")
