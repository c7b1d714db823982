"""Platform mode's parts, each on its own (tests/test_platform_mode.py runs them together
on a Ray cluster against a plain Prometheus and an OTLP receiver):

- ``rl_insight.is_platform_mode()`` and ``MonitorEnv.OTLP_ENDPOINT`` as the platform change
  of verl calls them (tardis-key/verl's test of ``RLInsightLogger.register_metrics``: with
  only ``RL_INSIGHT_OTLP_ENDPOINT`` set it is true and no target is registered; with both
  variables set the server wins);
- ``otel.exporter.endpoint`` in ``init(config=...)`` (tardis-key/rl-insight d6c4a843,
  ``MonitorHubActor``: the trace endpoint without a server);
- the hub's /metrics: 9092 by default (``prometheus.metrics_report_port``), a taken port
  said loudly while training goes on, a token required when there is one;
- the lane actors' series served beside the hub's, forgotten with their run.
"""

from __future__ import annotations

import logging
import socket
import urllib.error
import urllib.request

import pytest

import rl_insight
from rl_insight import config, utils
from rl_insight.client import api
from rl_insight.client.core import endpoints
from rl_insight.client.runtime import RUNTIME
from rl_insight.collector.hub import HubCore
from rl_insight.collector.serve import MetricsServer
from rl_insight.collector.served import ServedGroups, with_labels
from rl_insight.wire.events import Identity

ENVS = ("RL_INSIGHT_SERVER_URL", "RL_INSIGHT_OTLP_ENDPOINT", "VERL_RL_INSIGHT_ENABLE")


@pytest.fixture
def fresh(monkeypatch):
    """No client yet, and no endpoint in the environment."""
    for name in ENVS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", False)
    return monkeypatch


def register_metrics_as_the_platform_change_of_verl(addresses, job, labels, registered):
    """tardis-key/verl's RLInsightLogger.register_metrics (the platform-mode change):
    ``rl_insight.is_platform_mode()`` first, outside any try; then the registration in
    a try. An rl_insight without the function stops training with AttributeError."""
    if rl_insight.is_platform_mode():
        return
    try:
        registered.append((addresses, job, labels))
    except Exception:
        pass


@pytest.mark.parametrize(("env", "platform"), [
    ({"RL_INSIGHT_OTLP_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"RL_INSIGHT_OTLP_ENDPOINT": "http://collector:4318/v1/traces",
      "RL_INSIGHT_SERVER_URL": "http://server:18080"}, False),
    ({"RL_INSIGHT_SERVER_URL": "http://server:18080"}, False),
    ({}, False),
    ({"RL_INSIGHT_OTLP_ENDPOINT": "http://collector:4318/v1/traces",
      "VERL_RL_INSIGHT_ENABLE": "0"}, False)])
def test_is_platform_mode_as_verls_register_metrics_asks_it(fresh, env, platform):
    for k, v in env.items():
        fresh.setenv(k, v)
    assert utils.MonitorEnv.OTLP_ENDPOINT == "RL_INSIGHT_OTLP_ENDPOINT"
    assert utils.MonitorEnv.SERVER_URL == "RL_INSIGHT_SERVER_URL"
    assert rl_insight.is_platform_mode() is platform
    registered: list = []
    register_metrics_as_the_platform_change_of_verl(["127.0.0.1:8000"], "vllm",
                                                     [{"replica": 0}], registered)
    assert registered == ([] if platform else [(["127.0.0.1:8000"], "vllm",
                                                 [{"replica": 0}])])


def test_otel_exporter_endpoint_in_init_config_turns_platform_mode_on(fresh):
    """upstream's config key; the environment variable wins where both are set."""
    api.init(project="p", experiment_name="e",
             config={"otel": {"exporter": {"endpoint": "http://collector:4318/v1/traces"}},
                     "prometheus": {"metrics_report_port": 9555}})
    c = RUNTIME.client
    assert c is not None and c.otlp_url == "http://collector:4318/v1/traces"
    assert not c.server_url and rl_insight.is_platform_mode()
    assert c.settings.metrics_port == 9555
    fresh.setattr(RUNTIME, "client", None)


@pytest.mark.parametrize(("given", "used"), [
    ("https://collector:4318/v1/traces", "https://collector:4318/v1/traces"),
    ("http://collector:4318", "http://collector:4318/v1/traces"),
    ("http://collector:4318/", "http://collector:4318/v1/traces"),
    ("http://gw/otlp/traces", "http://gw/otlp/traces")])
