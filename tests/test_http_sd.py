"""Bring your own Prometheus: a separately configured Prometheus (Debian's 2.42), whose
config is exactly the block `rl-insight server prometheus-config` prints, finds the
registered targets through GET /api/v1/prometheus/sd, scrapes them with their job,
replica and run labels (engine names restored by the same relabelling as the managed
Prometheus), scrapes the run's pushed series from the server, and drops the targets
once the run is archived."""

from __future__ import annotations

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, start_http_server

from rl_insight.common import netaddr
from rl_insight.server.services.prometheus import external_config_text
from tests.conftest import prom_query, wait_for

pytestmark = pytest.mark.integration

RUN = {"project": "sd-proj", "experiment_name": "sd-run"}


@pytest.fixture
def engines():
    """Two exporters with a vLLM gauge, served through prometheus_client's negotiating
    app (Prometheus 2.42 asks for OpenMetrics: the name arrives as vllm_...)."""
    servers, addresses = [], []
    for replica in (0, 1):
        reg = CollectorRegistry()
        Gauge("vllm:num_requests_running", "running", registry=reg).set(3 + replica)
        port = netaddr.free_port()
        server, _ = start_http_server(port, addr="127.0.0.1", registry=reg)
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    yield addresses
    for server in servers:
        server.shutdown()


def vllm_targets(prom: str) -> list[dict]:
    """The run's engine targets among the second Prometheus' active targets."""
    try:
        active = requests.get(prom + "/api/v1/targets", params={"state": "active"},
                              timeout=5).json()["data"]["activeTargets"]
    except (requests.RequestException, ValueError, KeyError):
        return []
    return [t for t in active if t["labels"].get("job") == "vllm" and
            t["labels"].get("project") == RUN["project"]]


def test_a_prometheus_of_ones_own_scrapes_what_http_sd_lists(route_server, engines,
                                                             own_prometheus):
    # the shared server (tests/worlds.py): other tests' targets are listed too, this
    # run's are told apart by its labels
    cli, url = route_server.cli, route_server.url
    r = requests.post(url + "/api/v1/prometheus/targets", timeout=5, json={
        "job_name": "vllm", "targets": engines, "labels": [{"replica": 0}, {"replica": 1}],
        **RUN})
    assert r.status_code == 200, r.text
    reg = CollectorRegistry()
    Gauge("rl_insight_monitor_actor_entropy", "entropy", registry=reg).set(0.75)
    push_to_gateway(url.split("//", 1)[1], job="rl_insight", registry=reg, grouping_key=RUN)

    printed = cli.run("server", "prometheus-config", "--server-url", url,
                      "--refresh-interval", "2s")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == external_config_text(url, "2s")
    prom = own_prometheus("global:\n  scrape_interval: 1s\n" + printed.stdout)

    run = 'project="sd-proj",experiment_name="sd-run"'
    got = wait_for(lambda: len(r := prom_query(
        prom, f'vllm:num_requests_running{{job="vllm",{run}}}')) == 2 and r, 25,
        "both engines scraped through http_sd, their name restored")
    assert {(x["metric"]["replica"], x["value"][1]) for x in got} == {("0", "3"), ("1", "4")}
    assert {x["metric"]["instance"] for x in got} == set(engines)
    # beside a busy core the server's scrapes failed up to 74 s on end (fresh clones of
    # 2026-12-07, while the suite's heaviest worlds ran): waited for, not timed
    pushed = wait_for(lambda: prom_query(
        prom, f'rl_insight_monitor_actor_entropy{{job="rl_insight",{run}}}'), 120,
        "the run's pushed series scraped from the server's /metrics")
    assert pushed[0]["value"][1] == "0.75"

    r = requests.post(url + "/api/v1/experiments/archive", json=RUN, timeout=5)
    assert r.status_code == 200, r.text
    assert requests.get(url + "/api/v1/prometheus/sd", params={"project": RUN["project"]},
                        timeout=5).json() == []
    assert not [g for g in requests.get(url + "/api/v1/prometheus/sd", timeout=5).json()
                if g["labels"].get("project") == RUN["project"]]
    wait_for(lambda: not vllm_targets(prom), 15,
             "the second Prometheus to drop the archived run's targets")
