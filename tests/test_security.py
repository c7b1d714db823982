"""With a token, nothing is written without it; targets are host:port within the
allowed networks; secrets stay out of logs, command lines and status; Grafana is never
left at admin/admin on a non-loopback address."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest
import requests

from rl_insight import config
from rl_insight.server.services import SERVICES
from tests.conftest import wait_for

pytestmark = pytest.mark.integration
WRITE = ("post", "put", "delete", "patch")


def write_routes(url: str) -> list[tuple[str, str]]:
    schema = requests.get(url + "/openapi.json", timeout=5).json()
    out = []
    for path, ops in schema["paths"].items():
        for method in ops:
            if method in WRITE:
                out.append((method.upper(), re.sub(r"\{[^}]+\}", "job/x", path)))
    return out


def test_every_write_route_in_the_schema_needs_the_token(cli):
    cli.env["RL_INSIGHT_TOKEN"] = "s3cret-t0ken"
    url = cli.start("prometheus.enabled=false")
    routes = write_routes(url)
    # targets x2, bind, experiments x3 and a run's configuration, push x3 and the batch,
    # traces, profiles: ask, and the lane actors' take and result; a profiler's import
    assert len(routes) == 16, routes
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            r = requests.request(method, url + path, headers=headers, data=b"{}", timeout=5)
            assert r.status_code == 401, (method, path, headers, r.status_code)
    ok = requests.post(url + "/api/v1/experiments/archive", data=b"{}",
                       headers={"Authorization": "Bearer s3cret-t0ken"}, timeout=5)
    assert ok.status_code == 400  # past the token check, refused for its body
    # reads: liveness and the service ports open, run data behind the token
    for path in ("/healthz", "/api/v1/services"):
        assert requests.get(url + path, timeout=5).status_code == 200
    for path in ("/metrics", "/api/v1/experiments", "/", "/api/v1/prometheus/targets",
                 "/api/v1/profiles"):
        assert requests.get(url + path, timeout=5).status_code == 401, path
        assert requests.get(url + path, timeout=5, headers={
            "Authorization": "Bearer s3cret-t0ken"}).status_code == 200, path


def test_secrets_stay_out_of_logs_command_lines_and_status(cli):
    r = cli.run("server", "start", "--detach", "--set", "server.token=TOKEN-abc-123",
                "--set", "grafana.admin_password=PW-xyz-789", "--set",
                "prometheus.enabled=false")
    assert r.returncode == 0, r.stderr
    secrets = ("TOKEN-abc-123", "PW-xyz-789")
    info = json.loads((cli.home / "run" / "server.json").read_text())
    cmdline = Path(f"/proc/{info['pid']}/cmdline").read_bytes().decode(errors="replace")
    status = cli.run("server", "status", "--json").stdout
    shown = cli.run("server", "config", "--set", "server.token=TOKEN-abc-123").stdout
    logs = "".join(p.read_text(errors="replace") for p in (cli.home / "logs").rglob("*.log"))
    for secret in secrets:
        for where, text in (("command line", cmdline), ("status", status),
                            ("config", shown), ("logs", logs), ("start output", r.stdout)):
            assert secret not in text, f"{secret} shown in {where}"
    assert '"auth": true' in status
    url = f"http://127.0.0.1:{cli.setting('server.port')}"
    assert requests.post(url + "/v1/traces", timeout=5).status_code == 401  # it is in force


def test_a_server_beyond_loopback_makes_a_token_and_refuses_writes_without_it(cli):
    cli.overrides = ["host=0.0.0.0"] + [o for o in cli.overrides if not o.startswith("host=")]
    r = cli.run("server", "start", "--detach", "--set", "prometheus.enabled=false")
    assert r.returncode == 0, r.stdout + r.stderr
    path = cli.home / "state" / "token"
    token = path.read_text().strip()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert f"  export RL_INSIGHT_TOKEN={token}\n" in r.stdout, r.stdout
    log = cli.home / "logs" / "server.log"
    wait_for(lambda: f"$(cat {path})" in log.read_text(), 30,  # the log names the file,
             "the server's own summary in its log")
    assert token not in log.read_text()  # never the value
    url = f"http://127.0.0.1:{cli.setting('server.port')}"
    body = {"job_name": "vllm", "targets": ["127.0.0.1:9"], "project": "p",
            "experiment_name": "e"}
    refused = requests.post(url + "/api/v1/prometheus/targets", json=body, timeout=5)
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert "RL_INSIGHT_TOKEN" in refused.json()["error"]
    ok = requests.post(url + "/api/v1/prometheus/targets", json=body, timeout=5,
                       headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200, ok.text
    # this user's commands on this machine find the token without an export
    r = cli.run("server", "experiments", "finish", "--project", "p", "--experiment", "e")
    assert r.returncode == 0, r.stdout + r.stderr
    # a restart keeps it: exported values on other hosts stay valid
    cli.stop()
    r = cli.run("server", "start", "--detach", "--set", "prometheus.enabled=false")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"  export RL_INSIGHT_TOKEN={token}\n" in r.stdout and "(kept in" in r.stdout
    assert requests.post(url + "/v1/traces", timeout=5).status_code == 401


def test_a_loopback_server_takes_writes_without_a_token(cli):
    url = cli.start("prometheus.enabled=false")
    assert not (cli.home / "state" / "token").exists()
    r = requests.post(url + "/api/v1/experiments/finish", timeout=5,
                      json={"project": "p", "experiment_name": "e"})
    assert r.status_code != 401, r.text


def test_targets_outside_the_allowed_networks_are_refused(cli):
    url = cli.start("prometheus.enabled=false",
                    "server.allowed_networks=127.0.0.0/8,::1/128")
    def reg(target):
        return requests.post(url + "/api/v1/prometheus/targets",
                             json={"job_name": "x", "targets": [target]}, timeout=10)
    assert reg("127.0.0.1:9100").status_code == 200
    assert reg("[::1]:9100").status_code == 200
    assert reg("localhost:9100").status_code == 200
    r = reg("10.1.2.3:9100")
    assert r.status_code == 403 and "outside server.allowed_networks" in r.json()["error"]
    for bad in ("http://127.0.0.1:9100", "127.0.0.1:9100/metrics", "user:pw@127.0.0.1:1"):
        assert reg(bad).status_code == 400


@pytest.mark.parametrize("host, configured, generated", [
    ("0.0.0.0", "admin", True), ("127.0.0.1", "admin", False), ("0.0.0.0", "chosen", False)])
def test_grafana_is_not_left_at_admin_admin(home, tmp_path, caplog, host, configured,
                                            generated):
    s = config.load(overrides=[f"host={host}", f"grafana.admin_password={configured}"])
    gh = tmp_path / "g"
    (gh / "bin").mkdir(parents=True)
    (gh / "bin" / "grafana").write_text("")
    with caplog.at_level(logging.WARNING):
        launch = SERVICES["grafana"].launch(s, gh / "bin" / "grafana")
    ini = Path(launch.argv[-1]).read_text()
    password = re.search(r"admin_password = (\S+)", ini).group(1)
    assert os.stat(launch.argv[-1]).st_mode & 0o077 == 0  # the ini holds it: owner only
    if generated:
        stored = home / "state" / "grafana-admin-password"
        assert password != "admin" and len(password) >= 16
        assert stored.read_text().strip() == password and stored.stat().st_mode & 0o077 == 0
        assert "generated password" in caplog.text and password not in caplog.text
    else:
        assert password == configured
