"""The noise of the suite's timing assertions: a pytest selection run N times (beside
busy loops, as on a loaded 2-core machine), every passing assertion recorded with the
values it compared, and per assertion the spread of those values. What
docs/development.md's "Timing assertions" table and the comments beside the assertions
quote (the audit of 2026-12-07); run it again before tightening a tolerance.

    .venv/bin/python -m bench.timing_noise run --runs 10 --hogs 1 --out /tmp/noise.jsonl \\
        -- tests/test_supervisor.py -k backoff
    .venv/bin/python -m bench.timing_noise report /tmp/noise.jsonl [--match test_ranks]

It is a pytest plugin too (``-p bench.timing_noise`` with ``-o
enable_assertion_pass_hook=true``, which ``run`` passes): each assertion that passes
appends a line (run, test, file:line, the assertion, pytest's explanation of it) to
``$TIMING_NOISE_LOG``. Assertions in loops give a line per pass: a run of six steps, six
samples. Integration modules run in the private network namespace, as ``make test`` runs
them. The rewritten test modules go to a cache of their own (PYTHONPYCACHEPREFIX):
pytest reuses a module rewritten without the hook otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG_ENV, RUN_ENV = "TIMING_NOISE_LOG", "TIMING_NOISE_RUN"
NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# the first line of pytest's explanation: "0.53 == 0.52 ± 0.05", "0.012 < 0.02"
COMPARED = re.compile(rf"^\(?({NUMBER}) (==|<=|>=|<|>) \(?({NUMBER})(?: ± ({NUMBER}))?")
# an elapsed time: "(14373.888 - 14373.676) < 1.0"
ELAPSED = re.compile(rf"^\(\(?({NUMBER}) - ({NUMBER})\)? (==|<=|>=|<|>) \(?({NUMBER})")


# a helper's verdict: "True\n +  where True = near(0.5312, 0.52)" (the numbers in its
# arguments as pytest shows them)
HELPER = re.compile(rf"^True\n.*where True = \w+\(({NUMBER}), ({NUMBER})\)", re.S)


def compared(expl: str) -> tuple[float, str, float, float | None] | None:
    """(a, the order, b, the tolerance of an approx) of an explanation's first line; of
    ``assert near(a, b)``, (a - b, "~", 0, None)."""
    if m := HELPER.search(expl):
        return float(m[1]) - float(m[2]), "~", 0.0, None
    if m := ELAPSED.match(expl):
        return float(m[1]) - float(m[2]), m[3], float(m[4]), None
    if m := COMPARED.match(expl):
        return float(m[1]), m[2], float(m[3]), None if m[4] is None else float(m[4])
    return None


# ------------------------------------------------------------------ the plugin (-p)

def _where(lineno: int) -> str | None:
    """file:line of the frame that asserted (the hook is called a few frames below it), if
    it is the project's code: the plugins pytest rewrites too (hypothesis) assert in
    their own loops, millions of times in a property test."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if frame.f_lineno == lineno and "_pytest" not in name and "pluggy" not in name:
            try:
                rel = Path(name).resolve().relative_to(REPO)
            except ValueError:
                return None
            return None if rel.parts[0].startswith(".") else f"{rel}:{lineno}"
        frame = frame.f_back
    return None


def pytest_assertion_pass(item, lineno: int, orig: str, expl: str) -> None:
    path = os.environ.get(LOG_ENV)
    if not path or (at := _where(lineno)) is None:
        return
    line = {"run": os.environ.get(RUN_ENV, ""), "test": item.nodeid, "at": at,
            "assert": orig, "expl": "\n".join(expl.splitlines()[:3])[:600] if expl else ""}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


# ------------------------------------------------------------------ run

