"""Across hosts: the install guide's multi-node steps followed literally in a cluster of
network namespaces with their own addresses (tests/netns.py): the monitoring host runs the
server and Prometheus (and a FAKE Grafana); a Ray head and a Ray worker node run in their
own; the job is submitted with `ray job submit --runtime-env` and a file from
`rl-insight ray-env`; the rollout engines and TransferQueue live on the worker node;
hardware agents run on both. Then each multi-node troubleshooting item is reproduced and
diagnosed: targets naming the registering host itself, a server URL a worker cannot
reach or that is loopback, an engine Prometheus cannot scrape, a firewall between hosts,
and the loss of a worker node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
import requests
import yaml

from dashboards import build
from tests import netns
from tests.conftest import REPO, side_by_side, wait_for
from tests.raycluster import QUIET
from tests.test_grafana_admin import fake_grafana_home
from tests.test_simulation_e2e import query_range, substitute

WHY_NOT = netns.available()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)]
PY = sys.executable
RUN = {"project": "multi", "experiment_name": "two-nodes"}


# what `server start` told the user to export on every host (the server listens beyond
# loopback, so it made a write token)
EXPORTED: dict[str, str] = {}
PROM_AUTH: dict[str, tuple[str, str]] = {}


def client_env(**extra: str) -> dict[str, str]:
    """The environment of a process on a cluster host after the guide's exports."""
    return base_env(**EXPORTED, **extra)


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {EXPORTED['RL_INSIGHT_TOKEN']}"}


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_DEDUP_LOGS="0",
               PYTHONPATH=str(REPO), **extra)
    return env


def ray_bin() -> str:
    return str(os.path.join(os.path.dirname(PY), "ray"))


