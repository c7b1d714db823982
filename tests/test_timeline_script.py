"""scripts/timeline.py, the suite's own account of where its time went: each worker's
modules in order with the CPUs' busy share while each ran (scripts/cpu_busy.py's
samples), so a module that mostly waits shows, and the share over the whole run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import REPO


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_module_with_the_cpus_busy_share_while_it_ran(tmp_path: Path, capsys):
    t0 = 1_000.0
    rows = [  # worker, start, seconds, phase, node id
        ("gw0", t0, 10.0, "setup", "tests/test_a.py::test_one@world"),
        ("gw0", t0 + 10, 20.0, "call", "tests/test_a.py::test_two@world"),
        ("gw0", t0 + 30, 30.0, "call", "tests/test_b.py::test_three"),
        ("gw1", t0, 60.0, "call", "tests/test_c.py::test_four")]
    (tmp_path / "tl.tsv").write_text(
        "".join(f"{w}\t{s}\t{d}\t{p}\t{n}\n" for w, s, d, p, n in rows))
    # busy 90 % in the first 30 s, 20 % after (a sample covers the 2 s before it)
    (tmp_path / "cpu.tsv").write_text("".join(
        f"{t0 + t}\t{0.9 if t <= 30 else 0.2}\n" for t in range(2, 61, 2)))
    load("timeline").main(str(tmp_path / "tl.tsv"), str(tmp_path / "cpu.tsv"))
    out = capsys.readouterr().out.splitlines()
    a = next(x for x in out if x.endswith("tests/test_a.py"))
    b = next(x for x in out if x.endswith("tests/test_b.py"))
    c = next(x for x in out if x.endswith("tests/test_c.py"))
    assert "30 s  CPU  90%" in a and "30 s  CPU  20%" in b, out
    assert "CPU  55%" in c, out  # 15 samples at 90 %, 15 at 20 %
    assert out[-1] == "== the CPUs while pytest ran: busy  55%", out
    load("timeline").main(str(tmp_path / "tl.tsv"))  # without samples: no CPU column
    assert "CPU" not in capsys.readouterr().out


def test_the_sampler_reads_a_busy_share_between_0_and_1():
    total, idle = load("cpu_busy").totals()
    assert 0 <= idle <= total and total > 0