def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(args: argparse.Namespace, pytest_args: list[str]) -> int:
    out = Path(args.out).resolve()
    env = {**os.environ, LOG_ENV: str(out), "PYTHONDONTWRITEBYTECODE": "",
           "PYTHONPYCACHEPREFIX": str(Path(args.pycache).resolve())}
    argv = [str(REPO / "scripts" / "private-net.sh"), sys.executable, "-m", "pytest", "-q",
            "-p", "bench.timing_noise", "-o", "enable_assertion_pass_hook=true",
            "-p", "no:cacheprovider", *pytest_args]
    failed = 0
    for i in range(1, args.runs + 1):
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.hogs)]
        before, t0 = load(), time.monotonic()
        try:
            r = subprocess.run(argv, env={**env, RUN_ENV: str(i)}, cwd=REPO,
                               capture_output=True, text=True)
        finally:
            for h in hogs:  # ours, by their pids
                h.kill()
                h.wait()
        tail = (r.stdout.strip().splitlines() or [""])[-1]
        print(f"run {i}/{args.runs}: exit {r.returncode} in {time.monotonic() - t0:.0f} s, "
              f"load {before} -> {load()}, {args.hogs} busy loop(s) beside: {tail}",
              flush=True)
        with open(out.with_suffix(".runs"), "a") as f:
            f.write(json.dumps({"run": i, "exit": r.returncode, "load_before": before,
                                "load_after": load(), "hogs": args.hogs,
                                "seconds": round(time.monotonic() - t0),
                                "tail": tail}) + "\n")
        if r.returncode:
            failed += 1
            (out.parent / f"{out.stem}.run{i}.log").write_text(r.stdout + r.stderr)
    return 1 if failed else 0


# ------------------------------------------------------------------ report

def report(path: str, match: str | None) -> None:
    """Per assertion: its passes, runs, and the spread of what it compared: for
    ``got == approx(want ± tol)`` the error got - want against tol; for ``a < b`` (and
    the other orders) a, and b when it moved."""
    by: dict[str, list[dict]] = defaultdict(list)
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        if match and match not in rec["at"] and match not in rec["test"]:
            continue
        by[rec["at"]].append(rec)
    for at in sorted(by, key=lambda a: (a.split(":")[0], int(a.rsplit(":", 1)[1]))):
        recs = by[at]
        runs = len({r["run"] for r in recs})
        parsed = [c for r in recs if (c := compared(r["expl"]))]
        head = f"{at}  {len(recs)} passes in {runs} runs: {recs[0]['assert'][:90]}"
        if not parsed:
            print(head + f"\n    e.g. {recs[0]['expl'][:120]}")
            continue
        a = [p[0] for p in parsed]
        b = [p[2] for p in parsed]
        if parsed[0][3] is not None:  # approx: the error against the tolerance
            err = [x - y for x, y in zip(a, b, strict=True)]
            tol = max(p[3] for p in parsed)
            print(head + f"\n    error {min(err):+.4g} .. {max(err):+.4g} "
                         f"(|max| {max(map(abs, err)):.4g} = "
                         f"{max(map(abs, err)) / tol:.0%} of ± {tol:.4g}), "
                         f"median {statistics.median(err):+.4g}")
        else:
            op = parsed[0][1]
            right = f"{min(b):.4g}" if min(b) == max(b) else f"{min(b):.4g} .. {max(b):.4g}"
            print(head + f"\n    {min(a):.4g} .. {max(a):.4g} (median "
                         f"{statistics.median(a):.4g}) {op} {right}")


def main() -> None:
    argv = sys.argv[1:]
    pytest_args: list[str] = []
    if "--" in argv:
        argv, pytest_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a pytest selection N times, recording")
    r.add_argument("--runs", type=int, default=10)
    r.add_argument("--hogs", type=int, default=1, help="busy loops beside each run")
    r.add_argument("--out", required=True, help="the JSONL the assertions go to")
    r.add_argument("--pycache", default="/tmp/timing-noise-pycache")
    s = sub.add_parser("report", help="the spread of each assertion's values")
    s.add_argument("path")
    s.add_argument("--match", help="only assertions whose file:line or test holds this")
    args = p.parse_args(argv)
    if args.command == "run":
        sys.exit(run(args, pytest_args))
    report(args.path, args.match)


if __name__ == "__main__":
    main()
