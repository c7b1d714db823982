"""The server's data plane against real parts: Prometheus (Debian's), Debian's
prometheus-pushgateway for conformance, prometheus_client and the OpenTelemetry SDK as
clients, and a FAKE Tempo (an OTLP receiver decoding with opentelemetry-proto)."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
import time
from datetime import datetime

import pytest
import requests
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    delete_from_gateway,
    push_to_gateway,
    pushadd_to_gateway,
    start_http_server,
)
from prometheus_client.parser import text_string_to_metric_families

from rl_insight.common import netaddr
from tests.conftest import prom_query, wait_equal, wait_for
from tests.fakes.otlp_receiver import FakeTempo

pytestmark = pytest.mark.integration
FAST = ["prometheus.scrape_interval=1s", "push.persist_interval_s=0.5"]


def active_targets(prom: str) -> list[dict]:
    try:
        return requests.get(prom + "/api/v1/targets", params={"state": "active"},
                            timeout=5).json()["data"]["activeTargets"]
    except (requests.RequestException, ValueError, KeyError):
        return []


def target_health(prom: str, job: str) -> list[dict]:
    return [t for t in active_targets(prom) if t["labels"].get("job") == job]


@pytest.fixture
def exporter():
    """A real prometheus_client exporter to register as a scrape target."""
    port = netaddr.free_port()
    reg = CollectorRegistry()
    Gauge("sim_engine_running", "running requests", registry=reg).set(3)
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    yield f"127.0.0.1:{port}"
    server.shutdown()


def test_target_scraped_survives_restart_and_leaves_when_archived(cli, exporter):
    url = cli.start(*FAST)
    body = {"job_name": "vllm", "targets": [exporter], "labels": [{"replica": 0}],
            "project": "proj", "experiment_name": "run1"}
    r = requests.post(url + "/api/v1/prometheus/targets", json=body, timeout=5)
    assert r.status_code == 200, r.text
    query = 'up{job="vllm",project="proj",experiment_name="run1",replica="0"}'
    wait_for(lambda: [x for x in prom_query(cli.prometheus, query) if x["value"][1] == "1"],
             15, "the registered target to be scraped (up == 1)")
    # idempotent
    again = requests.post(url + "/api/v1/prometheus/targets", json=body, timeout=5).json()
    assert again["changed"] == 0

    cli.stop()
    restarted_at = time.time()
    url = cli.start(*FAST)
    listed = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    assert [t["target"] for t in listed] == [exporter]

    def scraped_after_restart():
        # a scrape that began after the restart (Prometheus' own clock, this machine's):
        # "0001-01-01..." before its first
        for t in target_health(cli.prometheus, "vllm"):
            last = t.get("lastScrape", "")
            if t["health"] == "up" and last and not last.startswith("0001") and \
                    datetime.fromisoformat(last).timestamp() >= restarted_at:
                return t
        return None

    t = wait_for(scraped_after_restart, 15, "the target to be scraped after a restart")
    assert t["labels"]["project"] == "proj"
    shown = requests.get(url + "/api/v1/experiments/targets",
                         params={"project": "proj", "experiment_name": "run1"},
                         timeout=5).json()
    assert shown["targets"][0]["health"] == "up"

    r = requests.post(url + "/api/v1/experiments/archive",
                      json={"project": "proj", "experiment_name": "run1"}, timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "archived"
    wait_for(lambda: not target_health(cli.prometheus, "vllm"), 15,
             "the archived experiment's target to leave Prometheus' active targets")
    r = requests.post(url + "/api/v1/prometheus/targets", json=body, timeout=5)
    assert r.status_code == 409 and "archived" in r.json()["error"]
    exps = cli.run("server", "experiments", "list")
    assert "archived" in exps.stdout
    assert requests.post(url + "/api/v1/experiments/restore",
                         json={"project": "proj", "experiment_name": "run1"},
                         timeout=5).status_code == 200
    wait_for(lambda: target_health(cli.prometheus, "vllm"), 15, "the restored target back")


def test_targets_add_from_yaml(route_server, exporter, tmp_path):
    cli = route_server.cli  # shared (tests/worlds.py): FAST's settings, no restart
    f = tmp_path / "t.yaml"
    f.write_text(f"- job_name: node-exporter\n  targets: ['{exporter}']\n"
                 "  labels: {node: node-a}\n")
    r = cli.run("server", "targets", "add", str(f))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["registered"] == 1
    wait_for(lambda: prom_query(cli.prometheus, f'up{{job="node-exporter",node="node-a",'
                                                f'instance="{exporter}"}}'),
             15, "the YAML-registered target scraped")
    f.write_text("job_name: x\ntargets: ['http://bad:1']\n")
    r = cli.run("server", "targets", "add", str(f))
    assert r.returncode != 0 and "only host:port" in r.stderr
    # upstream rl-insight's targets file: the registrations under jobs:
    f.write_text(f"jobs:\n  - job_name: upstream-form\n    targets:\n      - target: "
                 f"'{exporter}'\n        labels: {{role: engine}}\n")
    r = cli.run("server", "targets", "add", str(f))
    assert r.returncode == 0, r.stderr
    wait_for(lambda: prom_query(cli.prometheus, f'up{{job="upstream-form",role="engine",'
                                                f'instance="{exporter}"}}'),
             15, "the target of an upstream targets file scraped")


def test_the_query_proxy_passes_prometheus_answers_on_with_their_status(route_server):
    """A query Prometheus refuses is the caller's mistake: its 400 and its message, not a
    200 around an error; a good one is Prometheus' own body."""
    url = route_server.url
    bad = requests.get(url + "/api/v1/prometheus/query", params={"query": "sum(up"},
                       timeout=10)
    assert bad.status_code == 400, bad.text
    assert "Prometheus answered 400" in bad.text and "parse error" in bad.text
    good = requests.get(url + "/api/v1/prometheus/query", params={"query": "vector(1)"},
                        timeout=10)
    assert good.status_code == 200 and good.json()["status"] == "success", good.text


