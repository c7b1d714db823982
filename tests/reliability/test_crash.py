"""The server SIGKILLed at random moments under load, 50 times: after each restart every
write it acknowledged is there and it is ready.

Three senders run against a real server process (services off, spans relayed to a port
nobody listens on, so every acknowledged span stays in the spool): target registrations
(each a new target and, every few, a new experiment), pushes (each a new group) and span
exports (each a known number of spans). What each sender saw answered 2xx is recorded;
after the kill and the next start, the server must list every acknowledged target and
experiment, expose every acknowledged group, and hold at least every acknowledged span
(a request the server committed but whose answer the kill cut off may be there too).
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import threading
import time

import pytest
import requests

from rl_insight.collector.otlp_encode import encode
from rl_insight.common import netaddr
from rl_insight.wire.events import Identity, Span
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

KILLS = 50
OFF = ["prometheus.enabled=false", "tempo.enabled=false", "grafana.enabled=false",
       "alertmanager.enabled=false"]
SPANS_PER_EXPORT = 5


class Acked:
    """What the server answered 2xx, per kind; each sender's own counter for the next
    unique name, so a write is never repeated under another name."""

    def __init__(self) -> None:
        self.targets: set[str] = set()
        self.experiments: set[str] = set()
        self.groups: set[str] = set()
        self.spans = 0
        self.next = {"target": 0, "group": 0, "span": 0}


def _send_until(stop: threading.Event, url: str, acked: Acked, kind: str) -> None:
    s = requests.Session()
    while not stop.is_set():
        i = acked.next[kind]
        acked.next[kind] += 1
        try:
            if kind == "target":
                exp = f"e{i // 4}"
                r = s.post(url + "/api/v1/prometheus/targets", timeout=5, json={
                    "job_name": "crash", "targets": [f"10.{i // 62500 % 250}.{i // 250 % 250}."
                                                     f"{i % 250 + 1}:9000"],
                    "project": "crash", "experiment_name": exp})
            elif kind == "group":
                r = s.put(url + f"/metrics/job/crash/instance/g{i}", timeout=5,
                          data=f"# TYPE crash_value gauge\ncrash_value {i}\n")
            else:
                t = time.time_ns()
                body = encode([(Identity("crash", "spans"), "crash",
                                Span("step", t, t + 1000, f"lane_{i}", (), 0, k + 1, 0, True))
                               for k in range(SPANS_PER_EXPORT)])
                r = s.post(url + "/v1/traces", data=body, timeout=5,
                           headers={"Content-Type": "application/x-protobuf"})
        except requests.RequestException:
            continue  # the kill: not acknowledged
        if r.status_code >= 300:
            continue
        if kind == "target":
            acked.targets.add(f"10.{i // 62500 % 250}.{i // 250 % 250}.{i % 250 + 1}:9000")
            acked.experiments.add(exp)
        elif kind == "group":
            acked.groups.add(f"g{i}")
        else:
            acked.spans += SPANS_PER_EXPORT


def _start(cli, log) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cli.args("server", "start"), env=cli.env, cwd=cli.home,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{cli.setting('server.port')}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}) after a kill; "
                                 f"see {log.name}")
        try:
            return requests.get(url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    wait_for(ready, 60, "the server ready again after a SIGKILL")
    return proc, url


def _check(url: str, acked: Acked, kill: int) -> None:
    listed = {t["target"] for t in requests.get(url + "/api/v1/prometheus/targets",
                                                timeout=10).json()["targets"]}
    lost = acked.targets - listed
    assert not lost, f"after kill {kill}: acknowledged targets missing: {sorted(lost)[:5]}"
    exps = {e["experiment_name"] for e in requests.get(url + "/api/v1/experiments",
                                                       timeout=10).json()["experiments"]
            if e["project"] == "crash"}
    assert acked.experiments <= exps, f"after kill {kill}: {acked.experiments - exps}"
    text = requests.get(url + "/metrics", timeout=10).text
    exposed = set(re.findall(r'crash_value\{instance="(g\d+)",job="crash"\}', text))
    lost = acked.groups - exposed
    assert not lost, f"after kill {kill}: acknowledged pushes missing: {sorted(lost)[:5]}"
    spooled = float(re.search(r"^rl_insight_spool_spans (\S+)$", text, re.M).group(1))
    assert spooled >= acked.spans, f"after kill {kill}: {spooled} spans spooled, " \
                                   f"{acked.spans} acknowledged"


def test_every_acknowledged_write_survives_sigkill_at_random_moments(cli, tmp_path):
    cli.overrides += [*OFF, f"traces.relay_url=http://127.0.0.1:{netaddr.free_port()}"
                      "/v1/traces", "traces.spool_max_bytes=1000000000"]
    rnd = random.Random(20261202)
    acked = Acked()
    log = open(tmp_path / "server.log", "ab")  # noqa: SIM115 (every start appends)
    proc, url = _start(cli, log)
    try:
        for kill in range(1, KILLS + 1):
            stop = threading.Event()
            senders = [threading.Thread(target=_send_until, args=(stop, url, acked, kind))
                       for kind in ("target", "group", "span")]
            for t in senders:
                t.start()
            time.sleep(rnd.uniform(0.05, 0.6))  # a random moment under load
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            stop.set()
            for t in senders:
                t.join(10)
            proc, url = _start(cli, log)
            _check(url, acked, kill)
        assert len(acked.targets) > KILLS and len(acked.groups) > KILLS and \
            acked.spans > KILLS * SPANS_PER_EXPORT, "the load never got going"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()
