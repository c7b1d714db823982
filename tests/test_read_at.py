"""What each framework's table was read against, checked against what the suite pins, with
no network (issue 59, 7).

docs/frameworks.md's "read at" table says, per framework, the releases and commits its
table (rl_insight/frameworks/<name>.py) and adapter were read at. A release the suite
installs and drives (the Makefile's ``TRL_PACKAGES``, ``AREAL_PACKAGES``,
``SKYRL_PACKAGES``, ``OPENRLHF_PACKAGES``, verl's pin) or that a table's ``source`` names,
newer than every release its row names, means the framework moved past what was read:
the test fails and says which table to read again. A commit a table's ``source`` names must
be in its row (a table read again at a new commit moves its row with it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from rl_insight import frameworks
from tests.conftest import REPO

DOC = REPO / "docs" / "frameworks.md"
MAKEFILE = REPO / "Makefile"
HEADER = "| framework | read at |"
VERSION = re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+(?:\.post\d+)?)(?![\w.]*\d)")
COMMIT = re.compile(r"(?<![\w/.-])([0-9a-f]{7,40})(?![\w-])")


def _key(version: str) -> tuple[int, ...]:
    """A release's order (``2.9.0.post0`` after ``2.9.0``)."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


def versions(text: str) -> list[str]:
    return VERSION.findall(text)


def commits(text: str) -> list[str]:
    return [c for c in COMMIT.findall(text) if re.search(r"\d", c)]


def read_at(doc: str) -> dict[str, str]:
    """The "read at" table: framework title -> what it was read at."""
    rows: dict[str, str] = {}
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER)), None)
    if start is None:
        return rows
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2:
            rows[cells[0]] = cells[1]
    return rows


def pins(makefile: str) -> dict[str, str]:
    """Table name -> the release of the framework the Makefile installs: each
    ``<NAME>_PACKAGES`` list's own package (``TRL_PACKAGES`` -> ``trl==``), and verl's."""
    text = makefile.replace("\\\n", " ")
    out = {}
    for name, packages in re.findall(r"^(\w+)_PACKAGES\s*=\s*(.*)$", text, re.M):
        got = dict(re.findall(r"([\w.-]+)==([\w.]+)", packages))
        if name.lower() in got:
            out[name.lower()] = got[name.lower()]
    verl = re.search(r"\bverl==([\w.]+)", text)
    if verl:
        out["verl"] = verl.group(1)
    return out


def stale(name: str, title: str, source: str, rows: Mapping[str, str],
          pinned: str | None) -> list[str]:
    """What is wrong between one framework's pin, its table's ``source`` and its row,
    each said with what to do."""
    table = f"rl_insight/frameworks/{name}.py"
    row = rows.get(title)
    if row is None:
        return [f"docs/frameworks.md's 'read at' table has no row for {title}: add one naming "
                f"the release or commit {table} and its adapter were read at"]
    read = versions(row)
    newest = max(read, key=_key) if read else None
    out = []
    for what, version in ([("the Makefile installs", pinned)] if pinned else []) + [
            ("its table's source names", v) for v in versions(source)]:
        if newest is None or _key(version) > _key(newest):
            out.append(f"{title}: {what} {version}, newer than what docs/frameworks.md says "
                       f"was read ({row!r}): read {title} {version}'s source again against "
                       f"{table} and rl_insight/integrations/{name}.py, then move the table's "
                       "source and the 'read at' row to it")
    for commit in commits(source):
        if not any(c.startswith(commit) or commit.startswith(c) for c in commits(row)):
            out.append(f"{title}: {table}'s source names commit {commit}, which its 'read "
                       f"at' row ({row!r}) does not: name it in docs/frameworks.md's row if "
                       "the table was read there, else read the table again at the row's")
    return out


ROWS = read_at(DOC.read_text())
PINS = pins(MAKEFILE.read_text())


@pytest.mark.parametrize("name", sorted(frameworks.FRAMEWORKS))
def test_what_each_table_was_read_at_is_not_older_than_what_the_suite_pins(name):
    fw = frameworks.FRAMEWORKS[name]
    problems = stale(name, fw.title, fw.source, ROWS, PINS.get(name))
    assert not problems, "\n".join(problems)


def test_the_makefiles_frameworks_are_read_from_it():
    """Every framework release the suite installs is found (a renamed list would leave
    its framework unchecked)."""
    assert set(PINS) == {"trl", "areal", "skyrl", "openrlhf", "verl"}, PINS
    assert all(versions(v) for v in PINS.values()), PINS


def test_a_release_newer_than_what_was_read_fails_and_says_which_table():
    """The check on a made-up newer pin, a newer source and an unknown commit."""
    rows = {"TRL": "`trl` 1.16.0 (PyPI)", "ROLL": "alibaba/ROLL 8eb27cc2"}
    assert stale("trl", "TRL", "trl 1.16.0 trl/extras/profiling.py", rows, "1.16.0") == []
    newer = stale("trl", "TRL", "trl 1.16.0 trl/extras/profiling.py", rows, "1.17.0")
    assert len(newer) == 1 and "the Makefile installs 1.17.0" in newer[0], newer
    assert "rl_insight/frameworks/trl.py" in newer[0], newer
    assert stale("trl", "TRL", "trl 1.16.1 ...", rows, None)[0].startswith(
        "TRL: its table's source names 1.16.1")
    assert stale("roll", "ROLL", "alibaba/ROLL 8eb27cc2 roll/pipeline", rows, None) == []
    moved = stale("roll", "ROLL", "alibaba/ROLL 0a1b2c3d roll/pipeline", rows, None)
    assert len(moved) == 1 and "names commit 0a1b2c3d" in moved[0], moved
    assert "no row for verl" in stale("verl", "verl", "verl 0.9.1", rows, "0.9.1")[0]
