"""Remote write end to end: the managed Prometheus (Debian's 2.42) copies a run's pushed
series to Debian's VictoriaMetrics (1.79), with basic auth read from a 0600 file. A
second VictoriaMetrics that expects another password gets nothing and Prometheus counts
the refused samples, so the credentials are really sent and really checked; the
password is in no process's command line, not in prometheus.yml and not in any log."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from rl_insight.common import netaddr
from tests.conftest import prom_query, wait_for

pytestmark = pytest.mark.integration

USER, PASSWORD = "rl-writer", "RW-pass-5f2c91"
OFF = ["tempo.enabled=false", "grafana.enabled=false", "alertmanager.enabled=false",
       "prometheus.scrape_interval=1s", "push.persist_interval_s=0.5"]


class VictoriaMetrics:
    """One VictoriaMetrics on a free loopback port with its own storage, its basic-auth
    password given through its environment (-envflag.enable), not its command line."""

    def __init__(self, tmp: Path, name: str, password: str) -> None:
        self.port = netaddr.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.auth = (USER, password)
        self.log = (tmp / f"{name}.log").open("wb")
        # flags of victoria-metrics 1.79 (`victoria-metrics -help`)
        self.proc = subprocess.Popen(
            ["victoria-metrics", "-envflag.enable", "-envflag.prefix=VM_",
             f"-httpListenAddr=127.0.0.1:{self.port}", f"-storageDataPath={tmp / name}",
             f"-httpAuth.username={USER}", "-retentionPeriod=1d", "-loggerLevel=WARN"],
            env={**os.environ, "VM_httpAuth_password": password}, stdout=self.log,
            stderr=subprocess.STDOUT)
        wait_for(self.healthy, 15, f"VictoriaMetrics {name} to answer /health")

    def healthy(self) -> bool:
        try:
            return requests.get(self.url + "/health", timeout=2).status_code == 200
        except requests.RequestException:
            return self.proc.poll() is not None and pytest.fail(
                f"victoria-metrics exited with {self.proc.returncode}")

    def export(self, match: str) -> list[str]:
        """Raw samples of ``match`` (JSON lines), recent ones made searchable first."""
        try:
            requests.get(self.url + "/internal/force_flush", auth=self.auth, timeout=5)
            r = requests.get(self.url + "/api/v1/export", params={"match[]": match},
                             auth=self.auth, timeout=5)
            assert r.status_code == 200, r.text  # our own credentials are right
            return r.text.splitlines()
        except requests.RequestException:
            return []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


@pytest.fixture
def stores(tmp_path):
    if not shutil.which("victoria-metrics"):
        pytest.skip("victoria-metrics comes with Debian's package of that name, which "
                    "scripts/system-deps.sh installs")
    started = []
    try:
        for name, password in (("vm-right", PASSWORD), ("vm-other", "another-password")):
            started.append(VictoriaMetrics(tmp_path, name, password))
        yield started
    finally:
        for vm in started:
            vm.stop()


def cmdlines() -> str:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes().replace(b"\0", b" ")
                           .decode(errors="replace"))
            except OSError:
                pass
    return "\n".join(out)


def test_pushed_run_metrics_are_remote_written_with_basic_auth(stores, cli):
    """(stores before cli: the server stops first, while its remote-write peers still
    answer, instead of waiting out the flush deadline against stopped ones)"""
    right, other = stores
    write = [vm.url + "/api/v1/write" for vm in stores]
    # the password as a flag: a detached start must pass it on through the environment
    url = cli.start(*OFF, f"prometheus.remote_write_urls={','.join(write)}",
                    f"prometheus.remote_write_username={USER}",
                    f"prometheus.remote_write_password={PASSWORD}")
    reg = CollectorRegistry()
    Gauge("rl_insight_monitor_actor_pg_loss", "loss", registry=reg).set(0.125)
    push_to_gateway(url.split("//", 1)[1], job="rl_insight", registry=reg,
                    grouping_key={"project": "rw-proj", "experiment_name": "rw-run"})

    match = 'rl_insight_monitor_actor_pg_loss{project="rw-proj",experiment_name="rw-run"}'
    got = wait_for(lambda: right.export(match), 25, "the pushed series in VictoriaMetrics")
    assert '"job":"rl_insight"' in got[0] and "0.125" in got[0]
    # the other store refused every write: Prometheus counts the failed samples
    failed = (f'prometheus_remote_storage_samples_failed_total{{url="{write[1]}"}} > 0')
    wait_for(lambda: prom_query(cli.prometheus, failed), 20,
             "Prometheus to count the samples the wrong password got refused")
    assert other.export(match) == [] and other.export('{__name__=~".+"}') == []
    assert not prom_query(cli.prometheus, failed.replace(write[1], write[0]))

    generated = cli.home / "generated" / "prometheus"
    secret_file = generated / "remote_write_password"
    assert secret_file.read_text() == PASSWORD
    assert os.stat(secret_file).st_mode & 0o777 == 0o600
    assert PASSWORD not in (generated / "prometheus.yml").read_text()
    assert PASSWORD not in cmdlines()
    logs = "".join(p.read_text(errors="replace") for p in (cli.home / "logs").rglob("*.log"))
    assert PASSWORD not in logs
    shown = cli.run("server", "config", "--set", f"prometheus.remote_write_password={PASSWORD}")
    assert PASSWORD not in shown.stdout and "remote_write_password: '***'" in shown.stdout