def doctor(host: netns.Host, url: str, *args: str) -> dict[str, dict]:
    r = host.run(PY, "-m", "rl_insight", "doctor", "--json", "--no-ray", "--server-url",
                 url, *args, env=client_env(), timeout=120)
    checks = json.loads(r.stdout)
    return {c["name"]: c for c in checks}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multihost")
    topo = netns.Topology(["mon", "head", "worker"]).up()
    mon, head, worker = topo["mon"], topo["head"], topo["worker"]
    home = tmp / "home"
    url = f"http://{mon.address}:18080"
    tag = topo.bridge[-6:]
    try:
        # Step 1, the monitoring host: the server on its address (a FAKE Grafana beside it)
        grafana = fake_grafana_home(tmp)

        def server() -> None:
            r = mon.run(PY, "-m", "rl_insight", "server", "start", "--detach",
                        "--set", f"host={mon.address}", "--set",
                        "prometheus.scrape_interval=1s", "--set", f"grafana.binary={grafana}",
                        "--set", "tempo.enabled=false",
                        env=base_env(RL_INSIGHT_HOME=str(home)), timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"RL_INSIGHT_SERVER_URL={url}" in r.stdout, r.stdout
            exported = re.search(r"^  export RL_INSIGHT_TOKEN=(\S+)$", r.stdout, re.M)
            assert exported, r.stdout  # beyond loopback: a token, printed for export
            EXPORTED["RL_INSIGHT_TOKEN"] = exported.group(1)

        # Step 2, the Ray cluster: a head and a worker node with the rollout resource (the
        # two steps need nothing of each other: side by side, as two operators would)
        def ray_nodes() -> None:
            r = head.run(ray_bin(), "start", "--head", f"--node-ip-address={head.address}",
                         "--port=6379", f"--dashboard-host={head.address}",
                         "--dashboard-port=8265", "--include-dashboard=true", "--num-cpus=2",
                         f"--temp-dir=/tmp/rlm-{tag}-h", "--disable-usage-stats", *QUIET,
                         env=base_env(), timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr
            r = worker.run(ray_bin(), "start", f"--address={head.address}:6379",
                           f"--node-ip-address={worker.address}", "--num-cpus=2",
                           '--resources={"rollout": 10}', f"--temp-dir=/tmp/rlm-{tag}-w",
                           "--disable-usage-stats", *QUIET, env=base_env(), timeout=180)
            assert r.returncode == 0, r.stdout + r.stderr

        side_by_side(server, ray_nodes)
        # Step 3, from the operator's machine: the runtime env, then the job
        env_file = tmp / "env.yaml"
        # this server scrapes every second: docs/collecting.md says to set the lanes' tick as
        # short, or states shorter than the 5 s tick never reach the sampled timeline
        r = subprocess.run([PY, "-m", "rl_insight", "ray-env", "--server-url", url],
                           env=client_env(RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="1"),
                           capture_output=True, text=True, timeout=60)
        written = yaml.safe_load(r.stdout)["env_vars"]
        assert written["RL_INSIGHT_TOKEN"] == EXPORTED["RL_INSIGHT_TOKEN"], r.stdout
        assert written["RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S"] == "1", r.stdout
        assert r.returncode == 0, r.stderr
        env_file.write_text(r.stdout)
        t_start = time.time()
        r = subprocess.run(
            [ray_bin(), "job", "submit", "--address", f"http://{head.address}:8265",
             "--runtime-env", str(env_file), "--", PY,
             str(REPO / "examples" / "simulate_rl.py"), "--steps", "3", "--replicas", "2",
             "--ranks", "1", "--mode", "sync", "--backend", "vllm", "--step-seconds", "3",
             "--val-every", "2", "--linger", "12", "--rollout-resource", "rollout",
             "--hardware", "--project", RUN["project"],
             "--experiment-name", RUN["experiment_name"]],
            env=base_env(TQ_METRICS_COLLECT_INTERVAL="1"), capture_output=True, text=True,
            timeout=600)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
        line = next(x for x in r.stdout.splitlines() if x.startswith("SIMULATION "))
        run = json.loads(line[len("SIMULATION "):])
        run.update(t_start=t_start, t_done=time.time())
        # Prometheus listens beyond loopback: with the password the server made for it
        # (README, the table of ports), as an operator reads it on the monitoring host
        PROM_AUTH["auth"] = ("rl-insight", (home / "state" / "prometheus.password")
                             .read_text().strip())
        yield topo, url, f"http://{mon.address}:9090", run
    finally:
        subprocess.run([PY, "-m", "rl_insight", "server", "stop"],
                       env=base_env(RL_INSIGHT_HOME=str(home)), capture_output=True,
                       timeout=120)
        topo.down()
        subprocess.run(["rm", "-rf", f"/tmp/rlm-{tag}-h", f"/tmp/rlm-{tag}-w"], check=False)


def test_the_guide_on_two_nodes_gives_the_dashboards_data(world):
    topo, _, prom, run = world
    worker, head = topo["worker"].address, topo["head"].address
    # the engines run on the worker node and were scraped there, under the run
    auth = PROM_AUTH["auth"]
    series = query_range(prom, f'up{{job="vllm",project="{run["project"]}"}}',
                         run["t_start"], run["t_done"], auth)
    assert {s["metric"]["instance"].rsplit(":", 1)[0] for s in series} == {worker}
    # hardware agents on both nodes, scraped from the monitoring host
    nodes = query_range(prom, 'up{job="node-exporter"} == 1', run["t_start"], run["t_done"],
                        auth)
    assert {s["metric"]["instance"].rsplit(":", 1)[0] for s in nodes} == {head, worker}
    empty, checked = [], 0
    for d in build.dashboards():
        if d.uid not in ("rl-insight-vllm-sync", "rl-insight-transfer-queue",
                         "rl-insight-hardware"):
            continue
        for section in d.sections:
            for panel in section.panels:
                if panel.repeat:  # one per logged name: tests/test_simulation_e2e.py
                    continue
                if panel.needs not in ("", "node-exporter"):
                    continue
                for q in panel.queries:
                    if q.datasource != "prometheus":
                        continue
                    checked += 1
                    run_vars = None if d.uid == "rl-insight-hardware" else run
                    if not query_range(prom, substitute(q.expr, run_vars),
                                       run["t_start"] - 5, run["t_done"] + 5, auth):
                        empty.append(f"{d.uid} / {panel.title}")
    assert checked > 60
    assert not empty, "panels without data on two nodes:\n" + "\n".join(empty)


def test_targets_naming_the_registering_host_are_kept_under_its_address(world):
    topo, url, _, _ = world
    worker = topo["worker"]
    body = {"job_name": "vllm", "targets": ["127.0.0.1:9999", "0.0.0.0:9998",
                                            "localhost:9997"],
            "project": "multi", "experiment_name": "loopback"}
    code = ("import json, os, sys, requests\n"
            f"r = requests.post({url!r} + '/api/v1/prometheus/targets', json={body!r}, "
            "headers={**json.loads(sys.argv[1]), 'Authorization': 'Bearer ' + "
            "os.environ['RL_INSIGHT_TOKEN']}, timeout=10)\n"
            "print(json.dumps({'status': r.status_code, 'body': r.json()}))\n")
    r = worker.run(PY, "-c", code, "{}", env=client_env())
    out = json.loads(r.stdout)
    assert out["status"] == 200, out
    kept = sorted(t["target"] for t in out["body"]["targets"])
    assert kept == sorted(f"{worker.address}:{p}" for p in (9997, 9998, 9999))
    assert len(out["body"]["warnings"]) == 3
    # behind a proxy the caller's address is unknown: refused with what to do instead
    r = worker.run(PY, "-c", code, json.dumps({"X-Forwarded-For": "10.9.9.9"}),
                   env=client_env())
    out = json.loads(r.stdout)
    assert out["status"] == 422 and "node's IP" in out["body"]["error"], out
    # the server side tells about both
    checks = doctor(topo["mon"], url)
    assert checks["target addresses"]["status"] == "problem"
    assert "3 target(s)" in checks["target addresses"]["detail"]
    page = requests.get(url + "/", timeout=10, headers=auth()).text
    assert "named the registering machine itself" in page
    metrics = requests.get(url + "/metrics", timeout=10, headers=auth()).text
    assert "rl_insight_targets_rewritten_total 3.0" in metrics
    assert "rl_insight_targets_refused_total 1.0" in metrics


def test_doctor_on_a_worker_names_an_unreachable_or_loopback_server_url(world):
    topo, url, _, _ = world
    worker, head = topo["worker"], topo["head"]
    # no server on the head: a port held there, bound but never listening, so that no Ray
    # worker can take it (Ray gives its workers 10002-19999, 18080 among them: one answered
    # a fresh-clone run's probe of 18080 with gRPC's frames)
    hold = head.popen(PY, "-c", "import socket, sys, time\n"
                      f"s = socket.socket(); s.bind(({head.address!r}, 0))\n"
                      "print(s.getsockname()[1], flush=True)\n"
                      "time.sleep(300)  # not a wait: holds the port until killed\n",
                      env=base_env(), stdout=subprocess.PIPE, text=True)
    try:
        port = int(hold.stdout.readline())
        checks = doctor(worker, f"http://{head.address}:{port}")
    finally:
        hold.kill()
        hold.wait()
    assert checks["server"]["status"] == "problem"
    assert "connection refused" in checks["server"]["detail"], checks["server"]
    checks = doctor(worker, "http://127.0.0.1:18080")  # the server's own view of itself
    assert checks["server"]["status"] == "problem"
    assert "names this node itself" in checks["server"]["fix"]
    checks = doctor(worker, url)
    assert checks["server"]["status"] == "ok"
    assert {k for k, c in checks.items() if k.startswith("port ")} == {
        "port prometheus", "port grafana", "port alertmanager"}
    assert all(c["status"] == "ok" for k, c in checks.items() if k.startswith("port "))


@pytest.mark.parametrize("port,check", [(18080, "server"), (9090, "port prometheus"),
                                        (3000, "port grafana")])
def test_a_firewall_between_hosts_is_named(world, port, check):
    topo, url, _, _ = world
    mon = topo["mon"]
    mon.block_port(port)
    try:
        checks = doctor(topo["worker"], url)
    finally:
        mon.unblock()
    assert check in checks, sorted(checks)
    assert checks[check]["status"] in ("problem", "warn")
    assert "a firewall" in checks[check]["detail"], checks[check]


def test_an_engine_prometheus_cannot_scrape_is_named_with_host_port_and_error(world):
    topo, url, prom, _ = world
    worker = topo["worker"]
    serve = ("import time, prometheus_client as pc\n"
             "g = pc.Gauge('vllm:num_requests_running', 'x', ['model_name', 'engine'])\n"
             "g.labels('m', '0').set(1)\n"
             f"pc.start_http_server(18555, addr={worker.address!r})\n"
             "time.sleep(600)  # not a wait: serves until the test kills it\n")
    worker.popen(PY, "-c", serve, env=base_env(), stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    target = f"{worker.address}:18555"
    r = requests.post(url + "/api/v1/prometheus/targets", json={
        "job_name": "vllm", "targets": [target], "labels": {"replica": "0"},
        "project": "multi", "experiment_name": "blocked"}, headers=auth(), timeout=10)
    assert r.status_code == 200, r.text

    def health() -> str:
        res = requests.get(prom + "/api/v1/targets", timeout=10,
                           auth=PROM_AUTH["auth"]).json()["data"]
        return next((t["health"] for t in res["activeTargets"]
                     if t["labels"].get("instance") == target), "")

    wait_for(lambda: health() == "up", 20, "Prometheus to scrape the worker's engine")
    worker.block_port(18555)
    try:
        wait_for(lambda: health() == "down", 30, "the blocked engine to be down")
        checks = doctor(topo["mon"], url, "--project", "multi", "--experiment", "blocked")
    finally:
        worker.unblock()
    bad = checks[f"target vllm {target}"]
    assert bad["status"] == "problem" and bad["detail"].startswith("down: ")
    assert len(bad["detail"]) > len("down: ") + 5  # Prometheus's own error text


def test_losing_a_worker_node_keeps_the_hub_on_the_head(world):
    topo, _, _, _ = world
    head, worker = topo["head"], topo["worker"]
    state = f"http://{head.address}:8265/api/v0/actors"

    def actors() -> list[dict]:
        r = requests.get(state, params={"detail": "true", "limit": 1000}, timeout=20)
        return r.json()["data"]["result"]["result"]

    nodes = requests.get(f"http://{head.address}:8265/api/v0/nodes", params={
        "limit": 100}, timeout=20).json()["data"]["result"]["result"]
    ips = {n["node_id"]: n["node_ip"] for n in nodes}

    def node_ip(a: dict) -> str:
        return ips.get(a.get("node_id") or "", "")

    hub = next(a for a in actors() if a.get("name") == "rl_insight_hub")
    assert hub["state"] == "ALIVE" and node_ip(hub) == head.address, (hub, ips)
    on_worker = [a["name"] for a in actors() if a.get("name", "").startswith(
        "rl_insight_lane_") and a["state"] == "ALIVE" and node_ip(a) == worker.address]
    for pid in netns.sh("ip", "netns", "pids", worker.ns, check=False).stdout.split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass

    def settled():
        now = {a.get("name"): a for a in actors() if a.get("state") == "ALIVE"}
        hub_now = now.get("rl_insight_hub")
        moved = all(n in now and node_ip(now[n]) == head.address for n in on_worker)
        return hub_now is not None and node_ip(hub_now) == head.address and moved

    wait_for(settled, 90, "the hub alive on the head and the worker's lanes restarted there")


def test_server_start_on_a_host_with_several_interfaces_says_which_address_and_why(
        tmp_path):
    topo = netns.Topology(["mon"]).up()
    mon = topo["mon"]
    home = tmp_path / "home"
    try:
        for cmd in (["ip", "route", "add", "default", "via", topo.observer],
                    ["ip", "link", "add", "side0", "type", "veth", "peer", "name", "side1"],
                    ["ip", "addr", "add", "192.168.77.5/24", "dev", "side0"],
                    ["ip", "link", "set", "side1", "up"],
                    ["ip", "link", "set", "side0", "up"]):
            netns.sh(*mon.argv(*cmd))
        cli = [PY, "-m", "rl_insight", "server"]
        common = ["--set", "prometheus.enabled=false", "--set", "tempo.enabled=false",
                  "--set", "grafana.enabled=false", "--set", "host=0.0.0.0"]
        env = base_env(RL_INSIGHT_HOME=str(home))
        r = mon.run(*cli, "start", "--detach", *common, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"Address for clients: {mon.address}, the address of eth0, the interface " \
               "of the default route." in r.stdout, r.stdout
        assert "This host also has 192.168.77.5 (side0)" in r.stdout
        assert f"RL_INSIGHT_SERVER_URL=http://{mon.address}:18080" in r.stdout
        assert "  export RL_INSIGHT_TOKEN=" in r.stdout  # 0.0.0.0: a token was made
        mon.run(*cli, "stop", env=env)
        r = mon.run(*cli, "start", "--detach", *common, "--set",
                    "server.advertise_host=192.168.77.5", env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Address for clients: 192.168.77.5, server.advertise_host." in r.stdout
        assert "RL_INSIGHT_SERVER_URL=http://192.168.77.5:18080" in r.stdout
        mon.run(*cli, "stop", env=env)
    finally:
        topo.down()
