"""`server start | status | stop` with the real Prometheus, in subprocesses, on free ports."""

from __future__ import annotations

import json
import os
import re
import signal
import socket

import pytest
import requests

from tests.conftest import wait_for

pytestmark = pytest.mark.integration


def status(cli) -> tuple[dict, int]:
    r = cli.run("server", "status", "--json")
    return json.loads(r.stdout), r.returncode


def prom_value(prom: str, query: str) -> str | None:
    """The first sample's value of an instant query through Prometheus' HTTP API."""
    try:
        result = requests.get(prom + "/api/v1/query", params={"query": query},
                              timeout=5).json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return None
    return result[0]["value"][1] if result else None


def by_name(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["services"]}


def setting(cli, key: str) -> int:
    return int(next(o for o in cli.overrides if o.startswith(key + "=")).split("=")[1])


def test_start_status_stop_twice_leaves_nothing(cli):
    for _round in range(2):
        r = cli.run("server", "start", "--detach")
        assert r.returncode == 0, r.stdout + r.stderr
        port = setting(cli, "server.port")
        assert f"export RL_INSIGHT_SERVER_URL=http://127.0.0.1:{port}" in r.stdout
        assert "prometheus" in r.stdout and "ready" in r.stdout

        report, code = status(cli)
        assert code == 0, report
        assert report["running"] and report["server"]["ready"] and report["all_ready"]
        svc = by_name(report)
        assert svc["prometheus"]["state"] == "ready" and svc["prometheus"]["pid"]
        assert svc["prometheus"]["port"] == setting(cli, "prometheus.port")
        assert svc["prometheus"]["version"].startswith("2.")
        assert svc["tempo"]["state"] == "not installed"
        assert svc["grafana"]["state"] == "not installed"
        text = cli.run("server", "status")
        assert re.search(r"^tempo +not installed", text.stdout, re.M) and text.returncode == 0
        names = [line.split()[0] for line in text.stdout.splitlines()]
        states = {line.index(line.split()[1]) for line in text.stdout.splitlines()}
        assert names[0] == "server" and len(states) == 1  # one column for the states
        # Prometheus really serves, and scrapes the server
        prom = f"http://127.0.0.1:{setting(cli, 'prometheus.port')}"
        assert requests.get(prom + "/-/ready", timeout=5).status_code == 200
        if _round == 0:
            wait_for(lambda p=prom: prom_value(p, 'up{job="rl_insight_server"}') == "1", 15,
                     "Prometheus to scrape the server's /metrics")
        assert cli.ours(), "the server and Prometheus carry our RL_INSIGHT_HOME"

        r = cli.run("server", "stop")
        assert r.returncode == 0, r.stdout + r.stderr
        assert cli.ours() == [], "stop left processes behind"
        report, code = status(cli)
        assert code != 0 and not report["running"]


def test_killed_prometheus_is_restarted_and_counted(cli):
    assert cli.run("server", "start", "--detach").returncode == 0
    first = by_name(status(cli)[0])["prometheus"]
    os.kill(first["pid"], signal.SIGKILL)

    def back():
        p = by_name(status(cli)[0])["prometheus"]
        return p if p["ready"] and p["pid"] != first["pid"] else None

    p = wait_for(back, 10, "Prometheus back and ready after SIGKILL", interval=0.2)
    assert p["restarts"] == 1
    assert "restarts 1" in cli.run("server", "status").stdout
    server = f"http://127.0.0.1:{setting(cli, 'server.port')}"
    metrics = requests.get(server + "/metrics", timeout=5).text
    assert 'rl_insight_service_restarts_total{service="prometheus"} 1.0' in metrics
    assert cli.run("server", "stop").returncode == 0
    assert cli.ours() == []


@pytest.mark.parametrize("detach", [True, False])
def test_taken_server_port_is_one_line_error(cli, detach):
    port = setting(cli, "server.port")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        args = ["server", "start"] + (["--detach"] if detach else [])
        r = cli.run(*args, timeout=60)
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    assert f"port {port} is already in use" in err[0] and "server.port" in err[0]
    assert f"by pid {os.getpid()} (" in err[0], err[0]  # who holds it: this test
    assert "RL_INSIGHT_SERVER_PORT" in err[0]
    assert "Traceback" not in r.stdout + r.stderr
    assert cli.ours() == []


def test_taken_prometheus_port_names_its_setting(cli):
    port = setting(cli, "prometheus.port")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        r = cli.run("server", "start", "--detach", timeout=60)
    assert r.returncode != 0
    assert "prometheus.port" in r.stderr and "Traceback" not in r.stderr


def test_foreground_ctrl_c_stops_everything(cli):
    proc = cli.popen("server", "start")
    lines: list[str] = []

    def up():
        line = proc.stdout.readline()
        lines.append(line)
        return "export RL_INSIGHT_SERVER_URL" in line or proc.poll() is not None

    wait_for(up, 60, "the foreground server's summary")
    assert proc.poll() is None, "".join(lines)
    assert status(cli)[1] == 0
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert cli.ours() == []


def test_second_start_is_refused_while_one_runs(cli):
    assert cli.run("server", "start", "--detach").returncode == 0
    r = cli.run("server", "start", "--detach")
    assert r.returncode != 0 and "already runs" in r.stderr
    assert cli.run("server", "stop").returncode == 0


def test_killed_server_leaves_no_orphans_and_stop_cleans_up(cli):
    assert cli.run("server", "start", "--detach").returncode == 0
    report = status(cli)[0]
    prom_pid = by_name(report)["prometheus"]["pid"]
    os.kill(report["server"]["pid"], signal.SIGKILL)
    # Children die with the server (PR_SET_PDEATHSIG): nothing is left to run unsupervised.
    wait_for(lambda: not os.path.exists(f"/proc/{prom_pid}") or
             open(f"/proc/{prom_pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
             10, "Prometheus to exit after its server was killed")
    r = cli.run("server", "stop")
    assert r.returncode == 0, r.stderr
    assert not (cli.home / "run" / "server.json").exists()
    assert cli.ours() == []
    # and it starts again cleanly over the stale state
    assert cli.run("server", "start", "--detach").returncode == 0
    assert cli.run("server", "stop").returncode == 0