def test_push_to_gateway_roundtrip_through_prometheus(route_server):
    cli, url = route_server.cli, route_server.url  # shared: FAST's settings, own run
    gateway = url.split("//", 1)[1]
    reg = CollectorRegistry()
    Gauge("rl_insight_monitor_actor_pg_loss", "loss", ["key"], registry=reg).labels(
        "actor/pg_loss").set(0.25)
    Counter("rl_insight_monitor_steps", "steps", registry=reg).inc(7)
    Histogram("rl_insight_monitor_step_seconds", "step time", buckets=(1, 5),
              registry=reg).observe(2)
    key = {"project": "proj", "experiment_name": "run/2"}  # a slash: base64 in the path
    push_to_gateway(gateway, job="rl_insight", registry=reg, grouping_key=key)

    q = ('rl_insight_monitor_actor_pg_loss{job="rl_insight",project="proj",'
         'experiment_name="run/2",key="actor/pg_loss"}')
    res = wait_for(lambda: prom_query(cli.prometheus, q), 15, "the pushed gauge in Prometheus")
    assert res[0]["value"][1] == "0.25"
    # instance="" (the Pushgateway's convention) keeps Prometheus from adding the
    # server's own address; Prometheus stores an empty label as absent.
    assert "instance" not in res[0]["metric"]
    run = 'project="proj",experiment_name="run/2"'
    assert prom_query(cli.prometheus, f"rl_insight_monitor_steps_total{{{run}}}")
    wait_for(lambda: prom_query(cli.prometheus,
                                f'rl_insight_monitor_step_seconds_bucket{{le="5.0",{run}}}'),
             15, "the pushed histogram buckets")

    reg2 = CollectorRegistry()
    Gauge("rl_insight_monitor_extra", "more", registry=reg2).set(1)
    pushadd_to_gateway(gateway, job="rl_insight", registry=reg2, grouping_key=key)
    assert {"rl_insight_monitor_extra", "rl_insight_monitor_actor_pg_loss"} <= \
        _group_series(url, {**key, "job": "rl_insight"})

    delete_from_gateway(gateway, job="rl_insight", grouping_key=key)
    assert _group_series(url, {**key, "job": "rl_insight"}) == set()
    wait_for(lambda: not prom_query(cli.prometheus, q), 15,
             "the deleted series to go stale in Prometheus")


def _group_series(url: str, key: dict) -> set[str]:
    """Names of the samples the server's /metrics holds for one pushed group (the shared
    server holds other tests' groups as well)."""
    text = requests.get(url + "/metrics", timeout=5).text
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples
            if all(s.labels.get(k) == v for k, v in key.items())}


