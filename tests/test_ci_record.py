"""The record of timed runs (docs/ci-record.tsv) and its script: a run's figures read
from what `.ci/run` printed, as a local log and as `issues ci` quotes it; every recorded
line whole; the summary's streak and spare time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ci_record", ROOT / "scripts" / "ci_record.py")
ci_record = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ci_record)

RED = """
FAILED tests/test_security.py::test_every_write_route - assert 16 == 15
2 failed, 976 passed, 2 warnings, 15 errors in 1111.89s (0:18:31)
make: *** [Makefile:77: test] Error 1
== CI phases
python packages (setup)        149 s
system packages                  0 s
lint                             0 s
total                        1264 s
"""
GREEN = "754 passed, 3 warnings in 888.10s (0:14:48)\n== CI phases\ntotal 1062 s\n"


def test_a_red_run_read_as_printed_and_as_quoted():
    for text in (RED, "\n".join("> " + line for line in RED.splitlines())):
        row = ci_record.parse(text)
        assert (row["passed"], row["failed"], row["errors"], row["tests"]) == \
            ("976", "2", "15", "993")
        assert (row["pytest_s"], row["setup_s"], row["total_s"]) == ("1112", "149", "1264")
        assert row["result"] == "red"


def test_a_green_run_and_one_that_stopped_before_pytest_ended():
    row = ci_record.parse(GREEN.replace("total 1062 s", "total                        1062 s"))
    assert (row["result"], row["pytest_s"], row["total_s"]) == ("green", "888", "1062")
    cut = ci_record.parse("collecting ...\n== CI phases\ntotal                  30 s\n")
    assert cut["result"] == "red" and cut["pytest_s"] == "-"


def test_every_recorded_line_is_whole():
    rows = ci_record.read()
    assert len(rows) >= 20
    for row in rows:
        assert row["result"] in ("green", "red"), row
        assert row["where"] in ("clone", "ci") and row["load"], row
        for field in ("tests", "passed", "failed", "errors", "pytest_s", "total_s"):
            assert row[field] == "-" or row[field].isdigit(), (field, row)
        if row["result"] == "green":
            assert row["failed"] in ("0", "-") and row["errors"] in ("0", "-"), row


def test_append_and_summary(tmp_path, monkeypatch):
    record = tmp_path / "record.tsv"
    record.write_text("# header\n")
    monkeypatch.setattr(ci_record, "RECORD", record)
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(RED))
    assert ci_record.main(["add", "-", "--commit", "abc", "--note", "a\tb"]) == 0
    rows = ci_record.read()
    assert rows and rows[-1]["commit"] == "abc" and rows[-1]["note"] == "a b"
    for _ in range(2):
        row = ci_record.parse(GREEN.replace("total 1062 s", "total   1062 s"))
        row.update(when_utc="t", commit="c", where="clone", load="hog", note="")
        ci_record.append(row)
    lines = ci_record.summary(ci_record.read())
    assert lines[0].startswith("green in a row: 2 (of 3")
    # the slowest of the last five timed runs, red ones too: their time is the suite's
    assert lines[1] == "pytest: median 14:48, slowest 18:32 of the last 3; budget 20:00, " \
                       "88 s to spare"
    assert lines[2].startswith("total: median 17:42, slowest 21:04") and "236 s" in lines[2]
