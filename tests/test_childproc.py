"""Children die with their parent without Python code between fork and exec: through
setpriv, and through the fallback stage where setpriv is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from rl_insight.server.services import supervisor
from tests.conftest import REPO, wait_for

PARENT = (
    "import subprocess, sys, time\n"
    "from rl_insight.common.childproc import die_with_parent\n"
    "p = subprocess.Popen(die_with_parent(['/bin/sleep', '120']))\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)  # not a wait: the parent stays up until the test kills it\n")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("path", [os.environ.get("PATH", ""), "/nonexistent"],
                         ids=["setpriv", "fallback"])
@pytest.mark.integration  # starts a process
def test_a_child_dies_when_its_parent_is_killed(path):
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env,
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    wait_for(lambda: alive(child) and open(f"/proc/{child}/cmdline").read().startswith(
        "/bin/sleep"), 10, "the child to exec /bin/sleep")
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    wait_for(lambda: not alive(child), 10, "the orphaned child to get SIGTERM and exit")


@pytest.mark.integration  # starts a process
def test_the_supervisor_runs_no_python_between_fork_and_exec(monkeypatch, tmp_path):
    seen = {}

    class Recorder:
        def __init__(self, argv, **kw):
            seen.update(kw, argv=argv)
            self.pid = 1

        def poll(self):
            return None

    monkeypatch.setattr(supervisor.subprocess, "Popen", Recorder)
    from rl_insight.config import SupervisorSettings
    from rl_insight.server.services.base import Launch

    child = supervisor.Child(Launch("x", ["/bin/true"], "http://127.0.0.1:1/", 1),
                             tmp_path / "x.log", SupervisorSettings(), {})
    child.start()
    assert "preexec_fn" not in seen
    assert seen["argv"][-1] == "/bin/true" and seen["argv"][0] != "/bin/true"

