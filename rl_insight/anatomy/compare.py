"""Run against run: what differs between two runs, ranked by what it cost.

Plain data in (each run's step rows as ``/api/v1/anatomy`` gives them, the candidate
series the server holds for each, their configurations), plain data out; no clock, no
I/O. Three answers:

- **the step time**: each run's median, p90 and mean over its window, their difference,
  and whether it is *significant* given each run's own spread: a two-sided Mann-Whitney U
  test (no shape assumed; a slow step now and then moves nothing) at ``ALPHA``, and at
  least ``MIN_RELATIVE`` of A's median (a real but negligible difference is not worth
  acting on). The rate at which two runs differing only in their seed are called
  different is measured in tests/test_compare.py and written in docs/anatomy.md;
- **what accounts for it**: the mean step's path (rl_insight/anatomy/bound.py: the
  rollout alone, its tail, training alone, both, other roles, the weight sync,
  validation, other) adds up to the mean step, so the parts' differences add up to the
  mean step's difference exactly; each part with its share, ranked by the seconds it
  cost, and under it the detail that moved most (a replica's generation, a phase, a
  named wait);
- **what moved with it**: every series the server holds for both runs (trainer scalars,
  the steps' request statistics, each replica's engine metrics, each node's hardware, the
  weight sync) through the same association the what-changed analysis uses
  (rl_insight/anatomy/association.py), A's steps as the "before" and B's as the "after";

and side by side: throughput (samples and tokens a second), request latencies where
traced, each run's culprit ranks and the verdict of which side bounds it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from rl_insight.anatomy import association, verdict
from rl_insight.anatomy import bound as b
from rl_insight.anatomy.explain import parts as step_parts

ALPHA = 0.01  # the Mann-Whitney test's two-sided level
MIN_RELATIVE = 0.02  # a difference under this share of A's median is not worth acting on
MIN_STEPS = 5  # fewer steps on either side: no verdict on significance
DETAIL = 3  # the details shown under each part
# the steps of a window the details, what moved and the side-by-side figures read, evenly
# spaced (a week of one-minute steps is 10,000: the step time and the parts read them all)
DETAILED = 1000


def _q(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


EXACT = 400  # n1 x n2 up to this: the exact distribution of U (no ties), else normal


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U of A, two-sided p): exact for small samples without ties (a week's windows of
    five steps each are decided on complete separation, p = 2/252), else the normal
    approximation with its tie correction. No distribution assumed: one slow step
    weighs no more than any other."""
    n1, n2 = len(a), len(b)
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2.0 + 1.0
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u = r1 - n1 * (n1 + 1) / 2.0
    if n1 and n2 and not ties and n1 * n2 <= EXACT:
        return u, _exact_p(u, n1, n2)
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return u, 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return u, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def _exact_p(u: float, n1: int, n2: int) -> float:
    """Two-sided p of U under no difference: the arrangements of the two samples with a
    U as far from its mean, over all (n1 + n2 choose n1) of them. Counted by the largest
    value: A's (it is above all n2 values of B: U + n2) or B's (U unchanged)."""
    # f[j][k]: arrangements of m values of A and j of B with U = k, for the current m
    f = [[1] for _ in range(n2 + 1)]  # m = 0: U is 0 whatever j
    for m in range(1, n1 + 1):
        g = [[0] * (m * j + 1) for j in range(n2 + 1)]
        for j in range(n2 + 1):
            for k, c in enumerate(f[j]):  # the largest is A's: U + j
                if c:
                    g[j][k + j] += c
            if j:
                for k, c in enumerate(g[j - 1]):  # the largest is B's: U as with j - 1
                    if c:
                        g[j][k] += c
        f = g
    dist = f[n2]
    total = sum(dist)
    mid = n1 * n2 / 2.0
    far = abs(u - mid)
    return min(1.0, sum(c for k, c in enumerate(dist) if abs(k - mid) >= far - 1e-9) / total)


