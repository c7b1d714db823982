"""The server's port answers 404 without this server's header for a while (an ingress, or
another program on the port while the server restarts), then this server comes up there:
the client keeps what it measured and delivers all of it. Nothing is taken as delivered
because something else answered, and no verdict outlives the moment it was made.

The client runs as verl's trainer does before it has a run: it registers its engine
endpoints first, then ``init`` names the run (the binding that joins those engines to the
run travels while the port still answers 404).
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.conftest import REPO, wait_for

pytestmark = pytest.mark.integration

HELD_S = 15.0  # more than one FOREIGN_RECHECK_S (collector/push.py): a verdict is renewed

CLIENT = '''
import json, sys, time, rl_insight
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
url = sys.argv[1]
rl_insight.register_rollout_replicas(["127.0.0.1:18001", "127.0.0.1:18002"], "vllm")
rl_insight.init("proj", "port-changed-hands")
sent = 0
for step in range(1, 41):
    rl_insight.metric_gauge("training/global_step", step)
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0", step=step):
        time.sleep(0.01)
    sent += 1
    time.sleep(0.5)
print("STEPS " + str(sent), flush=True)
c = RUNTIME.client
t = c.transport()
deadline = time.time() + 60
while time.time() < deadline:
    api.flush(2)
    t.hub_loop.run_now(10)
    t.lane_loop.run_now(10)
    if t.hub.sender.ok and t.lanes.sender.ok and not t.lanes.pending \\
            and c.registrar().idle():
        break
    time.sleep(0.5)
rl_insight.finish()
print("DONE " + json.dumps({"lanes": t.lanes.stats(), "hub": t.hub.stats()}), flush=True)
'''


class NotOurs(http.server.BaseHTTPRequestHandler):
    """What another program on the port answers: 404 to everything, no header of ours."""

    def _404(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b"404 page not found\n"
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _404

    def log_message(self, *args) -> None:
        pass


def test_a_port_that_answers_404_then_this_server_loses_nothing(cli):
    port = cli.setting("server.port")
    url = f"http://127.0.0.1:{port}"
    other = http.server.ThreadingHTTPServer(("127.0.0.1", port), NotOurs)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    env = {k: v for k, v in cli.env.items() if not k.startswith(("RL_INSIGHT_", "VERL_"))}
    env.update(RL_INSIGHT_SERVER_URL=url, PYTHONPATH=str(REPO),
               RL_INSIGHT_CLIENT_HUB_PUSH_INTERVAL_S="0.5",
               RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="0.5",
               RL_INSIGHT_CLIENT_REGISTRATION_RETRY_MAX_S="2")
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, url], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the client meets the 404s for HELD_S (unless it dies meanwhile)
        held_until = time.monotonic() + HELD_S
        wait_for(lambda: proc.poll() is not None or time.monotonic() > held_until,
                 HELD_S + 5, "the other program's time on the port")
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        other.shutdown()
        other.server_close()
        cli.start("prometheus.enabled=false", "tempo.enabled=false",
                  "grafana.enabled=false", "alertmanager.enabled=false")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        other.server_close()
    assert proc.returncode == 0, err[-3000:]
    steps = int(next(x for x in out.splitlines() if x.startswith("STEPS "))[6:])
    done = json.loads(next(x for x in out.splitlines() if x.startswith("DONE "))[5:])
    said = [x for x in err.splitlines() if "not an RL-Insight server" in x]
    assert len(said) == 1, err[-3000:]  # said once, while it lasted
    assert done["lanes"]["spans_dropped"] == 0
    assert done["lanes"]["spans_received"] == done["lanes"]["spans_sent"]
    # every step's state span reached the server, the ones sent into the 404s included
    recent = requests.get(url + "/api/v1/traces/recent", timeout=5, params={
        "project": "proj", "experiment_name": "port-changed-hands"}).json()
    got = sorted(s["step"] for s in recent["spans"] if s["lane"] == "replica_0")
    assert got == list(range(1, steps + 1)), got
    # the engines registered before init are in the run: the binding was delivered
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    mine = sorted((t["target"], t["project"], t["experiment_name"]) for t in targets)
    assert mine == [("127.0.0.1:18001", "proj", "port-changed-hands"),
                    ("127.0.0.1:18002", "proj", "port-changed-hands")], mine
    text = requests.get(url + "/metrics", timeout=5).text
    last = [x for x in text.splitlines() if x.startswith("rl_insight_monitor_")
            and "global_step" in x and 'experiment_name="port-changed-hands"' in x]
    assert last and float(last[0].rsplit(" ", 1)[1]) == steps, last
