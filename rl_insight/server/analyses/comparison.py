"""Run against run at the server: each run's rows (followed live, or read back from its
``rl_insight_step_*`` series in Prometheus), the candidate series it holds for each (the
trainer's scalars, engines, hardware: what the what-changed analysis gathers), their
configurations, through rl_insight/anatomy/compare.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from rl_insight.anatomy import compare
from rl_insight.anatomy.bound import PATH
from rl_insight.anatomy.rows import StepRow

Key = tuple[str, str]
ROW_FIELDS = ("step", "start_ns", "end_ns", "duration_s", "generate_s", "other_s",
              "weight_update_s", "overlap_s", "staleness", "phases", "waits", "requests",
              "culprit", "tail_share", "source")


class UnknownRun(LookupError):
    """A run with no final step on this server nor in its Prometheus (its name)."""


def slim(row: StepRow) -> dict:
    """A row as the step time and the parts read it: step, duration, path."""
    return {"step": row.step, "duration_s": row.duration_s, "start_ns": row.start_ns,
            "end_ns": row.end_ns,
            "bound": None if row.bound is None else
            {"path": dict(zip(PATH, row.bound.path, strict=True))}}


def lean(row: StepRow) -> dict:
    """A row as the comparison reads it: its figures, each replica's generating time,
    each role's, and its accounting without the per-replica split (a week of 128
    replicas is 10,000 rows: no more dicts per row than the comparison reads)."""
    out = {k: getattr(row, k) for k in ROW_FIELDS}
    out["replicas"] = {k: {"generate_s": v.generate_s} for k, v in row.replicas.items()}
    out["roles"] = {k: {"generate_s": v.generate_s} for k, v in row.roles.items()}
    out["bound"] = None if row.bound is None else row.bound.as_dict(replicas=False)
    return out


class Comparison:
    """Compares two runs the server knows: ``rows`` (the anatomy's final rows of a run,
    None for one it does not hold), ``from_prometheus`` (a run's rows read back from its
    step series, [] when Prometheus has none), ``gather`` (the candidate series of a
    run's rows), ``config`` (a run's configuration and the diff of two, where kept)."""

    def __init__(self, rows: Callable[[str, str], list[StepRow] | None],
                 from_prometheus: Callable[[Key, float | None], list[dict]],
                 gather: Callable[[Key, list[dict], int | None], list],
                 config: Callable[[Key, Key], dict | None] = lambda a, b: None) -> None:
        self.rows = rows
        self.from_prometheus = from_prometheus
        self.gather = gather
        self.config = config

    def run_rows(self, key: Key, from_prometheus: bool = False
                 ) -> tuple[list, str] | None:
        """(rows, source) of a run: ``live`` (its StepRows) where the server follows it
        (unless ``from_prometheus``), else ``prometheus`` (dicts); None when neither has
        a step of it."""
        held = None if from_prometheus else self.rows(*key)
        if held:
            return held, "live"
        got = self.from_prometheus(key, time.time())
        return (got, "prometheus") if got else None

    def compare(self, a: Key, b: Key, steps_a: tuple[int, int] | None = None,
                steps_b: tuple[int, int] | None = None, align: str = "step",
                candidates: bool = True, from_prometheus: bool = False) -> dict:
        """B against A (UnknownRun naming a run with no step here or in Prometheus);
        ``from_prometheus``: both from their step series alone, as runs the server no
        longer follows."""
        got = {}
        for name, key in (("a", a), ("b", b)):
            rows = self.run_rows(key, from_prometheus)
            if rows is None:
                raise UnknownRun(f"{key[0]}/{key[1]}")
            got[name] = rows
        (ra, sa), (rb, sb) = got["a"], got["b"]
        ra, rb = _window(ra, steps_a), _window(rb, steps_b or steps_a)
        # every step of the window by its duration and path; every figure of at most
        # DETAILED of them (dicts for 10,000 steps of 128 replicas took seconds)
        da, db = (lean(r) if isinstance(r, StepRow) else r for r in compare.thin(ra)), \
            (lean(r) if isinstance(r, StepRow) else r for r in compare.thin(rb))
        da, db = list(da), list(db)
        ra = [slim(r) if isinstance(r, StepRow) else r for r in ra]
        rb = [slim(r) if isinstance(r, StepRow) else r for r in rb]
        note, aligned = "", None
        if align == "samples":
            aligned = compare.align_by_samples(da, db) if len(da) == len(ra) and \
                len(db) == len(rb) else None
            if aligned is None:
                note = ("aligned by step: a run does not say its samples in most of its "
                        "steps (its engines trace no requests), or it has more steps than "
                        f"{compare.DETAILED}")
            else:
                da, db, guessed = aligned
                if guessed:
                    note = (f"{guessed} step(s) said no samples (their requests not traced):"
                            " each counted as its run's median step")
                keep_a, keep_b = {r["step"] for r in da}, {r["step"] for r in db}
                ra = [r for r in ra if r["step"] in keep_a]
                rb = [r for r in rb if r["step"] in keep_b]
        extra_a = self.gather(a, da, None) if candidates else []
        extra_b = self.gather(b, db, None) if candidates else []
        out = compare.compare(ra, rb, extra_a, extra_b, self.config(a, b), da, db)
        out["runs"] = {"a": _run(a, ra, sa), "b": _run(b, rb, sb)}
        out["align"] = "step" if align == "samples" and aligned is None else align
        if note:
            out["note"] = note
        return out


def _window(rows: list, steps: tuple[int, int] | None) -> list:
    if steps is None:
        return rows
    lo, hi = steps
    return [r for r in rows if lo <= (r.step if isinstance(r, StepRow) else r["step"]) <= hi]


def _run(key: Key, rows: list[Mapping], source: str) -> dict:
    return {"project": key[0], "experiment_name": key[1], "source": source,
            "steps": len(rows), "first_step": rows[0]["step"] if rows else None,
            "last_step": rows[-1]["step"] if rows else None}