def step_time(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]) -> dict:
    """Each run's step time over its window, the difference, and its significance."""
    da = [r["duration_s"] for r in rows_a]
    db = [r["duration_s"] for r in rows_b]

    out = {"a": _q(da, 0.5), "b": _q(db, 0.5), "a_p90": _q(da, 0.9), "b_p90": _q(db, 0.9),
           "a_mean": statistics.fmean(da) if da else None,
           "b_mean": statistics.fmean(db) if db else None,
           "a_steps": len(da), "b_steps": len(db)}
    if not da or not db:
        return {**out, "diff_s": None, "diff_pct": None, "significant": None,
                "why": "a run has no final step in the window"}
    diff = out["b"] - out["a"]
    out.update(diff_s=diff, diff_pct=100.0 * diff / out["a"] if out["a"] else None,
               diff_mean_s=out["b_mean"] - out["a_mean"])
    if len(da) < MIN_STEPS or len(db) < MIN_STEPS:
        return {**out, "significant": None, "p_value": None,
                "why": f"fewer than {MIN_STEPS} steps on a side: too few to tell"}
    _, p = mann_whitney(da, db)
    big = abs(diff) >= MIN_RELATIVE * out["a"]
    sig = p < ALPHA and big
    if sig:
        why = (f"B's steps are {'slower' if diff > 0 else 'faster'} (p={p:.2g}, "
               f"{abs(out['diff_pct']):.1f}% of A's median)")
    elif p < ALPHA:
        why = (f"the runs differ (p={p:.2g}) by {abs(out['diff_pct']):.1f}% of A's median, "
               f"under the {100 * MIN_RELATIVE:g}% worth acting on")
    else:
        why = f"no significant difference (p={p:.2g}): within each run's own spread"
    return {**out, "significant": sig, "p_value": p, "why": why}


def _mean(rows: Sequence[Mapping], get) -> float:
    got = [get(r) for r in rows]
    got = [v for v in got if v is not None]
    return statistics.fmean(got) if got else 0.0


def _path(row: Mapping) -> Mapping[str, float] | None:
    bd = row.get("bound")
    return bd.get("path") if bd else None


def _means(rows: Sequence[Mapping], flat) -> dict[str, float]:
    """Each key's mean over the rows (a key a row lacks counts 0 there), one pass."""
    sums: dict[str, float] = {}
    for r in rows:
        for k, v in flat(r).items():
            sums[k] = sums.get(k, 0.0) + v
    n = len(rows) or 1
    return {k: v / n for k, v in sums.items()}


def _parts(row: Mapping) -> dict[str, float]:
    """A step's anatomy parts (explain.parts) and each replica's generating time."""
    got = dict(step_parts(row))
    for rep, v in row.get("replicas", {}).items():
        got[f"replica:{rep}"] = v.get("generate_s", 0.0)
    return got


def accounted(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping],
              detailed_a: Sequence[Mapping] | None = None,
              detailed_b: Sequence[Mapping] | None = None) -> list[dict]:
    """The mean step's parts, A against B, ranked by what their difference cost; each
    part's share of the mean step's difference (they add up to it), and its details
    (from ``detailed_*``, the rows with every figure, where the caller thinned them)."""
    with_a = [r for r in rows_a if _path(r)]
    with_b = [r for r in rows_b if _path(r)]
    if not with_a or not with_b:
        return []
    total = _mean(rows_b, lambda r: r["duration_s"]) - _mean(rows_a, lambda r: r["duration_s"])
    pa, pb = _means(with_a, _path), _means(with_b, _path)
    da = _means([r for r in detailed_a or with_a if _path(r)], _parts)
    db = _means([r for r in detailed_b or with_b if _path(r)], _parts)
    out = []
    for part in b.PATH:
        a, bb = pa.get(part, 0.0), pb.get(part, 0.0)
        if a == 0 and bb == 0:
            continue
        d = bb - a
        # the detail of the parts that moved: under the others it would repeat theirs
        moved_ = abs(d) >= max(0.01, 0.05 * abs(total))
        out.append({"part": part, "a": a, "b": bb, "diff_s": d,
                    "share": d / total if total else None,
                    "detail": _detail(part, da, db) if moved_ else []})
    out.sort(key=lambda e: -abs(e["diff_s"]))
    return out


# which of a step's anatomy parts (explain.parts) tell each path part apart
_DETAIL = {b.ROLLOUT: ("generate:", "replica:"), b.TAIL: ("replica:", "generate:"),
           b.TRAINING: ("phase:",), b.OVERLAP: ("phase:", "generate:"),
           b.OTHER_ROLES: ("generate:",), b.SYNC: ("phase:update_weights", "wait:"),
           b.VALIDATION: ("phase:validation",), b.OTHER: ("other", "wait:")}