def _sequence(gateway: str) -> None:
    """Pushes, merges and deletes, through prometheus_client and raw HTTP."""
    def reg(**values):
        r = CollectorRegistry()
        for name, v in values.items():
            Gauge(name, f"help of {name}", ["k"], registry=r).labels("v").set(v)
        return r

    push_to_gateway(gateway, "j1", reg(a=1, b=2), grouping_key={"inst": "i1"})
    pushadd_to_gateway(gateway, "j1", reg(b=3, c=4), grouping_key={"inst": "i1"})
    push_to_gateway(gateway, "j2", reg(a=5), grouping_key={"path": "/x/y", "e": ""})
    push_to_gateway(gateway, "j1", reg(d=6), grouping_key={"inst": "i2"})
    push_to_gateway(gateway, "j1", reg(d=7), grouping_key={"inst": "i2"})  # PUT replaces
    delete_from_gateway(gateway, "j1", grouping_key={"inst": "i2"})
    base = f"http://{gateway}/metrics"
    raw = [
        ("PUT", "/job/j3/instance/x", 'm{instance="y",z="1"} 8\nn 9\n'),
        ("POST", "/job/j3/instance/x", "n 10\n"),
        ("POST", f"/job@base64/{base64.urlsafe_b64encode(b'j/4').decode()}", "o 11\n"),
        ("PUT", "/job/j5", '# HELP h hist\n# TYPE h histogram\nh_bucket{le="1"} 1\n'
                           'h_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n'),
        ("PUT", "/job/j6", ""),  # an empty group still exists, with its push time
        ("PUT", "/job/j7", "q 1\n"),
        ("DELETE", "/job/j7", ""),
        ("DELETE", "/job/never", ""),
    ]
    for method, path, body in raw:
        r = requests.request(method, base + path, data=body.encode(), timeout=5)
        assert r.status_code < 300, (method, path, r.status_code, r.text)


def _series(url: str) -> dict:
    jobs = {"j1", "j2", "j3", "j/4", "j5", "j6", "j7", "never"}
    out = {}
    text = requests.get(url + "/metrics", timeout=5).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("job") in jobs:
                value = "t" if s.name in ("push_time_seconds",) else s.value
                out[(s.name, tuple(sorted(s.labels.items())))] = value
    return out


@pytest.mark.skipif(not shutil.which("prometheus-pushgateway"),
                    reason="Debian's prometheus-pushgateway is installed by `make test`")
def test_conformance_with_debian_pushgateway(cli, tmp_path):
    url = cli.start("prometheus.enabled=false")
    port = netaddr.free_port()
    # Debian's build persists to a shared file by default: give it a fresh one.
    pgw = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}",
                            f"--persistence.file={tmp_path / 'pgw.data'}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _ready(f"http://127.0.0.1:{port}/-/ready"), 10, "the pushgateway")
        _sequence(f"127.0.0.1:{port}")
        _sequence(url.split("//", 1)[1])
        theirs, ours = _series(f"http://127.0.0.1:{port}"), _series(url)
    finally:
        pgw.terminate()
        pgw.wait(10)
    assert len(theirs) > 10
    assert ours == theirs


def _ready(u: str) -> bool:
    try:
        return requests.get(u, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _tracer(endpoint: str, **kw):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "rl_insight_monitor"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, **kw),
                                                   max_export_batch_size=50))
    return provider


def _emit(provider, start: int, count: int) -> None:
    tracer = provider.get_tracer("test")
    for i in range(start, start + count):
        with tracer.start_as_current_span("vllm_generate") as span:
            span.set_attribute("seq", i)
            span.set_attribute("state_name", "vllm_generate")
            span.set_attribute("state_lane_id", f"replica_{i % 3}")
            span.set_attribute("project", "proj")
            span.set_attribute("experiment_name", "run1")
    assert provider.force_flush(30_000)


def spooled(url: str) -> int:
    return requests.get(url + "/api/v1/services", timeout=5).json()["traces"]["spooled_spans"]


