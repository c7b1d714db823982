"""The suite's timed runs, one line each in docs/ci-record.tsv: ``add`` reads what a run
of `.ci/run` printed (a local clone's log, or `issues ci`'s copy of the project's CI) and
appends its line; ``show`` prints the last runs and what they say against the budgets
(pytest under 20 minutes, the whole run under 25; a green streak of fresh clones).

    bash .ci/run > /tmp/ci.log 2>&1
    .venv/bin/python scripts/ci_record.py add /tmp/ci.log --commit $(git rev-parse --short HEAD)
        [--where clone|ci] [--load none|hog|busy] [--note "..."]
    .venv/bin/python scripts/ci_record.py show [--last 10]
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "docs" / "ci-record.tsv"
FIELDS = ("when_utc", "commit", "where", "tests", "passed", "failed", "errors", "pytest_s",
          "total_s", "setup_s", "load", "result", "note")
PYTEST_BUDGET_S, TOTAL_BUDGET_S = 20 * 60, 25 * 60
# pytest's last line: "2 failed, 976 passed, 2 warnings, 15 errors in 1111.89s (0:18:31)"
SUMMARY = re.compile(r"^[>= ]*((?:\d+ \w+(?:, )?)+) in ([\d.]+)s", re.M)
PHASE = re.compile(r"^[> ]*(python packages \(setup\)|total)\s+(\d+) s$", re.M)


def parse(text: str) -> dict[str, str]:
    """A run's figures from what `.ci/run` printed; '-' for what it did not print (a run
    stopped before pytest ended has no summary)."""
    row = dict.fromkeys(FIELDS, "-")
    found = SUMMARY.findall(text)
    if found:
        counts, seconds = found[-1]
        got = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", counts)}
        passed, failed = got.get("passed", 0), got.get("failed", 0)
        errors = got.get("errors", got.get("error", 0))
        row.update(passed=str(passed), failed=str(failed), errors=str(errors),
                   tests=str(passed + failed + errors + got.get("skipped", 0)),
                   pytest_s=str(round(float(seconds))))
        row["result"] = "green" if failed == errors == 0 else "red"
    else:
        row["result"] = "red"
    for name, seconds in PHASE.findall(text):
        row["total_s" if name == "total" else "setup_s"] = seconds
    return row


def read() -> list[dict[str, str]]:
    """The record's lines as rows (comments left out)."""
    lines = [x for x in RECORD.read_text().splitlines() if x and not x.startswith("#")]
    padded = (line.split("\t") + [""] * len(FIELDS) for line in lines)
    return [dict(zip(FIELDS, cells[:len(FIELDS)], strict=True)) for cells in padded]


def append(row: dict[str, str]) -> None:
    """One line more; tabs and newlines in the note would break the table, so they go."""
    row = {k: re.sub(r"[\t\n]+", " ", row.get(k, "-") or "-") for k in FIELDS}
    with RECORD.open("a") as f:
        f.write("\t".join(row[k] for k in FIELDS) + "\n")


def minutes(seconds: str) -> str:
    return "-" if not seconds.isdigit() else f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def summary(rows: list[dict[str, str]]) -> list[str]:
    """What the last runs say: the green streak, and pytest's and the whole run's time
    against their budgets (the median and the slowest of the last five timed runs)."""
    streak = 0
    for row in reversed(rows):
        if row["result"] != "green":
            break
        streak += 1
    out = [f"green in a row: {streak} (of {len(rows)} recorded)"]
    for field, budget in (("pytest_s", PYTEST_BUDGET_S), ("total_s", TOTAL_BUDGET_S)):
        timed = [int(r[field]) for r in rows if r[field].isdigit()][-5:]
        if timed:
            worst = max(timed)
            out.append(f"{field[:-2]}: median {minutes(str(int(statistics.median(timed))))}, "
                       f"slowest {minutes(str(worst))} of the last {len(timed)}; budget "
                       f"{minutes(str(budget))}, {budget - worst} s to spare")
    return out


def show(last: int) -> None:
    rows = read()
    print("when              commit   where  tests  fail err  pytest  total  load  result")
    for r in rows[-last:]:
        print(f"{r['when_utc']:<17} {r['commit']:<8} {r['where']:<6} {r['tests']:>5}  "
              f"{r['failed']:>4} {r['errors']:>3}  {minutes(r['pytest_s']):>6} "
              f"{minutes(r['total_s']):>6}  {r['load']:<5} {r['result']}"
              + (f"  {r['note']}" if r["note"] not in ("", "-") else ""))
    print("\n".join(summary(rows)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="append a run's line from its printed output")
    add.add_argument("log", help="the file .ci/run's output went to ('-': standard input)")
    add.add_argument("--commit", default="-")
    add.add_argument("--where", default="clone", choices=("clone", "ci"))
    add.add_argument("--load", default="none",
                     help="what ran beside it: none, hog (one core kept busy), busy")
    add.add_argument("--note", default="")
    add.add_argument("--when", default=None, help="UTC time of its start (default: now)")
    sh = sub.add_parser("show", help="the last runs and the budgets")
    sh.add_argument("--last", type=int, default=10)
    args = ap.parse_args(argv)
    if args.command == "show":
        show(args.last)
        return 0
    text = sys.stdin.read() if args.log == "-" else Path(args.log).read_text(errors="replace")
    row = parse(text)
    if row["pytest_s"] == "-":
        print(f"ci_record: no pytest summary in {args.log}; the run is recorded as red "
              "with no time (did it stop before pytest ended?)", file=sys.stderr)
    when = args.when or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M")
    row.update(when_utc=when, commit=args.commit, where=args.where, load=args.load,
               note=args.note)
    append(row)
    show(3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
