"""Either client with either server, with the real upstream rl-insight 0.3.0 wheel in an
environment of its own (tests/upstream_env.py): its client, as a verl image that pins it
runs, fills this project's dashboards through this server (its hub is scraped, its spans
come in on the server's port); this project's client pointed at upstream's server says
once, clearly, what is wrong, and training goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from dashboards import build, panels
from rl_insight.common import netaddr
from tests import upstream_env
from tests.conftest import REPO, wait_for
from tests.test_simulation_e2e import label_values, query_range, substitute

pytestmark = pytest.mark.integration
RUN = {"project": "upstream-client", "experiment_name": "pinned-0.3.0"}


@pytest.fixture(scope="module")
def upstream_python(tmp_path_factory):
    return upstream_env.make(tmp_path_factory.mktemp("upstream-env") / "env")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_", "PYTHONPATH"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def test_the_upstream_client_fills_this_servers_dashboards(cli, upstream_python, tmp_path):
    url = cli.start("prometheus.scrape_interval=1s", "tempo.enabled=false",
                    "grafana.enabled=false", "traces.relay_url=http://127.0.0.1:9/v1/traces")
    r = subprocess.run([str(upstream_python), str(REPO / "tests/upstream/client_run.py"),
                        RUN["project"], RUN["experiment_name"], str(netaddr.free_port()),
                        cli.prometheus], env=clean_env(RL_INSIGHT_SERVER_URL=url),
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(next(x for x in r.stdout.splitlines()
                          if x.startswith("RESULT "))[len("RESULT "):])
    assert res["version"] == "0.3.0"  # upstream's package ran, not this one
    start, end = res["t_start"] - 5, res["t_done"] + 2
    # its hub registered itself (job trainer_metrics, no run) and was scraped
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    assert [t["job_name"] for t in targets] == ["trainer_metrics"]
    # the training dashboard: the run is in its variables, every curated training panel
    # has data, and each key sits in one row of All trainer metrics
    d = next(d for d in build.dashboards() if d.uid == "rl-insight-training")
    model = build.model(d)
    for var in model["templating"]["list"]:
        if var["name"] in ("project", "experiment_name"):
            sel = var["definition"][len("label_values("):var["definition"].rindex(", ")]
            assert RUN[var["name"]] in label_values(cli.prometheus, var["name"],
                                                    substitute(sel, RUN))
    empty = []
    for panel in build.TRAINING.panels:
        for q in panel.queries:
            if not query_range(cli.prometheus, substitute(q.expr, RUN), start, end):
                empty.append(f"{panel.title}: {q.expr}")
    assert not empty, "training panels without data from upstream's client:\n" + \
        "\n".join(empty)
    rows = {g.title for g in panels.key_groups()
            if label_values(cli.prometheus, "__name__", substitute(g.selector(), RUN))}
    assert {"actor/*", "critic/*", "timing_s/*", "val-core/*", "training/*"} <= rows
    # its spans came in on this server's port (otlp_port of /api/v1/services)
    lanes = requests.get(url + "/api/v1/lanes", params=RUN, timeout=5).json()["lanes"]
    assert [(x["lane"], x["states"]) for x in lanes] == [("replica_0", {"vllm_generate": 3})]


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).ok
    except requests.RequestException:
        return False


OUR_CLIENT = '''
import logging, sys, rl_insight
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
rl_insight.init("ours", "against-upstream")
for step in range(1, 6):
    rl_insight.metric_gauge("training/global_step", step)
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
        pass
    rl_insight.flush(5)
rl_insight.finish()
print("TRAINING GOES ON")
'''


def test_this_client_says_once_what_is_wrong_with_an_upstream_server(upstream_python,
                                                                    tmp_path):
    port = netaddr.free_port()
    conf = tmp_path / "server.yaml"
    conf.write_text((REPO / "tests/upstream/server_config.yaml").read_text()
                    .replace("PORT", str(port)).replace("DIR", str(tmp_path)))
    server = subprocess.Popen([str(upstream_python), "-m", "rl_insight.server.http_api",
                               "--config", str(conf)], env=clean_env(), cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(url + "/healthz"), 60, "upstream's server")
        r = subprocess.run([sys.executable, "-c", OUR_CLIENT], cwd=tmp_path, timeout=120,
                           env=clean_env(RL_INSIGHT_SERVER_URL=url, PYTHONPATH=str(REPO)),
                           capture_output=True, text=True)
    finally:
        server.kill()
        server.wait(10)
    assert r.returncode == 0 and "TRAINING GOES ON" in r.stdout, r.stderr[-3000:]
    said = [x for x in r.stderr.splitlines() if "upstream rl-insight 0.3 server" in x]
    assert len(said) == 1, r.stderr[-3000:]
    assert "rl-insight server start" in said[0] and url in said[0]
    errors = [x for x in r.stderr.splitlines() if x.startswith("ERROR")]
    assert errors == said, errors  # no error line per push after it