def test_spans_relay_spool_and_replay_in_order(cli):
    tempo = FakeTempo(netaddr.free_port()).start()
    url = cli.start("prometheus.enabled=false", f"traces.relay_url={tempo.url}",
                    "traces.retry_max_s=0.5")
    provider = _tracer(url + "/v1/traces")
    try:
        _emit(provider, 0, 120)
        wait_for(lambda: len(tempo.spans) == 120, 15, "120 spans at the receiver")
        tempo.stop()
        _emit(provider, 120, 200)  # Tempo is down: the server takes them into its spool
        wait_for(lambda: spooled(url) == 200, 15, "200 spans in the spool")
        lanes = requests.get(url + "/api/v1/lanes", params={"project": "proj"}).json()
        assert {ln["lane"] for ln in lanes["lanes"]} == {"replica_0", "replica_1", "replica_2"}
        assert sum(ln["spans"] for ln in lanes["lanes"]) == 320
        # the relay must have met the outage for its sends to count as replay (on a
        # loaded machine it may not have tried yet, and then nothing was replayed)
        wait_for(lambda: "rl_insight_trace_relay_up 0.0" in
                 requests.get(url + "/metrics", timeout=5).text.splitlines(), 15,
                 "the relay to find Tempo down")
        tempo.start()
        wait_for(lambda: len(tempo.spans) >= 320, 20, "the spooled spans replayed")
    finally:
        provider.shutdown()
        tempo.stop()
    seqs = tempo.attr("seq")
    assert seqs == list(range(320)), "every span exactly once, in order"
    assert set(tempo.attr("service.name")) == {"rl_insight_monitor"}
    # the relay counts a batch once Tempo answered and the spool let it go: a moment
    # after the receiver has it
    want = ["rl_insight_spans_relayed_total 320.0", "rl_insight_spans_replayed_total 200.0",
            "rl_insight_spool_spans 0.0"]

    def counters() -> list[str]:
        return sorted(ln for ln in requests.get(url + "/metrics", timeout=5).text.splitlines()
                      if ln.split(" ")[0] in ("rl_insight_spans_relayed_total",
                                              "rl_insight_spans_replayed_total",
                                              "rl_insight_spool_spans"))
    wait_equal(counters, want, 10, "the relay's counters")