def _detail(part: str, means_a: Mapping[str, float], means_b: Mapping[str, float]
            ) -> list[dict]:
    """The anatomy's own parts (a replica's generation, a phase, a named wait) that moved
    most within a path part, A against B (their means)."""
    prefixes = _DETAIL.get(part, ())
    out = []
    for k in {*means_a, *means_b}:
        if k.startswith(prefixes):
            a, bb = means_a.get(k, 0.0), means_b.get(k, 0.0)
            if a or bb:
                out.append({"part": k, "a": a, "b": bb, "diff_s": bb - a})
    out.sort(key=lambda e: -abs(e["diff_s"]))
    return out[:DETAIL]


def moved(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping],
          extra_a: Iterable[association.Candidate] = (),
          extra_b: Iterable[association.Candidate] = ()) -> list[dict]:
    """What moved with the step time from A to B: A's steps as the what-changed
    analysis's "before" and B's as its "after", one run of steps A then B."""
    if len(rows_a) < association.MIN_STEPS or len(rows_b) < association.MIN_STEPS:
        return []
    first_a = {r["step"]: i + 1 for i, r in enumerate(rows_a)}
    first_b = {r["step"]: len(rows_a) + i + 1 for i, r in enumerate(rows_b)}
    joined = [{**r, "step": first_a[r["step"]]} for r in rows_a] + \
        [{**r, "step": first_b[r["step"]]} for r in rows_b]
    own, _ = association.from_rows(joined)
    series: dict[tuple, association.Candidate] = {}
    for cands, at in ((extra_a, first_a), (extra_b, first_b)):
        for c in cands:
            key = (c.name, c.kind, tuple(sorted(c.labels.items())))
            have = series.get(key)
            values = {at[s]: v for s, v in c.values.items() if s in at}
            if have is None:
                series[key] = association.Candidate(c.name, c.kind, values, dict(c.labels),
                                                    c.role)
            else:
                have.values.update(values)
    target = {r["step"]: r["duration_s"] for r in joined}
    onset = len(rows_a) + 1
    return association.rank({"onset_step": onset, "last_step": len(joined)}, target,
                            [*own, *series.values()], before_steps=len(rows_a),
                            top=2 * association.TOP)


def side_by_side(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]) -> dict:
    """Throughput, request latencies, culprit ranks and the verdict of each run."""
    out = {}
    for name, rows in (("a", rows_a), ("b", rows_b)):
        step = statistics.median(r["duration_s"] for r in rows) if rows else None
        samples = _med([_samples(r) for r in rows])
        tokens = _med([_tokens(r) for r in rows])
        culprits: dict[str, int] = {}
        for r in rows:
            c = r.get("culprit")
            if c:
                culprits[str(c["rank"])] = culprits.get(str(c["rank"]), 0) + 1
        latency = {}
        for role in {role for r in rows for role in r.get("requests", {})}:
            qs = [r["requests"][role] for r in rows if role in r.get("requests", {})]
            latency[role] = {k: _med([q.get(k) for q in qs])
                             for k in ("e2e_p50_s", "e2e_p90_s", "e2e_max_s",
                                       "queue_s_mean", "decode_s_mean")}
        bounded = verdict.bounded_rows(rows)
        acc = verdict.account(bounded) if bounded else None
        v = verdict.decide(acc) if acc else None
        out[name] = {"samples_per_s": samples / step if samples and step else None,
                     "tokens_per_s": tokens / step if tokens and step else None,
                     "samples_per_step": samples, "tokens_per_step": tokens,
                     "requests": latency, "culprits": culprits,
                     "verdict": v["verdict"] if v else None, "why": v["why"] if v else None,
                     # each role's GPU-seconds by cause, as shares of its GPUs' time
                     "gpus": {role: {c: x / r["total_gpu_seconds"]
                                     for c, x in r["gpu_seconds"].items()}
                              for role, r in (acc or {}).get("roles", {}).items()
                              if r.get("total_gpu_seconds")},
                     "staleness": _med([r.get("staleness") for r in rows]),
                     "overlap_s": _med([r.get("overlap_s") for r in rows])}
    return out


def _med(values: Iterable) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _samples(row: Mapping) -> float | None:
    i = (row.get("bound") or {}).get("inputs") or {}
    if i.get("samples") is not None:
        return i["samples"]
    q = row.get("requests", {}).get("rollout")
    return q.get("requests") if q else None


