"""With the server gone, the end of a run is not held up: verl's `Tracking.finish()`
returns within `client.exit_flush_timeout_s` in all, and interpreter exit does not wait a
second time. Two ways a server is gone: its port refuses, or it accepts and never answers
(a hung host or a black-holed route: every request waits for its socket timeout)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from rl_insight.config import ClientSettings
from tests.conftest import REPO

pytestmark = pytest.mark.integration
# the deadline the client keeps, and what a process may add to it (threads noticing the
# deadline, a print): far below a second request timeout, which is what the bound rules out
TIMEOUT = ClientSettings().exit_flush_timeout_s
SLACK_S = 0.75

SCRIPT = r'''
import atexit, json, os, sys, time
marks = {}
# registered before rl_insight's own hook: atexit runs hooks last-in first-out, so this
# one runs after the client's exit flush and measures it
atexit.register(lambda: print("TIMES " + json.dumps(
    {**marks, "exit_s": time.monotonic() - marks["t_finished"]}), flush=True))
from omegaconf import OmegaConf
import rl_insight
from verl.utils.tracking import Tracking

# verl: the engines are registered before the trainer names the run
rl_insight.update_prometheus_config(["127.0.0.1:1", "127.0.0.1:2"], "vllm",
                                    [{"replica": 0}, {"replica": 1}])
config = OmegaConf.create({"trainer": {"project_name": "p", "experiment_name": "e",
                                       "logger": ["rl_insight"], "rl_insight": {}}})
tracking = Tracking("p", "e", default_backend=["rl_insight"], config=config)
for step in range(1, 4):
    tracking.log({"actor/pg_loss": 0.1 * step, "timing_s/step": 0.01}, step=step)
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
        pass
t0 = time.monotonic()
tracking.finish()
marks["t_finished"] = time.monotonic()
marks["finish_s"] = marks["t_finished"] - t0
'''


@pytest.fixture(params=["refuses", "never-answers"])
def gone_server(request):
    """The URL of a server that is gone, in one of two ways."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if request.param == "refuses":
        sock.close()  # nothing listens: connections are refused
        yield f"http://127.0.0.1:{port}"
        return
    sock.listen(64)  # the kernel completes the handshake; nobody reads or answers
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        sock.close()


def test_finish_and_exit_share_one_deadline_with_the_server_gone(gone_server, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_"))}
    env.update(RL_INSIGHT_SERVER_URL=gone_server, VERL_RL_INSIGHT_ENABLE="1",
               RL_INSIGHT_HOME=str(tmp_path), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next((x for x in r.stdout.splitlines() if x.startswith("TIMES ")), None)
    assert line, r.stdout[-2000:] + r.stderr[-2000:]
    times = json.loads(line[len("TIMES "):])
    assert times["finish_s"] <= TIMEOUT + SLACK_S, times
    # exit waits only for what finish() left of its deadline
    assert times["finish_s"] + times["exit_s"] <= TIMEOUT + SLACK_S, times
