"""`rl-insight report --bound` and ``GET /api/v1/anatomy/bound``: the GPU accounting of a
window of steps, its verdict, the verdict over the run as it went, and what a change
would buy; and the same as lines for a terminal.

Plain data in (step rows as ``/api/v1/anatomy`` gives them), plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rl_insight.anatomy import bound as b
from rl_insight.anatomy import verdict, whatif

SEGMENT_STEPS = 20  # the verdict over the run as it went: one per this many steps


def report(rows: Sequence[Mapping], last: int = 0, add_replicas: int = 1,
           trainer_speedup: float = 2.0, replicas: Mapping | None = None) -> dict:
    """The window (the last ``last`` steps; 0: the whole run): its accounting, verdict
    and what-if; the whole run's verdict beside a window's; the verdict per stretch of
    SEGMENT_STEPS steps, neighbours with the same verdict joined. ``replicas``: the
    window's per-replica figures, summed by the caller (the rows then carry none)."""
    rows = verdict.bounded_rows(rows)
    window = rows[-last:] if last else rows
    acc = verdict.account(window, replicas)
    out = {**acc, **verdict.decide(acc),
           "what_if": whatif.predict(window, add_replicas, trainer_speedup),
           "overlaps": whatif.overlaps(window) if window else False}
    if last and len(rows) > len(window):
        whole = verdict.decide(verdict.account(rows))
        out["run"] = {"verdict": whole["verdict"], "why": whole["why"],
                      "steps": len(rows)}
    out["stretches"] = stretches(rows)
    return out


def stretches(rows: Sequence[Mapping], size: int = SEGMENT_STEPS) -> list[dict]:
    """The verdict of each stretch of ``size`` steps, neighbours with the same one joined:
    where the run changed sides."""
    out: list[dict] = []
    for i in range(0, len(rows), size):
        chunk = rows[i:i + size]
        v = verdict.decide(verdict.account(chunk))["verdict"]
        if out and out[-1]["verdict"] == v:
            out[-1]["last_step"] = chunk[-1]["step"]
        else:
            out.append({"first_step": chunk[0]["step"], "last_step": chunk[-1]["step"],
                        "verdict": v})
    return out


CAUSE_WORDS = {b.BUSY: "busy", b.SAMPLES: "waiting for samples",
               b.SLOWEST: "waiting for the slowest", b.TRAINER_WAIT: "waiting for the trainer",
               b.SYNC: "weight sync", b.ASLEEP: "asleep (offloaded)", b.STARTUP: "starting up",
               b.VALIDATION: "validation", b.OTHER: "other"}


def render(r: Mapping, project: str = "", experiment: str = "") -> str:
    """The report as lines for a terminal."""
    if not r.get("steps"):
        return f"{project}/{experiment}: no final step with a GPU accounting yet"
    lines = [f"which side bounds {project}/{experiment} (steps {r['first_step']}-"
             f"{r['last_step']}, {r['steps']} steps, median step {r['step_s']:.2f} s): "
             f"{r['verdict']}", f"  why: {r['why']}"]
    if r.get("run"):
        lines.append(f"  the whole run ({r['run']['steps']} steps): {r['run']['verdict']}")
    if len(r.get("stretches", [])) > 1:
        lines.append("  as the run went: " + "; ".join(
            f"steps {s['first_step']}-{s['last_step']} {s['verdict']}" for s in r["stretches"]))
    share = r.get("path_share", {})
    lines.append("where the wall time went (what the step waited on):")
    for part in b.PATH:
        if share.get(part, 0) >= 0.005:
            lines.append(f"  {100 * share[part]:5.1f}%  {part}")
    lines.append("GPU-seconds by role and cause (share of the role's GPUs x wall time):")
    for role, acc in sorted(r["roles"].items()):
        total = acc["total_gpu_seconds"] or 1.0
        gpus = f"{acc['gpus']:g} GPU{'s' if acc['gpus'] != 1 else ''}" + \
            ("" if acc["gpus_known"] else ", assumed")
        parts = ", ".join(f"{CAUSE_WORDS.get(c, c)} {100 * v / total:.0f}%"
                          for c, v in sorted(acc["gpu_seconds"].items(),
                                             key=lambda kv: -kv[1]) if v / total >= 0.005)
        lines.append(f"  {role} ({acc['lanes']} lane{'s' if acc['lanes'] != 1 else ''}, "
                     f"{gpus}): {parts}")
    if r.get("weight_sync", {}).get("gpu_seconds"):
        lines.append(f"  weight sync, all roles: {r['weight_sync']['gpu_seconds']:.0f} "
                     "GPU-seconds")
    lines.append("what a change would buy (predicted from the steps' critical path):")
    for w in r.get("what_if", []):
        if not w["known"]:
            lines.append(f"  {w['change']}: unknown ({w['why']})")
            continue
        thr = ""
        if w.get("samples_per_s") is not None:
            thr = f", {w['samples_per_s']:.2f} samples/s"
        if w.get("tokens_per_s") is not None:
            thr += f", {w['tokens_per_s']:,.0f} tokens/s"
        gain = "" if w["kind"] == whatif.AS_IS else f" ({w['speedup']:.2f}x)"
        lines.append(f"  {w['step_s']:7.2f} s a step{gain}{thr}  {w['change']}")
    for m in r.get("missing", []):
        lines.append(f"  note: {m}")
    return "\n".join(lines)
