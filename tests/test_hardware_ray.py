"""Hardware on a real local Ray cluster with the server and a real Prometheus: an agent
per node starts Debian's node_exporter, or serves the fallback; nodes that leave are
removed from the targets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from dashboards import panels
from tests.conftest import processes_with_env, prom_query, wait_for
from tests.raycluster import MARK

pytestmark = pytest.mark.integration

ATTACH = '''
import json, rl_insight, time
att = rl_insight.ray.attach(project="proj", experiment_name="hardware", hardware=True)
from rl_insight.ray import hardware
import ray
mgr = ray.get_actor(hardware.MANAGER_NAME, namespace=att.namespace)
print("RESULT " + json.dumps({"nodes": ray.get(mgr.reconcile_now.remote()),
                               "t": time.time()}))
'''


@pytest.fixture(scope="module")
def stack(ray_world):
    """The shared server and Ray cluster (tests/worlds.py); each test attaches under its
    own namespace and looks only at its own nodes' targets."""
    yield ray_world.cli, ray_world.url, ray_world.cluster
    # its agents and their targets go with it (each node_exporter scraped every second
    # for the rest of the world's life otherwise): the managers first, or they register
    # the targets again
    from rl_insight.ray.hardware import SIGNATURES
    from tests import worlds

    worlds.tidy("ray_world")

    url = ray_world.url + "/api/v1/prometheus/targets"
    for t in requests.get(url, timeout=10).json()["targets"]:
        if t["job_name"] in SIGNATURES:
            body = {"job_name": t["job_name"], "targets": [t["target"]],  # a hardware
                    "labels": {"node": t["labels"]["node"]}}  # target names its node
            body.update({k: t[k] for k in ("project", "experiment_name") if t.get(k)})
            requests.delete(url, json=body, timeout=10).raise_for_status()


def result(r) -> dict:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.skipif(not shutil.which("prometheus-node-exporter"),
                    reason="Debian's prometheus-node-exporter is installed by `make test`")
def test_attach_hardware_starts_node_exporter_and_prometheus_has_it(stack):
    cli, url, cluster = stack
    res = result(cluster.run_driver(ATTACH, RL_INSIGHT_HARDWARE_NODE_EXPORTER_PORT="0",
                                    RL_INSIGHT_CLIENT_RAY_NAMESPACE="hw_started"))
    (status,) = res["nodes"].values()
    node_exp = status["exporters"]["node-exporter"]
    assert node_exp["how"].startswith("started ") and "node-exporter" in node_exp["how"]
    addr = node_exp["address"]
    wait_for(lambda: prom_query(cli.prometheus, f'node_cpu_seconds_total{{instance="{addr}",'
                                                f'node="{status["node"]}"}}'),
             15, "node_cpu_seconds_total in Prometheus")
    # within 15 s of the attach, the driver's end included: measured 2026-12-07, 5 runs
    # beside one busy loop (load 2-30): 0.9-5.7 s; 15 s is the wait's own deadline, over
    # twice the worst
    assert time.time() - res["t"] < 15
    targets = requests.get(url + "/api/v1/prometheus/targets").json()["targets"]
    mine = [t for t in targets if t["target"] == addr]
    assert mine[0]["job_name"] == "node-exporter"
    assert mine[0]["labels"] == {"node": status["node"], "ray_node_id": status["node_id"]}


def test_fallback_without_any_exporter_feeds_the_hardware_panels(stack):
    cli, url, cluster = stack
    res = result(cluster.run_driver(ATTACH, RL_INSIGHT_HARDWARE_START_NODE_EXPORTER="0",
                                    RL_INSIGHT_HARDWARE_NODE_EXPORTER_PORT="0",
                                    RL_INSIGHT_CLIENT_RAY_NAMESPACE="hw_fallback"))
    (status,) = res["nodes"].values()
    exp = status["exporters"]["node-exporter"]
    assert exp["how"] == "fallback"
    addr = exp["address"]
    wait_for(lambda: prom_query(cli.prometheus, f'node_load1{{instance="{addr}"}}'), 15,
             "the fallback scraped")
    want = {"CPU busy", "Memory used", "Network"}
    for panel in panels.NODE_EXPORTER:
        if panel.title not in want:
            continue
        for q in panel.queries:
            expr = (q.expr.replace('node=~"$node"', f'node=~".*",instance="{addr}"')
                    .replace("$__rate_interval", "5s"))
            wait_for(lambda e=expr: prom_query(cli.prometheus, e), 15,
                     f"data for {panel.title}: {expr}")


def test_a_node_that_leaves_is_removed_from_the_targets(stack, tmp_path):
    cli, url, cluster = stack
    mark = uuid.uuid4().hex
    env = cluster.env(**{MARK: mark})  # this node's processes carry their own marker
    env.pop("RAY_ADDRESS")
    r = subprocess.run([str(Path(sys.executable).parent / "ray"), "start",
                        f"--address={cluster.address}", "--num-cpus=1",
                        "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = result(cluster.run_driver(ATTACH, RL_INSIGHT_HARDWARE_START_NODE_EXPORTER="0",
                                    RL_INSIGHT_HARDWARE_NODE_EXPORTER_PORT="0",
                                    RL_INSIGHT_HARDWARE_RECONCILE_INTERVAL_S="1",
                                    RL_INSIGHT_CLIENT_RAY_NAMESPACE="hw_leave"))
    assert len(res["nodes"]) == 2, res
    node_ids = set(res["nodes"])

    def registered() -> set[str]:
        ts = requests.get(url + "/api/v1/prometheus/targets").json()["targets"]
        return {t["labels"].get("ray_node_id") for t in ts} & node_ids

    assert registered() == node_ids
    for pid in processes_with_env(MARK, mark):  # the node dies
        subprocess.run(["kill", "-9", str(pid)], check=False)
    survivors = wait_for(lambda: left if len(left := registered()) == 1 else None, 90,
                         "the departed node's targets to be removed")
    assert len(survivors) == 1


LOST = '''
import json, os, rl_insight, time, requests
att = rl_insight.ray.attach(project="proj", experiment_name="hardware", hardware=True)
from rl_insight.ray import hardware
import ray
mgr = ray.get_actor(hardware.MANAGER_NAME, namespace=att.namespace)
(status,) = ray.get(mgr.reconcile_now.remote()).values()
addr = status["exporters"]["node-exporter"]["address"]
url = os.environ["RL_INSIGHT_SERVER_URL"] + "/api/v1/prometheus/targets"
listed = lambda: any(t["target"] == addr for t in requests.get(url).json()["targets"])
before = listed()
# the server loses them (it was down when the agent started, or lost its state)
requests.delete(url, json={"job_name": "node-exporter", "targets": [addr],
                           "labels": {"node": status["node"],
                                      "ray_node_id": status["node_id"]}}).raise_for_status()
gone = not listed()
ray.get(mgr.reconcile_now.remote())
end = time.time() + 30
while not listed() and time.time() < end:
    time.sleep(0.2)
print("RESULT " + json.dumps({"before": before, "gone": gone, "back": listed()}))
'''


def test_hardware_targets_the_server_lost_are_registered_again(stack):
    """The manager's reconcile compares the server's list with its agents' exporters and
    has an agent register again what the server does not list."""
    _, _, cluster = stack
    res = result(cluster.run_driver(LOST, RL_INSIGHT_HARDWARE_START_NODE_EXPORTER="0",
                                    RL_INSIGHT_HARDWARE_NODE_EXPORTER_PORT="0",
                                    RL_INSIGHT_CLIENT_RAY_NAMESPACE="hw_lost"))
    assert res == {"before": True, "gone": True, "back": True}, res
