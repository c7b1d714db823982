"""Alerting end to end: the real server, Debian's Prometheus and Alertmanager, a webhook
receiver on loopback. A NaN and an infinite loss pushed by the real client, and an
engine target that does not answer, reach the webhook as alerts of their run; the
same dead target of a finished run does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from rl_insight.common import netaddr
from tests.conftest import REPO, prom_query, wait_for

pytestmark = pytest.mark.integration

P, E, DONE = "alert-proj", "run-nan", "run-done"


class Webhook:
    """What Alertmanager POSTs (webhook payload version 4: `alerts` with labels)."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hook.posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def alerts(self, name: str, **labels: str) -> list[dict]:
        """Firing alerts received with that name and those labels."""
        return [a for post in list(self.posts) for a in post["alerts"]
                if a["status"] == "firing" and a["labels"].get("alertname") == name
                and all(a["labels"].get(k) == v for k, v in labels.items())]


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.httpd.shutdown()


def push_with_the_client(server: str, experiment: str, **gauges: float) -> None:
    """What a trainer does: init, metric_gauge, flush, in a process of its own."""
    code = ("import rl_insight, sys\n"
            f"rl_insight.init(project={P!r}, experiment_name={experiment!r})\n"
            + "".join(f"rl_insight.metric_gauge({k.replace('__', '/')!r}, float({str(v)!r}))\n"
                      for k, v in gauges.items())
            + "sys.exit(0 if rl_insight.flush(10) else 1)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    env["RL_INSIGHT_SERVER_URL"] = server
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def register(server: str, experiment: str, port: int) -> None:
    r = requests.post(server + "/api/v1/prometheus/targets", timeout=10, json={
        "job_name": "vllm", "targets": [f"127.0.0.1:{port}"], "labels": {"replica": "0"},
        "project": P, "experiment_name": experiment})
    assert r.status_code == 200, r.text


def test_alerts_reach_the_webhook_the_cli_the_api_and_the_status_page(cli, webhook):
    server = cli.start("prometheus.scrape_interval=1s", "alerts.pending_for=0s",
                       "alerts.target_down_for=0s", f"alertmanager.webhook_urls={webhook.url}",
                       "alertmanager.group_wait=0s", "alertmanager.group_interval=1s")
    status = cli.run("server", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    line = next(ln for ln in status.stdout.splitlines() if ln.startswith("alertmanager"))
    assert "ready" in line and "version 0.25.0" in line, status.stdout

    # a finished run first (its dead target must not alert), then the live run's losses
    push_with_the_client(server, DONE, actor__entropy=0.5)
    assert requests.post(server + "/api/v1/experiments/finish", timeout=10, json={
        "project": P, "experiment_name": DONE}).status_code == 200
    push_with_the_client(server, E, actor__pg_loss=float("nan"),
                         actor__grad_norm=float("inf"), actor__entropy=0.5)
    own = requests.get(server + "/metrics", timeout=10).text
    assert any(ln.startswith("rl_insight_monitor_actor_pg_loss{") and ln.endswith(" NaN")
               for ln in own.splitlines()), "the server renders the NaN as Prometheus reads it"
    dead_live, dead_done = netaddr.free_ports(2)  # nothing listens on either
    register(server, E, dead_live)
    register(server, DONE, dead_done)

    for metric in ("actor_pg_loss", "actor_grad_norm"):
        got = wait_for(lambda m=metric: webhook.alerts(
            "RLInsightNonFiniteMetric", project=P, experiment_name=E, metric=m), 30,
            f"RLInsightNonFiniteMetric of {metric} at the webhook")
        assert got[0]["labels"]["severity"] == "critical"
    assert "is NaN" in webhook.alerts("RLInsightNonFiniteMetric",
                                      metric="actor_pg_loss")[0]["annotations"]["summary"]
    assert not webhook.alerts("RLInsightNonFiniteMetric", metric="actor_entropy")

    wait_for(lambda: webhook.alerts("RLInsightTargetDown", project=P, experiment_name=E,
                                    instance=f"127.0.0.1:{dead_live}"), 30,
             "RLInsightTargetDown of the live run at the webhook")
    # the finished run's target is just as dead; once a rule evaluation has seen it so
    # (ALERTS samples are written at each evaluation), it never was pending or firing
    prom = cli.prometheus
    seen = wait_for(lambda: prom_query(prom, f'timestamp(up{{job="vllm",experiment_name='
                                             f'"{DONE}"}} == 0)'), 30,
                    "Prometheus to scrape the finished run's dead target")
    since = float(seen[0]["value"][1])
    wait_for(lambda: prom_query(prom, f'timestamp(ALERTS{{alertname="RLInsightTargetDown",'
                                      f'experiment_name="{E}"}}) > {since}'), 30,
             "a rule evaluation after that scrape")
    assert prom_query(prom, 'count_over_time(ALERTS{alertname="RLInsightTargetDown",'
                            f'experiment_name="{DONE}"}}[10m])') == []
    assert not webhook.alerts("RLInsightTargetDown", experiment_name=DONE)

    r = cli.run("alerts", "--project", P, "--experiment-name", E, "--server-url", server)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(ln.split()[:3] == ["FIRING", "RLInsightNonFiniteMetric", f"{P}/{E}"]
               and "actor_pg_loss is NaN" in ln for ln in lines), r.stdout
    assert any("RLInsightTargetDown" in ln for ln in lines), r.stdout

    api = requests.get(server + "/api/v1/alerts", params={"project": P, "experiment_name": E},
                       timeout=10).json()
    assert api["prometheus"] == "ok" and api["alertmanager"] == "ok", api
    nonfinite = [a for a in api["alerts"] if a["name"] == "RLInsightNonFiniteMetric"]
    assert {a["labels"]["metric"] for a in nonfinite} == {"actor_pg_loss", "actor_grad_norm"}
    assert all(a["state"] == "firing" and a["notification"] == "sent to receivers"
               for a in nonfinite), nonfinite
    assert requests.get(server + "/api/v1/alerts", params={
        "experiment_name": DONE}, timeout=10).json()["alerts"] == []

    page = requests.get(server + "/", timeout=10).text
    section = page.split("<h2>Alerts</h2>", 1)[1].split("<h2>", 1)[0]
    assert "RLInsightNonFiniteMetric" in section and f"{P}/{E}: actor_pg_loss is NaN" in section
    cli.stop()


def test_without_alertmanager_the_server_starts_and_says_what_to_install(cli, tmp_path):
    missing = tmp_path / "no-alertmanager"
    server = cli.start(f"alertmanager.binary={missing}")
    r = cli.run("server", "status", "--set", f"alertmanager.binary={missing}")
    assert r.returncode == 0, r.stdout + r.stderr  # nothing that is installed is unready
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("alertmanager"))
    assert "not installed" in line and "rl-insight server install" in line, r.stdout
    report = json.loads(cli.run("server", "status", "--json", "--set",
                                f"alertmanager.binary={missing}").stdout)
    am = next(s for s in report["services"] if s["name"] == "alertmanager")
    assert f"{missing}: no such file" in am["message"]
    api = requests.get(server + "/api/v1/alerts", timeout=10).json()
    assert api["prometheus"] == "ok" and "not installed" in api["alertmanager"], api
    prom_yml = (cli.home / "generated" / "prometheus" / "prometheus.yml").read_text()
    assert "alerting:" not in prom_yml and "rule_files:" in prom_yml
    cli.stop()