def test_spool_survives_a_server_restart_and_gzip_and_json_are_accepted(cli):
    tempo = FakeTempo(netaddr.free_port())  # not started: Tempo is down
    url = cli.start("prometheus.enabled=false", f"traces.relay_url={tempo.url}",
                    "traces.retry_max_s=0.5")
    from opentelemetry.exporter.otlp.proto.http import Compression

    provider = _tracer(url + "/v1/traces", compression=Compression.Gzip)
    _emit(provider, 0, 30)
    provider.shutdown()
    # OTLP/JSON: hex ids, as the OTLP specification encodes them
    doc = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "rl_insight_monitor"}}]},
        "scopeSpans": [{"spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "vllm_sleep", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "seq", "value": {"intValue": "30"}}]}]}]}]}
    r = requests.post(url + "/v1/traces", data=gzip.compress(json.dumps(doc).encode()),
                      headers={"Content-Type": "application/json",
                               "Content-Encoding": "gzip"}, timeout=5)
    assert r.status_code == 200, r.text
    assert spooled(url) == 31
    cli.stop()
    tempo.start()
    try:
        url = cli.start("prometheus.enabled=false", f"traces.relay_url={tempo.url}")
        wait_for(lambda: len(tempo.spans) == 31, 15, "spans spooled before the restart")
        assert tempo.attr("seq") == list(range(31))
        span = tempo.spans[-1][1]
        assert span.trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    finally:
        tempo.stop()


def test_bad_input_is_refused_with_reasons_and_stored_data_survives(cli, exporter):
    cli.env["RL_INSIGHT_TOKEN"] = "s3cret"
    url = cli.start("prometheus.enabled=false", "push.max_body_bytes=4096",
                    "push.max_series_per_group=20")
    auth = {"Authorization": "Bearer s3cret"}
    ok = requests.put(url + "/metrics/job/keep", data=b"kept_metric 42\n", headers=auth)
    assert ok.status_code == 200
    reg = {"job_name": "vllm", "targets": [exporter], "project": "p", "experiment_name": "e"}
    assert requests.post(url + "/api/v1/prometheus/targets", json=reg,
                         headers=auth).status_code == 200
    before_metrics = _series_named(url, "kept_metric", auth)
    before_targets = requests.get(url + "/api/v1/prometheus/targets", headers=auth).json()

    cases = [
        ("PUT", "/metrics/job/x", b"this is not valid\n", {}, 400, "parsing error"),
        ("PUT", "/metrics/job/x", b"val-aux/gsm8k 1\n", {}, 400, "invalid metric name"),
        ("PUT", "/metrics/job/x/bad-label/v", b"a 1\n", {}, 400, "improper label name"),
        ("PUT", "/metrics/job/x", b"a 1 1700000000\n", {}, 400, "timestamp"),
        ("PUT", "/metrics/job/x", b"# TYPE kept_metric counter\nkept_metric 1\n", {}, 409,
         "one type"),
        ("PUT", "/metrics/job/x", b"x 1\n" * 2000, {}, 413, "push.max_body_bytes"),
        ("PUT", "/metrics/job/x", "".join(f"s{i} 1\n" for i in range(30)).encode(), {}, 400,
         "max_series_per_group"),
        ("PUT", "/metrics/job/x", b"\xff\xfe", {}, 400, "not UTF-8"),
        ("PUT", "/metrics/job/x", b"a 1\n", {"Content-Type":
                                            "application/vnd.google.protobuf"}, 415, "text"),
        ("POST", "/v1/traces", b"\x0a\xff\xff", {"Content-Type": "application/x-protobuf"},
         400, "not an OTLP"),
        ("POST", "/v1/traces", b"{", {"Content-Type": "application/json"}, 400, "not JSON"),
        ("POST", "/v1/traces", b"x", {"Content-Type": "text/plain"}, 415, "Content-Type"),
        ("POST", "/v1/traces", b"notgzip", {"Content-Type": "application/x-protobuf",
                                            "Content-Encoding": "gzip"}, 400, "corrupt"),
        ("POST", "/api/v1/prometheus/targets", b"{not json", {}, 400, "not JSON"),
        ("POST", "/api/v1/prometheus/targets",
         json.dumps({"job_name": "j", "targets": ["h:1/metrics"]}).encode(), {}, 400,
         "only host:port"),
        ("POST", "/api/v1/prometheus/targets",
         json.dumps({"job_name": "j", "targets": ["h:1"], "labels": {"job": "x"}}).encode(),
         {}, 400, "reserved"),
        ("POST", "/api/v1/experiments/archive", b'{"project": "nope", '
         b'"experiment_name": "none"}', {}, 404, "no experiment"),
    ]
    for method, path, body, headers, status, reason in cases:
        r = requests.request(method, url + path, data=body, headers={**auth, **headers},
                             timeout=10)
        assert r.status_code == status, (path, body[:40], r.status_code, r.text)
        assert reason in r.json()["error"], (path, r.text)

    # without the token, or with a wrong one, every write is refused, and every read of
    # run data; liveness and the service ports stay open
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        for method, path in (("PUT", "/metrics/job/keep"), ("DELETE", "/metrics/job/keep"),
                             ("POST", "/api/v1/prometheus/targets"), ("POST", "/v1/traces"),
                             ("POST", "/api/v1/experiments/archive")):
            r = requests.request(method, url + path, data=b"kept_metric 0\n",
                                 headers=headers, timeout=5)
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert "RL_INSIGHT_TOKEN" in r.json()["error"]
    assert requests.get(url + "/metrics", timeout=5).status_code == 401
    assert requests.get(url + "/metrics", headers=auth, timeout=5).status_code == 200
    assert requests.get(url + "/healthz", timeout=5).status_code == 200
    assert requests.get(url + "/api/v1/services", timeout=5).status_code == 200

    assert _series_named(url, "kept_metric", auth) == before_metrics == {"keep": 42.0}
    assert requests.get(url + "/api/v1/prometheus/targets", headers=auth).json() == \
        before_targets
    cli.stop()
    url = cli.start("prometheus.enabled=false")
    assert _series_named(url, "kept_metric", auth) == {"keep": 42.0}, "groups persist"


def _series_named(url: str, name: str, headers: dict | None = None) -> dict:
    out = {}
    for fam in text_string_to_metric_families(requests.get(url + "/metrics",
                                                           headers=headers).text):
        for s in fam.samples:
            if s.name == name:
                out[s.labels["job"]] = s.value
    return out


def test_finished_runs_expire_and_ipv6_bind(cli):
    overrides = [o for o in cli.overrides if not o.startswith("host=")]
    cli.overrides = ["host=::1"] + overrides
    port = cli.setting("server.port")
    url = cli.start("prometheus.enabled=false", "push.finished_ttl_s=1",
                    "push.persist_interval_s=0.2")
    url = f"http://[::1]:{port}"
    reg = CollectorRegistry()
    Gauge("g", "g", registry=reg).set(1)
    push_to_gateway(f"[::1]:{port}", "rl_insight", reg,
                    grouping_key={"project": "p", "experiment_name": "done"})
    assert _series_named(url, "g") == {"rl_insight": 1.0}
    r = requests.post(url + "/api/v1/experiments/finish",
                      json={"project": "p", "experiment_name": "done"}, timeout=5)
    assert r.json()["status"] == "finished"
    wait_for(lambda: _series_named(url, "g") == {}, 10, "the finished run's group to expire")
