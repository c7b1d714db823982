"""`rl-insight report`: a run's step anatomy as a terminal table, CSV or JSON, from the
rows the server's /api/v1/anatomy answers."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

COLUMNS = (  # (header, key, format) of the terminal table
    ("STEP", "step", "{:>5}"), ("TIME s", "duration_s", "{:>7.2f}"),
    ("ROLLOUT s", "generate_s", "{:>9.2f}"), ("SLOWEST", "slowest_replica", "{:>7}"),
    ("STRAGGLER", "straggler_ratio", "{:>9.2f}"), ("WEIGHTS s", "weight_update_s", "{:>9.2f}"),
    ("TRAIN s", "trainer_busy_s", "{:>7.2f}"), ("TRAIN IDLE", "trainer_idle_pct", "{:>9.0f}%"),
    ("ROLLOUT IDLE", "replica_idle_pct", "{:>11.0f}%"), ("OVERLAP s", "overlap_s", "{:>9.2f}"),
    ("STALE", "staleness", "{:>5}"),
)


def flat(row: dict) -> dict:
    """One row as flat columns: phases and replicas spread out, shares in percent."""
    out = {k: v for k, v in row.items() if k not in ("phases", "replicas")}
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
    return out


def _cell(fmt: str, value) -> str:
    if value is None:
        return fmt.replace(".2f", "").replace(".0f%", "").format("-")
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return fmt.replace(".2f", "").replace(".0f%", "").format(str(value))


def table(rows: Sequence[dict]) -> str:
    """The per-step table; phases below it as one line per step when there are any."""
    flats = [flat(r) for r in rows]
    head = "  ".join(f"{h:>{len(_cell(f, 0))}}" for h, _, f in COLUMNS)
    lines = [head]
    for r in flats:
        lines.append("  ".join(_cell(f, r.get(k)) for _, k, f in COLUMNS))
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
