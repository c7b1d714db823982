"""A run's configuration from training processes to a real server process, over HTTP
on loopback with the server's token, and back after the server was SIGKILLed:

- verl 0.9.1's own ``Tracking`` (``trainer.logger=[console, rl_insight]``) with verl's
  whole generated PPO config: in a process the job's worker setup hook reached (verl's
  logger patched when the process imports ``verl.utils.tracking``), and in one it did not
  (the logger's call in progress read when it names the run); everything but
  ``trainer.rl_insight`` reaches the server, secrets masked, and two such runs differ in
  what their configs do;
- the client's own ways: ``rl_insight.log_config`` before the run is named (held, sent
  when ``init`` names it), ``rl_insight.Tracking(project, experiment, args)`` with an
  argparse ``Namespace`` (handed over, as verl's and wandb's trackers take ``config``),
  an options mapping (taken as ``init``'s options, as before: nothing handed over), the
  same configuration again (not sent again), a changed one (sent, the latest kept).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import requests

from rl_insight.runconfig.diff import diff
from rl_insight.wire import runconfig as config_wire
from tests.conftest import REPO, side_by_side
from tests.test_lifecycle import status

pytestmark = pytest.mark.integration
TOKEN = "run-config-token"
ONLY_THE_SERVER = ("prometheus.enabled=false", "alertmanager.enabled=false",
                   "tempo.enabled=false", "grafana.enabled=false")

VERL = r'''
import json, os, sys
hooked = sys.argv[1] == "hook"
if hooked:  # what Ray runs first in every worker of a job with the hook (rl-insight ray-env)
    from rl_insight.ray.hooks import worker_setup
    worker_setup()
from omegaconf import OmegaConf
import verl
from verl.utils.tracking import RLInsightLogger, Tracking
patched_at_import = getattr(RLInsightLogger, "_rl_insight_config", False)
# verl's whole PPO config as main_ppo composes it (verl 0.9.1's generated file), with
# the run's own choices, as a user's overrides set them
cfg = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer", "config",
                                  "_generated_ppo_trainer.yaml"))
cfg.trainer.project_name, cfg.trainer.experiment_name = sys.argv[2], sys.argv[3]
cfg.trainer.logger = ["console", "rl_insight"]
cfg.trainer.rl_insight = {"flush_interval_s": 0.5}
cfg.trainer.wandb_proxy = "http://alice:pr0xy-pass@proxy.internal:3128"
cfg.actor_rollout_ref.rollout.name = "vllm"
cfg.actor_rollout_ref.actor.optim.lr = float(sys.argv[4])
cfg.actor_rollout_ref.model.override_config = {"hf_token": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123"}
tracking = Tracking(sys.argv[2], sys.argv[3], default_backend=["console", "rl_insight"],
                    config=cfg)
tracking.log({"actor/pg_loss": 0.1, "training/global_step": 1}, step=1)
tracking.finish()
print("SAID " + json.dumps({"patched_at_import": patched_at_import}), flush=True)
'''

CLIENT = r'''
import argparse, json, os, sys
import requests
import rl_insight
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
URL, P = os.environ["RL_INSIGHT_SERVER_URL"], sys.argv[1]
AUTH = {"Authorization": "Bearer " + os.environ["RL_INSIGHT_TOKEN"]}

def delivered():
    assert RUNTIME.client.wait_registrations(20)

def stored(e):
    return requests.get(URL + "/api/v1/experiments/config", headers=AUTH, timeout=5,
                        params={"project": P, "experiment_name": e}).json()

said = {}
rl_insight.log_config({"held": True, "api_key": "sk-abcdefghijklmnopqrstuvwx"})
rl_insight.init(P, "held")  # the run named: the held configuration goes now
args = argparse.Namespace(lr=0.1, batch=64, wandb_key="0123456789abcdef0123456789abcdef",
                          schedule=[0.5, 0.25], model=argparse.Namespace(name="qwen"))
rl_insight.Tracking(P, "options", {"flush_interval_s": 0.5})
rl_insight.Tracking(P, "namespace", args)  # the process's run from here on
delivered()
said["first"] = stored("namespace")["received_at"]
rl_insight.log_config(args)  # the same again: not sent
delivered()
said["again"] = stored("namespace")["received_at"]
args.lr = 0.2
rl_insight.log_config(args)  # changed: sent, the latest kept
delivered()
said["changed"] = stored("namespace")["values"]["lr"]
rl_insight.finish()
print("SAID " + json.dumps(said), flush=True)
'''


def run_script(script: str, env: dict, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True,
                       text=True, timeout=180, cwd=REPO)
    line = next((x for x in r.stdout.splitlines() if x.startswith("SAID ")), None)
    assert r.returncode == 0 and line, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(line[len("SAID "):])


def test_configs_reach_the_server_masked_and_outlive_its_sigkill(cli):
    cli.env["RL_INSIGHT_TOKEN"] = TOKEN
    url = cli.start(*ONLY_THE_SERVER)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_"))}
    env.update(RL_INSIGHT_SERVER_URL=url, RL_INSIGHT_TOKEN=TOKEN, VERL_RL_INSIGHT_ENABLE="1",
               RL_INSIGHT_HOME=str(cli.home), PYTHONPATH=str(REPO))
    hooked, unhooked, plain = side_by_side(
        lambda: run_script(VERL, env, "hook", "verl", "hooked", "1e-6"),
        lambda: run_script(VERL, env, "none", "verl", "unhooked", "2e-6"),
        lambda: run_script(CLIENT, env, "plain"))
    assert hooked["patched_at_import"] and not unhooked["patched_at_import"]

    auth = {"Authorization": f"Bearer {TOKEN}"}

    def stored(project: str, experiment: str) -> requests.Response:
        return requests.get(url + config_wire.CONFIG_PATH, headers=auth, timeout=5,
                            params={"project": project, "experiment_name": experiment})

    def check_all() -> None:
        a, b = (stored("verl", e).json() for e in ("hooked", "unhooked"))
        for got in (a, b):
            v = got["values"]
            assert got["source"] == "verl" and got["keys"] > 800, got["keys"]
            assert got["cut"] == {"keys": 0, "values": 0, "depth": 0}
            assert v["trainer.logger"] == '["console", "rl_insight"]'
            assert v["actor_rollout_ref.rollout.name"] == "vllm"
            assert v["trainer.wandb_proxy"] == "http://alice:***@proxy.internal:3128"
            assert v["actor_rollout_ref.model.override_config.hf_token"] == config_wire.MASK
            assert not [x for x in v.values() if isinstance(x, str) and
                        ("pr0xy-pass" in x or "hf_aBcDe" in x)]
        changed = {r["key"] for r in diff(a["values"], b["values"])["keys"]
                   if r["status"] != "same"}
        assert "actor_rollout_ref.actor.optim.lr" in changed
        assert "trainer.experiment_name" in changed and len(changed) < 10, changed
        held = stored("plain", "held").json()
        assert held["values"] == {"held": True, "api_key": config_wire.MASK}
        assert held["source"] == "log_config"
        ns = stored("plain", "namespace").json()
        assert ns["values"] == {"lr": 0.2, "batch": 64, "wandb_key": config_wire.MASK,
                                "schedule": "[0.5, 0.25]", "model.name": "qwen"}
        assert stored("plain", "options").status_code == 404  # options, not a run's config

    check_all()
    assert plain["again"] == plain["first"] and plain["changed"] == 0.2
    # the token guards both ways
    assert requests.get(url + config_wire.CONFIG_PATH, timeout=5, params={
        "project": "plain", "experiment_name": "held"}).status_code == 401
    assert requests.post(url + config_wire.CONFIG_PATH, timeout=5, json={
        "project": "plain", "experiment_name": "held", "values": {}}).status_code == 401
    # a SIGKILL takes back nothing the server answered
    os.kill(status(cli)[0]["server"]["pid"], signal.SIGKILL)
    cli.run("server", "stop")  # the stale run file of the killed server
    assert cli.start(*ONLY_THE_SERVER) == url
    check_all()
    lines = requests.get(url + "/metrics", headers=auth, timeout=5).text.splitlines()
    assert any(line.startswith(config_wire.INFO_METRIC + "{") and 'key="batch"' in line and
               'experiment_name="namespace"' in line for line in lines)
