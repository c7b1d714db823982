"""Rules the test suite keeps, checked over its own source (and the Python scripts it
embeds in strings for drivers and workers):

- a ``with pytest.raises(...)`` block holds one statement: a second one never runs
  once the first raised, so its assertion would be dead;
- no bare ``time.sleep`` of a second or more standing for "long enough": wait on a
  condition with a deadline (``tests.conftest.wait_for``). A process body that must just
  stay alive says so on the line with ``# not a wait``;
- nor the same sleep cut into pieces: a loop that does nothing but sleep, and ends by a
  count, by the clock or never (``while time.monotonic() < deadline: time.sleep(0.2)``);
- no assertion of an elapsed wall-clock time against a constant
  (``assert time.monotonic() - t0 < 1.0``) without its measured noise beside it: a comment
  on the assertion, or right above it, saying ``measured`` and its figures (when, how many
  runs, beside what load, the spread); the same for a module's timing tolerance
  (``CLOSE_S``, ``TOLERANCE``, ``SLACK_S``: a name with TOLERANCE, CLOSE, SLACK, NOISE or
  MARGIN in it). The audit of 2026-12-07 (docs/development.md, "Timing assertions")
  measured them with ``bench/timing_noise.py``.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
NOT_A_WAIT = "# not a wait"
# a stated measurement: the word, then its figures (a date, a count of runs, a spread)
MEASURED = re.compile(r"\bmeasured\b.*\d", re.IGNORECASE)
CLOCKS = {"time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns"}
TOLERANCE_NAME = re.compile(r"TOLERANCE|CLOSE|SLACK|NOISE|MARGIN")


# each source parsed once for all the checks (the same string objects: sources() is read
# once), not once per check: the fast tier runs them all
_tree = functools.cache(ast.parse)


@functools.cache
def sources() -> tuple[tuple[str, str], ...]:
    """(where, Python source) of every test file and of every embedded script."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():  # its own examples break the rules on purpose
            continue
        text = path.read_text()
        rel = str(path.relative_to(TESTS.parent))
        found.append((rel, text))
        for node in ast.walk(_tree(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    "\n" in node.value and "import " in node.value:
                try:
                    _tree(node.value)
                except SyntaxError:
                    continue
                found.append((f"{rel}:{node.lineno} (embedded script)", node.value))
    return tuple(found)


def raises_blocks_with_more_than_one_statement(source: str) -> list[int]:
    bad = []
    for node in ast.walk(_tree(source)):
        if not isinstance(node, (ast.With, ast.AsyncWith)):
            continue
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                    call.func.attr == "raises" and len(node.body) != 1:
                bad.append(node.lineno)
    return bad


def long_bare_sleeps(source: str) -> list[int]:
    lines = source.splitlines()
    bad = []
    for node in ast.walk(_tree(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "sleep" and node.args and \
                isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, (int, float)) and node.args[0].value >= 1 and \
                NOT_A_WAIT not in lines[node.lineno - 1]:
            bad.append(node.lineno)
    return bad


def _is_clock(node: ast.AST) -> bool:
    """A call of one of ``time``'s clocks: time.monotonic(), __import__("time").time_ns(),
    or monotonic() imported by name."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Name):
        return f.id in CLOCKS - {"time"}
    if not (isinstance(f, ast.Attribute) and f.attr in CLOCKS):
        return False
    return (isinstance(f.value, ast.Name) and f.value.id == "time") or (
        isinstance(f.value, ast.Call) and getattr(f.value.func, "id", "") == "__import__")


def _is_elapsed(expr: ast.AST, names: set[str]) -> bool:
    """A difference of clock readings, or a name that holds one."""
    return any((isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and
                any(_is_clock(c) for c in ast.walk(n))) or
               (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(expr))


def _is_constant(expr: ast.AST) -> bool:
    """Numbers and module constants (UPPER_CASE names and their attributes): no call."""
    return not any(isinstance(n, ast.Call) or (isinstance(n, ast.Name) and
                                               not n.id.isupper()) for n in ast.walk(expr))


def _measured(lines: list[str], first: int, last: int) -> bool:
    """Whether lines first..last (1-based), or the comment block right above them, state a
    measurement."""
    if any(MEASURED.search(line) for line in lines[first - 1:last]):
        return True
    i = first - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        if MEASURED.search(lines[i]):
            return True
        i -= 1
    return False


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a module's or a function's own code, not of the functions in it."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def elapsed_against_constants(source: str) -> list[int]:
    """Assertions comparing an elapsed wall-clock time with a constant, no measured noise
    stated beside them."""
    scopes = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)
    tree, lines, bad = _tree(source), source.splitlines(), set()
    for scope in (n for n in ast.walk(tree) if isinstance(n, scopes)):
        own = list(_own_nodes(scope))
        if not any(isinstance(n, ast.Assert) for n in own):
            continue
        names = {t.id for n in own if isinstance(n, ast.Assign) and
                 _is_elapsed(n.value, set()) for t in n.targets if isinstance(t, ast.Name)}
        for node in own:
            if not isinstance(node, ast.Assert):
                continue
            for cmp in (c for c in ast.walk(node.test) if isinstance(c, ast.Compare)):
                sides = [cmp.left, *cmp.comparators]
                if any((_is_elapsed(a, names) and _is_constant(b)) or
                       (_is_elapsed(b, names) and _is_constant(a))
                       for a, b in zip(sides, sides[1:], strict=False)) and \
                        not _measured(lines, node.lineno, node.end_lineno):
                    bad.add(node.lineno)
    return sorted(bad)


def _only_sleeps(body: list[ast.stmt]) -> bool:
    """A loop body that does nothing but sleep (``sleep(0)``, a yield, is no wait)."""
    def sleep(stmt: ast.stmt) -> bool:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        call = call.value if isinstance(call, ast.Await) else call
        return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
            call.func.attr == "sleep" and not (
                call.args and isinstance(call.args[0], ast.Constant) and
                call.args[0].value == 0)
    stmts = [s for s in body if not isinstance(s, ast.Pass)]
    return bool(stmts) and all(sleep(s) for s in stmts)


def _ends_by_count_or_clock(loop: ast.AST) -> bool:
    """``for _ in range(n)``; ``while True``; ``while time.monotonic() < deadline``:
    nothing but a count or the clock ends it."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return isinstance(loop.iter, ast.Call) and getattr(loop.iter.func, "id", "") == "range"
    if not isinstance(loop, ast.While):
        return False
    test = loop.test
    if isinstance(test, ast.Constant):
        return True
    calls = [n for n in ast.walk(test) if isinstance(n, ast.Call)]
    return isinstance(test, ast.Compare) and bool(calls) and all(map(_is_clock, calls))


def sleeps_cut_into_pieces(source: str) -> list[int]:
    """Loops that only sleep until a count or the clock says stop: a fixed sleep."""
    lines = source.splitlines()
    return sorted(node.lineno for node in ast.walk(_tree(source))
                  if _ends_by_count_or_clock(node) and _only_sleeps(node.body) and
                  not any(NOT_A_WAIT in lines[n.lineno - 1] for n in (node, *node.body)))


def tolerances_without_measurement(source: str) -> list[int]:
    """Module constants named as a tolerance whose comment states no measurement."""
    lines, bad = source.splitlines(), []
    for node in _tree(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        if any(TOLERANCE_NAME.search(n) for n in names) and \
                not _measured(lines, node.lineno, node.end_lineno):
            bad.append(node.lineno)
    return bad


def test_every_pytest_raises_block_holds_one_statement():
    found = {where: lines for where, src in sources()
             if (lines := raises_blocks_with_more_than_one_statement(src))}
    assert not found, f"pytest.raises blocks with more than one statement: {found}"


def test_no_bare_sleep_stands_for_long_enough():
    found = {where: lines for where, src in sources() if (lines := long_bare_sleeps(src))}
    assert not found, ("time.sleep of 1 s or more (wait on a condition with wait_for, or "
                       f"mark a process body '{NOT_A_WAIT}'): {found}")


def test_no_sleep_is_cut_into_pieces():
    found = {where: lines for where, src in sources() if (lines := sleeps_cut_into_pieces(src))}
    assert not found, ("loops that only sleep until a count or the clock ends them (wait on "
                       f"a condition with wait_for, or mark them '{NOT_A_WAIT}'): {found}")


def test_no_elapsed_time_is_held_to_a_constant_without_its_measured_noise():
    found = {where: lines for where, src in sources()
             if (lines := elapsed_against_constants(src))}
    assert not found, ("an elapsed wall-clock time against a constant, no comment stating "
                       "its measured noise (\"measured <when>, <runs>: <spread>\"; "
                       f"bench/timing_noise.py measures it): {found}")


def test_every_timing_tolerance_states_its_measurement():
    found = {where: lines for where, src in sources()
             if (lines := tolerances_without_measurement(src))}
    assert not found, ("tolerances without the measurement they come from in their "
                       f"comment (\"measured <when>, <runs>: <spread>\"): {found}")


def test_the_checks_find_what_they_look_for():
    """Each check fails on the pattern it forbids (a check that finds nothing proves
    nothing)."""
    two = "import pytest\nwith pytest.raises(ValueError):\n    f()\n    g()\n"
    assert raises_blocks_with_more_than_one_statement(two) == [2]
    one = "import pytest\nwith pytest.raises(ValueError):\n    f()\n"
    assert raises_blocks_with_more_than_one_statement(one) == []
    assert long_bare_sleeps("import time\ntime.sleep(3)\n") == [2]
    assert long_bare_sleeps("import time\ntime.sleep(0.2)\n") == []
    assert long_bare_sleeps(f"import time\ntime.sleep(60)  {NOT_A_WAIT}: stays up\n") == []
    for loop in ("while time.monotonic() < deadline:", "for _ in range(40):", "while True:"):
        assert sleeps_cut_into_pieces(f"import time\n{loop}\n    time.sleep(0.2)\n") == [2]
    for loop in ("while not done():", "while time.monotonic() < deadline and not done():"):
        assert sleeps_cut_into_pieces(f"import time\n{loop}\n    time.sleep(0.2)\n") == []
    paced = "import time\nfor _ in range(40):\n    send()\n    time.sleep(0.02)\n"
    assert sleeps_cut_into_pieces(paced) == []  # a paced load, not a wait
    yields = ("import asyncio\nasync def f():\n    for _ in range(9):\n"
              "        await asyncio.sleep(0)\n")
    assert sleeps_cut_into_pieces(yields) == []
    timed = "import time\nt0 = time.monotonic()\nf()\nassert time.monotonic() - t0 < 1.0\n"
    assert elapsed_against_constants(timed) == [4]
    held = "import time\nt0 = time.perf_counter()\nf()\nwall = time.perf_counter() - t0\n" \
        "assert wall <= LIMIT_S + 0.5\n"
    assert elapsed_against_constants(held) == [5]
    stated = timed.replace("1.0\n", "1.0  # measured 2026-12-07, 20 runs: 0.20-0.21 s\n")
    assert elapsed_against_constants(stated) == []
    above = timed.replace("assert", "# measured 2026-12-07, 20 runs: 0.20-0.21 s\nassert")
    assert elapsed_against_constants(above) == []
    bare_word = timed.replace("1.0\n", "1.0  # what was measured\n")  # no figures
    assert elapsed_against_constants(bare_word) == [4]
    within = "import time\nt0 = time.time()\nx = f()\nassert x <= time.time() - t0\n"
    assert elapsed_against_constants(within) == []  # a bound from the run's own clock
    assert tolerances_without_measurement("CLOSE_S = 0.05  # near enough\n") == [1]
    assert tolerances_without_measurement(
        "# measured 2026-12-07, 10 runs: 31 ms at worst\nCLOSE_S = 0.05\n") == []
    assert tolerances_without_measurement("STEPS, SLACK_S = 6, 0.5\n") == [1]


def test_the_soak_outlasts_its_load_at_every_length():
    """`make soak` runs 600 s of load: the heavy modules' 600 s deadline cut it off at its
    own end (pytest-timeout, 2026-12-04)."""
    from tests.reliability import test_soak

    marks = [m for m in test_soak.pytestmark if m.name == "timeout"]
    assert [m.args[0] for m in marks] == [test_soak.timeout_for(test_soak.SECONDS)]
    for seconds in (90.0, 600.0, 3600.0):
        assert test_soak.timeout_for(seconds) > seconds + 300, seconds