def _tokens(row: Mapping) -> float | None:
    i = (row.get("bound") or {}).get("inputs") or {}
    if i.get("tokens") is not None:
        return i["tokens"]
    q = row.get("requests", {}).get("rollout")
    return q.get("completion_tokens") if q else None


def align_by_samples(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]
                     ) -> tuple[list[Mapping], list[Mapping], int] | None:
    """The two windows over the same samples consumed (runs whose batch differs): each
    run's steps up to the samples the shorter of the two consumed, and how many steps
    said no samples and were counted as their run's median (a step whose requests were
    traced late or lost: its run's batch is the same each step); None where fewer than
    half of a run's steps say theirs."""
    def cumulative(rows) -> tuple[list[float], int] | None:
        said = [s for s in map(_samples, rows) if s is not None]
        if not said or 2 * len(said) < len(rows):
            return None
        typical = statistics.median(said)
        total, out = 0.0, []
        for r in rows:
            s = _samples(r)
            total += typical if s is None else s
            out.append(total)
        return out, len(rows) - len(said)
    ca, cb = cumulative(rows_a), cumulative(rows_b)
    if ca is None or cb is None:
        return None
    upto = min(ca[0][-1], cb[0][-1])
    return ([r for r, c in zip(rows_a, ca[0], strict=True) if c <= upto],
            [r for r, c in zip(rows_b, cb[0], strict=True) if c <= upto], ca[1] + cb[1])


def thin(rows: Sequence[Mapping], most: int = DETAILED) -> list[Mapping]:
    """At most ``most`` of the rows, evenly spaced (the first and last kept): the steps
    the details, what moved and the side-by-side figures are read from."""
    if len(rows) <= most:
        return list(rows)
    return [rows[round(i * (len(rows) - 1) / (most - 1))] for i in range(most)]


def compare(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping],
            extra_a: Iterable[association.Candidate] = (),
            extra_b: Iterable[association.Candidate] = (),
            config: Mapping | None = None, detailed_a: Sequence[Mapping] | None = None,
            detailed_b: Sequence[Mapping] | None = None) -> dict:
    """Run B against run A: the step time and its significance, what accounts for the
    difference and what moved with it, both runs side by side, their configurations.
    ``rows_*`` need only their step, duration and path (every step of the window);
    ``detailed_*`` every figure (at most DETAILED steps of it: :func:`thin`), else the
    rows thinned."""
    st = step_time(rows_a, rows_b)
    da = detailed_a if detailed_a is not None else thin(rows_a)
    db = detailed_b if detailed_b is not None else thin(rows_b)
    parts = [{"type": "part", **p} for p in accounted(rows_a, rows_b, da, db)]
    went = [{"type": "moved", **m} for m in moved(da, db, extra_a, extra_b)] \
        if st["significant"] else []
    return {"step_time": st, "significant": st["significant"], "why": st["why"],
            "differences": parts + went, "side_by_side": side_by_side(da, db),
            "config": config,
            "detailed_steps": {"a": len(da), "b": len(db)}}


def _s(v: float | None, unit: str = " s") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def _config_lines(config: Mapping | None) -> list[str]:
    """Two runs' configurations (rl_insight.runconfig.diff), the differing keys first."""
    if not config:
        return ["configuration: not kept for both runs (docs/client.md: how a run hands "
                "its configuration over)"]
    counts = config.get("counts", {})
    n = config["differing"]
    lines = [f"configuration: {n} key{'s differ' if n != 1 else ' differs'} "
             f"({counts.get('same', 0)} the same)"]
    differing = [k for k in config["keys"] if k["status"] != "same"]
    for k in differing[:20]:
        lines.append(f"  {k['key']}: {k.get('a', '-')} -> {k.get('b', '-')}"
                     + (" (a secret, masked)" if k.get("masked") else ""))
    if len(differing) > 20:
        lines.append(f"  ... {len(differing) - 20} more (--format json)")
    if not config.get("complete", True):
        lines.append("  (a run's configuration was cut to its bounds: a key only one "
                     "side has may be one the other's cut)")
    return lines


