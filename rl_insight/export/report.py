"""`rl-insight report`: a run's step anatomy as a terminal table, CSV or JSON, from the
rows the server's /api/v1/anatomy answers."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence


def _s(v) -> str:
    return f"{v:.2f}"


def _pct(v) -> str:
    return f"{v:.0f}%"


COLUMNS = (  # (header, key, format) of the terminal table; a missing value prints "-"
    ("STEP", "step", str), ("TIME s", "duration_s", _s), ("ROLLOUT s", "generate_s", _s),
    ("SLOWEST", "slowest_replica", str), ("STRAGGLER", "straggler_ratio", _s),
    ("WEIGHTS s", "weight_update_s", _s), ("TRAIN s", "trainer_busy_s", _s),
    ("TRAIN IDLE", "trainer_idle_pct", _pct), ("ROLLOUT IDLE", "replica_idle_pct", _pct),
    ("OVERLAP s", "overlap_s", _s), ("STALE", "staleness", str),
)


def flat(row: dict) -> dict:
    """One row as flat columns: phases and replicas spread out, shares in percent."""
    out = {k: v for k, v in row.items() if k not in ("phases", "replicas", "roles")}
    d = row["duration_s"] or 0.0
    out["trainer_idle_pct"] = 100 * row["trainer_idle_s"] / d if d else 0.0
    reps = row.get("replicas", {})
    out["replica_idle_pct"] = (100 * sum(r["idle_s"] for r in reps.values()) / len(reps) / d
                               if reps and d else None)
    for phase, seconds in sorted(row.get("phases", {}).items()):
        out[f"phase_{phase}_s"] = seconds
    for rep, v in reps.items():
        for k, value in v.items():
            out[f"replica_{rep}_{k}"] = value
    for role, v in row.get("roles", {}).items():
        for k, value in v.items():
            out[f"role_{role}_{k}"] = value
    return out


def table(rows: Sequence[dict]) -> str:
    """The per-step table, right-aligned under its headers; then the trainer's time per
    phase, a line per step, when there are phases."""
    flats = [flat(r) for r in rows]
    cells = [[h for h, _, _ in COLUMNS]] + [
        ["-" if r.get(k) is None else fmt(r[k]) for _, k, fmt in COLUMNS] for r in flats]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    roles = sorted({role for r in rows for role in r.get("roles", {})})
    if len(roles) > 1 or (roles and roles != ["rollout"]):
        # each role's own straggler: a teacher's slow replica is not the policy's
        lines += ["", "per role: generating s / slowest replica / straggler ratio: "
                  + ", ".join(roles)]
        for r in rows:
            cells = []
            for role in roles:
                v = r.get("roles", {}).get(role)
                cells.append("-" if v is None else
                             f"{v['generate_s']:.2f} / {v['slowest_replica'] or '-'} / "
                             + ("-" if v["straggler_ratio"] is None
                                else f"{v['straggler_ratio']:.2f}"))
            lines.append(f"{r['step']:>5}  " + "  ".join(cells))
    phases = sorted({p for r in rows for p in r.get("phases", {})})
    if phases:
        lines += ["", "trainer time per phase (s): " + ", ".join(phases)]
        for r in rows:
            lines.append(f"{r['step']:>5}  " + "  ".join(
                f"{r['phases'].get(p, 0.0):.2f}" for p in phases))
    return "\n".join(lines)


def to_csv(rows: Sequence[dict]) -> str:
    flats = [flat(r) for r in rows]
    keys: list[str] = []
    for r in flats:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(flats)
    return buf.getvalue()


def render(rows: Sequence[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(list(rows), indent=2)
    if fmt == "csv":
        return to_csv(rows)
    return table(rows)
