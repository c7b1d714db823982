"""Every door of a server started with its default host (``0.0.0.0``), probed from a second
host (a network namespace of its own: tests/netns.py). Whatever listens beyond loopback
either refuses a stranger's write, control and read of run data, or is not there: Tempo and
the internals listen on loopback only; the server wants its token; the managed Prometheus
and Alertmanager want the password the server made for them (their web config). With
those credentials every documented use works, and the dashboards still fill: Prometheus
scrapes the server's /metrics with the token from its file.

The run is sent by the real client from the second host, as a training node sends it.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
import requests

from tests import netns
from tests.conftest import REPO, wait_for
from tests.test_grafana_admin import fake_grafana_home

WHY_NOT = netns.available()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(bool(WHY_NOT), reason=WHY_NOT)]
PY = sys.executable
RUN = {"project": "doors", "experiment_name": "closed"}
GUARDED = {18080: "server", 9090: "prometheus", 9093: "alertmanager", 3000: "grafana"}

CLIENT = '''
import rl_insight, time
rl_insight.init("doors", "closed")
for step in range(1, 4):
    rl_insight.metric_gauge("actor/entropy", 0.5 + step)
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0", step=step):
        time.sleep(1.5)  # not a wait: the state lasts as long as a scrape
    rl_insight.flush(5)
rl_insight.finish()
print("SENT", flush=True)
'''

# (service, method, path, body): each a write, a control or a read of run data
STRANGER = [
    ("server", "POST", "/v1/traces", b""),
    ("server", "PUT", "/metrics/job/x", b"x 1\n"),
    ("server", "POST", "/api/v1/prometheus/targets", b'{"job_name":"x","targets":["a:1"]}'),
    ("server", "POST", "/api/v1/experiments/finish", b"{}"),
    ("server", "GET", "/metrics", b""),
    ("server", "GET", "/", b""),
    ("server", "GET", "/api/v1/prometheus/query?query=up", b""),
    ("server", "GET", "/api/v1/prometheus/sd", b""),
    ("server", "GET", "/api/v1/traces/recent?project=doors&experiment_name=closed", b""),
    ("server", "GET", "/api/v1/experiments", b""),
    ("prometheus", "POST", "/api/v1/write", b""),
    ("prometheus", "POST", "/-/reload", b""),
    ("prometheus", "POST", "/-/quit", b""),
    ("prometheus", "GET", "/api/v1/query?query=up", b""),
    ("prometheus", "GET", "/federate?match[]=up", b""),
    ("alertmanager", "POST", "/api/v2/silences", b"{}"),
    ("alertmanager", "GET", "/api/v2/alerts", b""),
]
OPEN = [("server", "GET", "/healthz"), ("server", "GET", "/api/v1/services")]

PROBE = '''
import json, sys, requests
plan = json.loads(sys.argv[1])
out = []
for base, method, path, body, auth in plan:
    kw = {}
    if auth and auth[0] == "bearer":
        kw["headers"] = {"Authorization": "Bearer " + auth[1]}
    elif auth:
        kw["auth"] = tuple(auth)
    try:
        r = requests.request(method, base + path, data=body.encode("latin-1"), timeout=10,
                             **kw)
        out.append([r.status_code, r.text[:20000]])
    except requests.RequestException as exc:
        out.append([-1, exc.__class__.__name__])
print(json.dumps(out))
'''


def listening(host: netns.Host) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket in the host's namespace."""
    r = host.run("ss", "-Hltn")
    out = []
    for line in r.stdout.splitlines():
        local = line.split()[3]
        addr, _, port = local.rpartition(":")
        out.append((addr.strip("[]"), int(port)))
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("doors")
    topo = netns.Topology(["mon", "stranger"]).up()
    mon, stranger = topo["mon"], topo["stranger"]
    home = tmp / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RL_INSIGHT_", "RAY_"))}
    env.update(PYTHONPATH=str(REPO), RL_INSIGHT_HOME=str(home))
    try:
        # the default host: every service of the stack as a first start leaves it
        r = mon.run(PY, "-m", "rl_insight", "server", "start", "--detach",
                    "--set", "prometheus.scrape_interval=1s",
                    "--set", f"grafana.binary={fake_grafana_home(tmp)}", env=env, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        token = re.search(r"^  export RL_INSIGHT_TOKEN=(\S+)$", r.stdout, re.M).group(1)
        url = f"http://{mon.address}:18080"
        client = stranger.run(PY, "-c", CLIENT, env={
            **{k: v for k, v in env.items() if k != "RL_INSIGHT_HOME"},
            "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_TOKEN": token,
            "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1"}, timeout=120)
        assert client.returncode == 0 and "SENT" in client.stdout, client.stderr[-3000:]
        yield {"mon": mon, "stranger": stranger, "home": home, "url": url, "token": token,
               "stdout": r.stdout}
    finally:
        mon.run(PY, "-m", "rl_insight", "server", "stop", env=env, timeout=120)
        topo.down()


def probe(world, plan: list[tuple]) -> list[tuple[int, str]]:
    base = {"server": world["url"], **{name: f"http://{world['mon'].address}:{port}"
                                       for port, name in GUARDED.items()}}
    rows = [[base[s], m, p, (b or b"").decode("latin-1"), a] for s, m, p, b, a in plan]
    r = world["stranger"].run(PY, "-c", PROBE, json.dumps(rows), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return [tuple(x) for x in json.loads(r.stdout)]


def credentials(world, service: str) -> tuple[str, str] | None:
    """What the README's table says each user of a door presents."""
    if service == "server":
        return ("bearer", world["token"])
    password = (world["home"] / "state" / f"{service}.password").read_text().strip()
    return ("rl-insight", password)


def test_beyond_loopback_only_the_doors_that_check_a_credential_listen(world):
    sockets = listening(world["mon"])
    beyond = sorted({port for addr, port in sockets
                     if not (addr.startswith("127.") or addr == "::1")})
    assert set(beyond) <= set(GUARDED), (beyond, sockets)
    assert {18080, 9090, 9093} <= set(beyond), sockets
    # the stack's other listeners (Prometheus' own, Alertmanager's cluster port: none)
    # are on loopback; Tempo, when installed, too (tests/test_service_configs.py)


def test_a_stranger_can_neither_write_nor_control_nor_read_run_data(world):
    got = probe(world, [(s, m, p, b, None) for s, m, p, b in STRANGER])
    let_in = [(row[:3], status, text) for row, (status, text) in zip(STRANGER, got,
                                                                     strict=True)
              if status != 401]
    assert not let_in, let_in
    # Prometheus is still up (its /-/quit was refused): its readiness needs the password
    ready = probe(world, [("prometheus", "GET", "/-/ready", b"",
                           credentials(world, "prometheus"))])
    assert ready[0][0] == 200, ready
    opened = probe(world, [(s, m, p, b"", None) for s, m, p in OPEN])
    assert [status for status, _ in opened] == [200, 200], opened


def test_with_their_credentials_every_documented_use_works(world):
    plan = [("server", "GET", "/metrics", b"", credentials(world, "server")),
            ("server", "GET", "/api/v1/prometheus/query?query=up", b"",
             credentials(world, "server")),
            ("server", "GET", "/", b"", ("anyone", world["token"])),  # a browser
            ("prometheus", "GET", "/api/v1/query?query=up", b"",
             credentials(world, "prometheus")),
            ("alertmanager", "GET", "/api/v2/alerts", b"", credentials(world, "alertmanager"))]
    got = probe(world, plan)
    assert [status for status, _ in got] == [200] * len(plan), [g[0] for g in got]


def test_the_dashboards_fill_prometheus_scrapes_the_server_with_its_token(world):
    auth = credentials(world, "prometheus")

    def query(q: str) -> list:
        out = probe(world, [("prometheus", "GET", "/api/v1/query?query=" +
                             requests.utils.quote(q), b"", auth)])
        status, text = out[0]
        return json.loads(text)["data"]["result"] if status == 200 and \
            text.startswith("{") else []

    seen: list = []

    def last_value() -> list:  # the run's three steps may still be going: its last, 3.5
        seen[:] = query('rl_insight_monitor_actor_entropy{project="doors",'
                        'experiment_name="closed"}')
        return [r for r in seen if float(r["value"][1]) == 3.5]

    try:
        wait_for(last_value, 60, "the run's last value in Prometheus, scraped from the "
                 "server with the token")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; Prometheus has: {seen}") from None
    assert wait_for(lambda: query('up{job="rl_insight_server"} == 1'), 30,
                    "the server's own target up")
    # the start summary says where those credentials are
    assert "prometheus.password" in world["stdout"], world["stdout"]