def render(r: Mapping) -> str:
    """The comparison as lines for a terminal."""
    ra, rb = r["runs"]["a"], r["runs"]["b"]

    def name(x: Mapping) -> str:
        return (f"{x['project']}/{x['experiment_name']} (steps {x['first_step']}-"
                f"{x['last_step']}{', from Prometheus' if x['source'] != 'live' else ''})")
    st = r["step_time"]
    lines = [f"run B {name(rb)} against run A {name(ra)}:"]
    if st["diff_s"] is None:
        return "\n".join(lines + [f"  {st['why']}"])
    lines.append(f"step time: A {_s(st['a'])} (p90 {_s(st['a_p90'])}), B {_s(st['b'])} "
                 f"(p90 {_s(st['b_p90'])}): {st['diff_s']:+.2f} s ({st['diff_pct']:+.1f}%)")
    lines.append(f"  {st['why']}")
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    parts = [d for d in r["differences"] if d["type"] == "part"]
    if parts:
        lines.append(f"what accounts for it (the mean step, {st['diff_mean_s']:+.2f} s):")
        for d in parts:
            share = "" if d["share"] is None else f"{100 * d['share']:4.0f}%"
            lines.append(f"  {d['diff_s']:+7.2f} s {share:>5}  {d['part']:<12} "
                         f"A {_s(d['a'])}, B {_s(d['b'])}")
            for x in d["detail"]:
                if abs(x["diff_s"]) >= 0.005:
                    lines.append(f"      {x['diff_s']:+.2f} s  {x['part']}")
    went = [d for d in r["differences"] if d["type"] == "moved"]
    if went:
        lines.append("what moved with it:")
        for i, m in enumerate(went, 1):
            at = " ".join(f"{k}={v}" for k, v in m["labels"].items() if k != "role")
            pct = f" ({m['change_pct']:+.0f}%)" if m.get("change_pct") is not None else ""
            lines.append(f"  {i}. {m['name']}{' [' + at + ']' if at else ''}: "
                         f"{m['before']:.4g} -> {m['after']:.4g}{pct}, correlation "
                         f"{m['correlation']:+.2f}{' (a symptom)' if m['role'] != 'cause' else ''}")
    side = r["side_by_side"]
    lines.append(f"{'side by side':<26}{'A':>16}{'B':>16}")
    for label, key, fmt in (("samples a second", "samples_per_s", "{:.2f}"),
                            ("tokens a second", "tokens_per_s", "{:,.0f}"),
                            ("samples a step", "samples_per_step", "{:.0f}"),
                            ("overlap a step (s)", "overlap_s", "{:.2f}"),
                            ("staleness", "staleness", "{:.0f}"),
                            ("which side bounds it", "verdict", "{}")):
        a, bb = side["a"].get(key), side["b"].get(key)
        if a is None and bb is None:
            continue
        cells = ["-" if v is None else fmt.format(v) for v in (a, bb)]
        lines.append(f"  {label:<24}{cells[0]:>16}{cells[1]:>16}")
    for role in sorted(set(side["a"].get("gpus", {})) | set(side["b"].get("gpus", {}))):
        ga, gb = side["a"]["gpus"].get(role, {}), side["b"]["gpus"].get(role, {})
        cells = [f"{100 * g.get('busy', 0.0):.0f}% busy" if g else "-" for g in (ga, gb)]
        lines.append(f"  {role + ' GPUs':<24}{cells[0]:>16}{cells[1]:>16}")
    for role in sorted(set(side["a"]["requests"]) | set(side["b"]["requests"])):
        qa, qb = side["a"]["requests"].get(role, {}), side["b"]["requests"].get(role, {})
        lines.append(f"  {role + ' request p90 (s)':<24}{_s(qa.get('e2e_p90_s'), ''):>16}"
                     f"{_s(qb.get('e2e_p90_s'), ''):>16}")
    for name_, s in (("A", side["a"]), ("B", side["b"])):
        if s["culprits"]:
            ranks = ", ".join(f"rank {k} in {n} step{'s' if n != 1 else ''}"
                              for k, n in sorted(s["culprits"].items(), key=lambda kv: -kv[1]))
            lines.append(f"  {name_}'s steps waited for {ranks}")
    return "\n".join(lines + _config_lines(r.get("config")))


def to_csv(r: Mapping) -> str:
    """The ranked differences, a line each (the parts, then what moved with it)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["type", "what", "a", "b", "diff", "share_of_difference"])
    for d in r["differences"]:
        if d["type"] == "part":
            w.writerow(["part", d["part"], d["a"], d["b"], d["diff_s"], d["share"]])
        else:
            w.writerow(["moved", d["name"] + "".join(f"[{k}={v}]" for k, v in
                                                      d["labels"].items()),
                        d["before"], d["after"], d["after"] - d["before"],
                        d.get("accounts_for")])
    return buf.getvalue()
