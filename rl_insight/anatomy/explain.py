"""Why was step N slow: its anatomy against the run's recent steps.

Plain data in (the step-anatomy rows as ``/api/v1/anatomy`` answers them), plain data
out. The baseline is the median of the ``baseline`` steps before N. Each part of a step
(each role's generation, each trainer phase, the driver's own time) is compared with
its baseline, and the parts ranked by how many seconds over it they cost. Inside the
costliest generation: the slowest replica, its requests' queueing, prefill and decode
against the baseline's, and the tail requests with their ids, token counts and trace
ids. Goodput says what the step cost: GPU-seconds busy and idle per role, tokens per
GPU-second, the share lost to the tail, and the GPU-hours over the baseline.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from rl_insight.anatomy.experts import line as expert_line
from rl_insight.anatomy.gpu import gpu_line
from rl_insight.anatomy.ranks import HIDDEN, profile_lines, where, why_rank, why_unclear

BASELINE_STEPS = 10
PHASES = ("queue", "prefill", "decode")


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _gpus(row: Mapping) -> float:
    """GPUs behind the step: its GPU-seconds over its duration (weight sync is ranks')."""
    d = row.get("duration_s") or 0.0
    total = sum(g.get("busy", 0.0) + g.get("idle", 0.0)
                for role, g in row.get("gpu_seconds", {}).items() if role != "weight_sync")
    total += row.get("gpu_seconds", {}).get("weight_sync", {}).get("busy", 0.0)
    return total / d if d else 0.0


def parts(row: Mapping) -> dict[str, float]:
    """The seconds of each part of a step: ``generate:<role>`` per replica role,
    ``phase:<rank state>`` per trainer phase (an enclosing one for its own share),
    ``wait:<timing key>`` where the framework times its waits, ``other`` (the driver's
    own time)."""
    out = {f"generate:{role}": v["generate_s"] for role, v in row.get("roles", {}).items()}
    out.update({f"phase:{p}": s for p, s in row.get("phases", {}).items()})
    # a phase told inside another (verl's train_batch in actor_update) is the outer's
    # time too: the outer counts for what it holds beyond it, so no time is a second cause
    for inner, outer in (row.get("enclosed") or {}).items():
        if f"phase:{inner}" in out and f"phase:{outer}" in out:
            out[f"phase:{outer}"] = max(0.0, out[f"phase:{outer}"] - out[f"phase:{inner}"])
    out.update({f"wait:{k}": s for k, s in row.get("waits", {}).items()})
    out["other"] = row.get("other_s", 0.0)
    return out


def explain(rows: Sequence[Mapping], step: int,
            baseline: int = BASELINE_STEPS) -> dict:
    """The explanation of ``step`` (KeyError when the rows do not hold it)."""
    by_step = {r["step"]: r for r in rows}
    row = by_step[step]
    before = [r for r in rows if r["step"] < step][-baseline:]
    base_parts: dict[str, float] = {}
    for key in {k for r in [row, *before] for k in parts(r)}:
        base_parts[key] = _median([parts(r).get(key, 0.0) for r in before]) or 0.0
    base_duration = _median([r["duration_s"] for r in before])
    out: dict = {"step": step, "duration_s": row["duration_s"],
                 "baseline_steps": [r["step"] for r in before],
                 "baseline_duration_s": base_duration,
                 "over_baseline_s": None if base_duration is None
                 else row["duration_s"] - base_duration}
    contributions = []
    for key, seconds in parts(row).items():
        delta = seconds - base_parts.get(key, 0.0)
        contributions.append({"part": key, "seconds": seconds,
                              "baseline_s": base_parts.get(key, 0.0), "over_s": delta})
    contributions.sort(key=lambda c: -c["over_s"])
    out["contributions"] = contributions
    top = next((c for c in contributions if c["part"].startswith("generate:")
                and c["over_s"] > 0), None)
    if top is not None:
        out["critical_path"] = _generation(row, before, top["part"].split(":", 1)[1])
    out["goodput"] = _goodput(row, base_duration)
    out["requests_dropped"] = row.get("requests_dropped", 0)
    out["source"] = row.get("source", "lanes")
    out["framework"] = row.get("framework")
    if row.get("buckets"):
        out["goodput"]["buckets"] = row["buckets"]
    for key in ("culprit", "ranks", "rank_median", "rank_evidence", "rank_unclear",
                "rank_count", "gpu_longest", "gpu_median", "gpu_ranks", "experts"):
        if row.get(key):
            out[key] = row[key]
    return out


HIDDEN_NOTE = ("the ranks met at its collectives and started together: who computed "
               "longer cannot be told from the phase's boundaries. Set "
               "TORCH_FR_BUFFER_SIZE=2000 in the workers' environment (torch's Flight "
               "Recorder) and each rank's arrivals will tell it")


def _code_hint(c: Mapping) -> str:
    """Where the culprit's code is seen: its profile while the run goes on, or (told by a
    profiler's files) the operators under its phase in the merged timeline."""
    if c.get("arrivals"):
        return (f"  (its code: rank {c['rank']}'s profiler file in Perfetto, the operators "
                f"under {c.get('phase') or 'the phase'}; every rank's kernels side by "
                "side: `rl-insight import ... --timeline FILE`)")
    return (f"  (its code: `rl-insight profile --rank {c['rank']}` with the run's "
            "--project and --experiment-name, while it is slow)")


def _rank_lines(e: Mapping) -> list[str]:
    """The rank the step waited for, and why; or why none can be named (a phase whose
    evidence disagrees says so, beside another phase's culprit too)."""
    unclear = [why_unclear(phase, u) for phase, u in (e.get("rank_unclear") or {}).items()]
    c = e.get("culprit")
    if c:
        return [f"the step waited for {where(c)}", f"  {why_rank(c)}",
                *("  " + line for line in profile_lines(e.get("profile")))] + \
            ([] if e.get("profile") else [_code_hint(c)]) + unclear
    if unclear:
        return unclear
    hidden = [p for p, how in (e.get("rank_evidence") or {}).items() if how == HIDDEN]
    if hidden:
        return [f"ranks in {', '.join(hidden)}: {HIDDEN_NOTE}"]
    if e.get("rank_count", 0) > 1:
        return [f"ranks: balanced ({e['rank_count']} ranks; none kept the others waiting)"]
    return []


def _generation(row: Mapping, before: Sequence[Mapping], role: str) -> dict:
    """Inside one role's generation: its slowest replica, its requests' phases against
    the baseline's, its tail requests."""
    r = row["roles"][role]
    out = {"role": role, "slowest_replica": r.get("slowest_replica"),
           "straggler_ratio": r.get("straggler_ratio"),
           "generate_s": r["generate_s"],
           "median_replica_generate_s": r.get("median_generate_s")}
    now = row.get("requests", {}).get(role)
    if not now:
        out["requests"] = None  # no engine request spans: the engines trace nothing
        return out
    base = [b["requests"][role] for b in before if role in b.get("requests", {})]
    compare = {}
    for phase in PHASES:
        key = f"{phase}_s_mean"
        compare[phase] = {"mean_s": now.get(key),
                          "baseline_mean_s": _median([b[key] for b in base
                                                      if b.get(key) is not None])}
    for key in ("e2e_p50_s", "e2e_max_s", "completion_tokens", "requests", "preemptions"):
        compare[key] = {"now": now.get(key),
                        "baseline": _median([b[key] for b in base if b.get(key) is not None])}
    out["requests"] = compare
    # what kept the slowest replica generating: its requests that finished last
    tail = row.get("critical", {}).get(role) or \
        [t for t in row.get("tail", []) if t.get("role") == role]
    base_tokens = _median([b["completion_tokens"] / b["requests"] for b in base
                           if b.get("requests")])
    for t in tail:
        t = dict(t)
        t["dominant_phase"] = max(((p, t.get(f"{p}_s") or 0.0) for p in PHASES),
                                  key=lambda kv: kv[1])[0]
        t["why"] = _why(t, base_tokens)
        out.setdefault("tail", []).append(t)
    if out.get("tail"):
        out["longest"] = max(out["tail"], key=lambda t: t["e2e_s"])
    return out


def _why(t: Mapping, base_tokens: float | None) -> str:
    """One line on a tail request: what made it long."""
    bits = []
    tokens = t.get("completion_tokens")
    if tokens and base_tokens and tokens > 4 * base_tokens:
        bits.append(f"generated {tokens:,} tokens ({tokens / base_tokens:.0f}x the usual "
                    f"{base_tokens:,.0f})")
    if t.get("preemptions"):
        bits.append(f"preempted {t['preemptions']} time(s)")
    phase = t["dominant_phase"]
    seconds = t.get(f"{phase}_s") or 0.0
    bits.append(f"most of its {t['e2e_s']:.1f}s in {phase} ({seconds:.1f}s)")
    return "; ".join(bits)


def _goodput(row: Mapping, base_duration: float | None) -> dict:
    gpus = _gpus(row)
    out = {"gpu_seconds": row.get("gpu_seconds", {}), "gpus": gpus,
           "tokens_per_gpu_second": row.get("tokens_per_gpu_second"),
           "tail_share": row.get("tail_share"),
           "generated_tokens": row.get("generated_tokens")}
    if base_duration is not None:
        out["gpu_hours_over_baseline"] = max(0.0, row["duration_s"] - base_duration) * \
            gpus / 3600
    return out


def render(e: Mapping) -> str:
    """The explanation as lines for a terminal."""
    lines = [f"step {e['step']}: {e['duration_s']:.2f}s"]
    if e["baseline_duration_s"] is None:
        lines[0] += " (no earlier step to compare with)"
    else:
        lines[0] += (f", {e['over_baseline_s']:+.2f}s against the median of steps "
                     f"{e['baseline_steps'][0]}-{e['baseline_steps'][-1]} "
                     f"({e['baseline_duration_s']:.2f}s)")
    if e.get("source") == "timing_keys":
        lines.append(f"(from {e.get('framework') or 'the framework'}'s timing keys: its parts "
                     "as it timed them, no replica breakdown)")
    lines.append("where the time went, most over the baseline first:")
    for c in e["contributions"]:
        if abs(c["over_s"]) < 0.005 and c["seconds"] < 0.005:
            continue
        lines.append(f"  {c['over_s']:+8.2f}s  {c['part']:<34} {c['seconds']:.2f}s "
                     f"(baseline {c['baseline_s']:.2f}s)")
    lines += _rank_lines(e)
    if e.get("gpu_longest"):
        lines.append(gpu_line(e["gpu_longest"], e.get("gpu_median") or {}))
    lines += [expert_line(phase, s) for phase, s in (e.get("experts") or {}).items()]
    cp = e.get("critical_path")
    if cp and cp.get("slowest_replica") is None:
        lines.append(f"critical path: {cp['role']} generation, as a whole (no replica lanes: "
                     "the framework's own rollout span or timing key)")
        cp = None
    if cp:
        ratio = cp.get("straggler_ratio")
        lines.append(f"critical path: {cp['role']} generation, slowest replica "
                     f"{cp['slowest_replica']}" + (f" ({ratio:.2f}x the median replica)"
                                                   if ratio else ""))
        req = cp.get("requests")
        if req is None:
            lines.append("  no engine request spans for this role (docs/requests.md: turn "
                         "on the engine's OTLP tracing)")
        else:
            for phase in PHASES:
                p = req[phase]
                if p["mean_s"] is not None:
                    base = "-" if p["baseline_mean_s"] is None else f"{p['baseline_mean_s']:.2f}s"
                    lines.append(f"  {phase:<8} mean {p['mean_s']:.2f}s per request "
                                 f"(baseline {base})")
            longest = cp.get("longest")
            if longest:
                lines.append(f"  longest: {longest['request_id'] or '?'}: {longest['why']}")
            for t in cp.get("tail", []):
                lines.append(f"  last to finish: {t['request_id'] or '?'} on replica "
                             f"{t['replica']}: "
                             f"{t['e2e_s']:.1f}s, {t.get('prompt_tokens') or 0:,} prompt + "
                             f"{t.get('completion_tokens') or 0:,} generated tokens; "
                             f"{t['why']} (trace {t['trace_id']})")
    if e.get("requests_dropped"):
        lines.append(f"  {e['requests_dropped']:,} request spans of this step were dropped "
                     "at the server (more than anatomy.max_requests_per_run waited for their "
                     "step): the request figures are short by these; raise it if memory "
                     "allows (docs/requests.md)")
    g = e["goodput"]
    if g["gpu_seconds"]:
        lines.append("goodput: " + ", ".join(
            f"{role} {v['busy']:.0f} busy / {v['idle']:.0f} idle GPU-s"
            for role, v in sorted(g["gpu_seconds"].items())))
        extra = []
        if g.get("tokens_per_gpu_second") is not None:
            extra.append(f"{g['tokens_per_gpu_second']:.1f} tokens per GPU-second")
        if g.get("tail_share") is not None:
            extra.append(f"{100 * g['tail_share']:.0f}% of the step waiting on the tail")
        if g.get("gpu_hours_over_baseline") is not None:
            extra.append(f"{g['gpu_hours_over_baseline']:.3f} GPU-hours over the baseline")
        if extra:
            lines.append("  " + "; ".join(extra))
    return "\n".join(lines)
