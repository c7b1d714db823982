"""Platform mode (upstream's "Platform Integration Without the RL-Insight Server"): no
RL-Insight server at all. The whole platform is a plain Prometheus with static jobs
(the hub at its pre-agreed port on its node, the engines at theirs) and an OTLP
receiver (a FAKE Tempo standing in for the platform's OpenTelemetry Collector: it
decodes real OTLP). The simulated run on a Ray cluster of its own fills the shipped
training and timeline dashboards from that Prometheus alone, its spans reach the
receiver, and registration is a no-op that says so.

verl's side follows the platform change's verl test (tardis-key/verl, a test of
``verl.utils.tracking.RLInsightLogger``): in platform mode ``register_metrics`` asks
``rl_insight.is_platform_mode()`` (outside any try) and skips the registration.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys

import pytest

from dashboards import build
from rl_insight.common import netaddr
from tests.conftest import REPO, OwnPrometheus, wait_for
from tests.fakes.otlp_receiver import FakeTempo
from tests.raycluster import RayCluster
from tests.test_simulation_e2e import SIMULATED, label_values, query_range, substitute

pytestmark = pytest.mark.integration
RUN = {"project": "platform", "experiment_name": "no-server"}


# Ports a platform agrees on beforehand are bound long after they are chosen (the hub's and
# the engines': seconds later, by Ray workers): from netaddr.HANDOUT_PORTS (below the
# kernel's ephemeral range, above Ray's worker ports; this worker's slice of it).


def free_consecutive_ports(n: int) -> int:
    """A base port with base..base+n-1 free (a platform's pre-agreed ports)."""
    pick = random.Random()
    for _ in range(200):
        base = pick.randrange(netaddr.HANDOUT_PORTS.start, netaddr.HANDOUT_PORTS.stop - n)
        socks = []
        try:
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("0.0.0.0", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    """A Ray cluster of its own (its nodes know no RL-Insight server), the platform's
    OTLP receiver and its Prometheus, and the run."""
    tmp = tmp_path_factory.mktemp("platform")
    receiver = FakeTempo(free_consecutive_ports(1)).start()
    cluster = RayCluster(tmp, dashboard=False).start()
    hub_port = free_consecutive_ports(3)  # the hub's, then two engines'
    engines = hub_port + 1
    node = "127.0.0.1"  # the cluster's node address (--node-ip-address)
    rollout = [{"targets": [f"{node}:{engines + r}"],
                "labels": {**RUN, "replica": str(r), "role": "rollout"}}
               for r in range(2)]
    config = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        # docs/platform.md: the hub on its node at prometheus.metrics_report_port
        {"job_name": "rl-insight", "static_configs": [{"targets": [f"{node}:{hub_port}"]}]},
        {"job_name": "rollout", "static_configs": rollout}]}
    own = OwnPrometheus(tmp)
    prom = own.start(json.dumps(config))
    env = cluster.env(RL_INSIGHT_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.port}/v1/traces",
                      RL_INSIGHT_HOME=str(tmp / "home"),
                      RL_INSIGHT_CLIENT_METRICS_PORT=str(hub_port),
                      # the lanes tick as often as the platform scrapes (docs/collecting.md)
                      RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="1")
    try:
        r = subprocess.run(
            [sys.executable, str(REPO / "examples" / "simulate_rl.py"), "--steps", "3",
             "--replicas", "2", "--ranks", "2", "--mode", "sync", "--backend", "vllm",
             "--step-seconds", "3", "--val-every", "2", "--no-transfer-queue",
             "--lanes", "verl-main", "--engine-base-port", str(engines), "--linger", "6",
             "--project", RUN["project"], "--experiment-name", RUN["experiment_name"]],
            env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
        line = next(x for x in r.stdout.splitlines() if x.startswith("SIMULATION "))
        run = json.loads(line[len("SIMULATION "):])
        yield prom, receiver, run, r.stderr
    finally:
        cluster.stop()
        own.stop()
        receiver.stop()


def test_the_training_and_timeline_dashboards_fill_from_the_platforms_prometheus(platform):
    prom, _, run, _ = platform
    start, end = run["t_start"] - 5, run["t_end"] + 8
    empty, checked = [], 0
    for d in build.dashboards():
        if d.uid not in ("rl-insight-training", "rl-insight-timeline"):
            continue
        for var in build.model(d)["templating"]["list"]:
            if var["name"].startswith("k_"):
                continue
            selector, label = var["definition"][len("label_values("):-1].rsplit(", ", 1)
            got = label_values(prom, label, substitute(selector, run))
            assert got, (d.uid, var["name"], selector)
            if label in RUN:
                assert run[label] in got
        for section in d.sections:
            for panel in section.panels:
                if panel.repeat.startswith("k_") or (
                        panel.needs and panel.needs not in SIMULATED):
                    continue
                for q in panel.queries:
                    if q.datasource != "prometheus":
                        continue
                    checked += 1
                    expr = substitute(q.expr, run)
                    if not query_range(prom, expr, start, end):
                        empty.append(f"{d.uid} / {panel.title}: {expr}")
    assert checked > 30
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # the lane series came through the hub, one role per timeline row
    roles = label_values(prom, "role", 'rl_insight_monitor_lane_state{project="platform"}')
    assert roles == {"rollout", "ranks"}


def test_spans_reach_the_platforms_otlp_receiver_and_registration_says_it_is_skipped(
        platform):
    _, receiver, run, stderr = platform
    spans = wait_for(lambda: [a for a, _ in receiver.spans
                              if a.get("experiment_name") == RUN["experiment_name"]],
                     10, "the run's spans at the receiver")
    lanes = {a.get("state_lane_id") for a in spans}
    assert {"rollout_replica_0", "rollout_replica_1", "rank_0", "rank_1"} <= lanes
    assert "platform mode (no RL-Insight server)" in stderr
    assert "are not registered anywhere" in stderr


def test_the_engines_fill_the_rollout_dashboard_by_the_platforms_own_labels(platform):
    prom, _, run, _ = platform
    d = next(d for d in build.dashboards() if d.uid == "rl-insight-rollout-vllm")
    got = query_range(prom, 'count by (replica) (vllm:num_requests_running{project='
                      '"platform"})', run["t_start"], run["t_end"] + 8)
    assert {x["metric"]["replica"] for x in got} == {"0", "1"}
    panel = d.sections[0].panels[0]
    assert query_range(prom, substitute(panel.queries[0].expr, run),
                       run["t_start"], run["t_end"] + 8)