def test_the_otlp_endpoint_is_the_full_trace_url_a_bare_origin_gets_v1_traces(given, used):
    assert endpoints({"RL_INSIGHT_OTLP_ENDPOINT": given}) == ("", used)


def test_the_hub_serves_on_9092_on_the_nodes_address_by_default():
    s = config.Settings().client
    assert s.metrics_port == 9092 == utils.MonitorDefaults.METRICS_REPORT_PORT
    assert s.metrics_host == ""  # the node's address (the hub: Ray's node IP)


def _get(url: str, token: str = "") -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_taken_port_is_said_loudly_and_metrics_are_served_elsewhere(caplog):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    caplog.set_level(logging.ERROR, logger="rl_insight")
    server = MetricsServer(lambda: "x 1\n", "127.0.0.1", port, announce=False)
    try:
        assert server.port != port and server.wanted == port
        assert f"port {port} on 127.0.0.1 is taken" in caplog.text
        assert "Training goes on" in caplog.text and "metrics_report_port" in caplog.text
        assert _get(f"http://127.0.0.1:{server.port}/metrics") == (200, "x 1\n")
    finally:
        server.close()
        holder.close()


def test_with_a_token_the_metrics_need_it():
    server = MetricsServer(lambda: "x 1\n", "127.0.0.1", 0, announce=False, token="s3cret")
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        code, body = _get(url)
        assert code == 401 and "RL_INSIGHT_TOKEN" in body
        assert _get(url, "wrong")[0] == 401
        assert _get(url, "s3cret") == (200, "x 1\n")
    finally:
        server.close()


def test_lane_groups_are_served_with_their_grouping_labels_and_forgotten_with_their_run():
    text = ('# HELP rl_insight_monitor_lane_state s\n# TYPE rl_insight_monitor_lane_state '
            'gauge\nrl_insight_monitor_lane_state{role="ranks",state_lane_id="ranks",'
            'state_name="a b"} 1\n# TYPE n gauge\nn 2\n')
    assert with_labels(text, {"project": "p"}).splitlines()[2:] == [
        'rl_insight_monitor_lane_state{project="p",role="ranks",state_lane_id="ranks",'
        'state_name="a b"} 1', "# TYPE n gauge", 'n{project="p"} 2']
    served = ServedGroups(idle_s=100)
    run = {"project": "p", "experiment_name": "e"}
    assert served.put([("rl_insight_lanes", {**run, "lane_actor": "node_a"}, text, False),
                       ("rl_insight_lanes", {**run, "lane_actor": "node_b"}, text, False),
                       ("rl_insight_lanes", {"lane_actor": "node_a"}, "own 1\n", True)],
                      now=0) == [True, True, True]
    out = served.render()
    assert out.count("# TYPE rl_insight_monitor_lane_state gauge") == 1
    assert 'lane_actor="node_a",role="ranks"' in out and 'lane_actor="node_b"' in out
    served.put([("rl_insight_lanes", {**run, "lane_actor": "node_a"}, text, False)], now=50)
    assert served.forget([], now=120) == 2  # node_b's and the own group: not refreshed
    assert served.forget([Identity("p", "e")], now=121) == 1 and len(served) == 0


class _NoServer:
    on_server_restart: list = []


def test_the_hubs_exposition_holds_its_runs_and_the_lane_actors_groups():
    hub = HubCore(_NoServer())
    hub.runs.apply(Identity("p", "e"), [rl_insight.wire.events.Metric(
        "gauge", "rl_insight_monitor_x", 1.0, (), "")])
    hub.served.put([("rl_insight_lanes", {"project": "p", "experiment_name": "e",
                                          "lane_actor": "a"}, "# TYPE y gauge\ny 2\n",
                     False)])
    out = hub.exposition()
    assert 'rl_insight_monitor_x{experiment_name="e",project="p"} 1' in out
    assert 'y{project="p",experiment_name="e",lane_actor="a"} 2' in out


def test_repeated_init_is_a_no_op_that_changes_nothing(recorded):
    """Uni-Agent's facade calls ``rl_insight.init()`` before every metric it emits
    (uni_agent/rl_insight/__init__.py): the client, its identity and settings stay."""
    c, got = recorded
    c.set_identity(Identity("p", "e"))
    before = (RUNTIME.client, c.identity, dict(vars(c.settings)))
    for _ in range(1000):
        rl_insight.init()
        rl_insight.metric_gauge("router_load", 0.5, replica="0")
    assert (RUNTIME.client, c.identity, dict(vars(c.settings))) == before
    c.buffer.flush(5)
    assert sum(1 for m in got if getattr(m, "name", "") ==
               "rl_insight_monitor_router_load") == 1000
