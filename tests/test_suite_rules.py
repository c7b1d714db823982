"""Rules the test suite keeps, checked over its own source (and the Python scripts it
embeds in strings for drivers and workers):

- a ``with pytest.raises(...)`` block holds one statement: a second one never runs
  once the first raised, so its assertion would be dead;
- no bare ``time.sleep`` of a second or more standing for "long enough": wait on a
  condition with a deadline (``tests.conftest.wait_for``). A process body that must just
  stay alive says so on the line with ``# not a wait``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
NOT_A_WAIT = "# not a wait"


def sources() -> Iterator[tuple[str, str]]:
    """(where, Python source) of every test file and of every embedded script."""
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():  # its own examples break the rules on purpose
            continue
        text = path.read_text()
        rel = str(path.relative_to(TESTS.parent))
        yield rel, text
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    "\n" in node.value and "import " in node.value:
                try:
                    ast.parse(node.value)
                except SyntaxError:
                    continue
                yield f"{rel}:{node.lineno} (embedded script)", node.value


def raises_blocks_with_more_than_one_statement(source: str) -> list[int]:
    bad = []
    for node in ast.walk(ast.parse(source)):
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
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "sleep" and node.args and \
                isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, (int, float)) and node.args[0].value >= 1 and \
                NOT_A_WAIT not in lines[node.lineno - 1]:
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


def test_the_soak_outlasts_its_load_at_every_length():
    """`make soak` runs 600 s of load: the heavy modules' 600 s deadline cut it off at its
    own end (pytest-timeout, 2026-12-04)."""
    from tests.reliability import test_soak

    marks = [m for m in test_soak.pytestmark if m.name == "timeout"]
    assert [m.args[0] for m in marks] == [test_soak.timeout_for(test_soak.SECONDS)]
    for seconds in (90.0, 600.0, 3600.0):
        assert test_soak.timeout_for(seconds) > seconds + 300, seconds
