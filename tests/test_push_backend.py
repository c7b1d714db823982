"""Issue 59 point 1: upstream rl-insight's push backend. A team's sink driver, written
against upstream's ``PushSink`` as its tests write one (verl-project/rl-insight
tests/monitor/ut/client/push/test_push_client.py: ``RecordingSink``, a factory reading
``OmegaConf.select(conf, "prefix")``), is loaded by its name from the monitor config file
``RL_INSIGHT_CONFIG`` names, and receives what a verl run's calls produce (the engines'
registration before init, Tracking.log, verl's gauges, trace_state on a replica and a
rank, finish) while the same calls reach a real server in this process; the rollout
poller scrapes a real prometheus_client /metrics with vLLM's names. Then the layering of
the configuration, and drivers that do not work."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import textwrap

import pytest
import requests
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

import rl_insight
from rl_insight import config
from rl_insight.client import api
from rl_insight.client.configuration import resolve
from rl_insight.client.runtime import RUNTIME
from rl_insight.common import netaddr
from tests.conftest import wait_for

DRIVER = '''
"""A team's sink: every call recorded. Written against upstream's PushSink."""
from omegaconf import OmegaConf

from rl_insight.client.push.sinks.base import PushSink

SINKS = []


class RecordingSink(PushSink):
    def __init__(self, prefix=""):
        super().__init__(prefix)
        self.calls = []
        self.closed = False

    def emit_counter(self, name, value, tags):
        self.calls.append(("counter", self.metric_name(name), value, dict(tags)))

    def emit_store(self, name, value, tags):
        self.calls.append(("store", self.metric_name(name), value, dict(tags)))

    def emit_timer(self, name, value_us, tags):
        self.calls.append(("timer", self.metric_name(name), value_us, dict(tags)))

    def close(self):
        self.closed = True


def create_sink(conf):
    sink = RecordingSink(str(OmegaConf.select(conf, "prefix") or ""))
    SINKS.append(sink)
    return sink


def create_raising_sink(conf):
    sink = create_sink(conf)

    def boom(*_a, **_k):
        raise RuntimeError("sdk down")

    sink.emit_store = boom
    return sink


def create_nothing(conf):
    return None


def create_wrong(conf):
    return object()


def create_failing(conf):
    raise KeyError("endpoint")
'''

MONITOR_FILE = """
server:
  backend: push
client:
  flush_interval_s: 0.05
push:
  sinks:
    - name: alpha
      driver: "team_sinks:create_sink"
      prefix: seed.alphaseed
      streams: [metric, trace, rollout]
      tags_from_env: [{tag: trial, env: [TRIAL_ID], default: "0"}]
    - name: mapped
      driver: "team_sinks:create_sink"
      prefix: m
      streams: [metric]
      metric_mapping:
        - {source: timing_s_update_weight, name: timing.driver.duration, op: timer,
           scale: 1000000, tags: {stage: weight_sync_total}}
    - name: engines
      driver: "team_sinks:create_sink"
      prefix: x
      streams: [rollout]
      rollout_name_prefix: ""
      rollout_groups: [vllm]
  rollout:
    interval_seconds: 0.1
    packs: [vllm]
"""


@pytest.fixture
def fresh(home, tmp_path, monkeypatch):
    """No client yet, none of the client's variables set; the team's driver importable
    by its module name; the client closed after the test."""
    (tmp_path / "team_sinks.py").write_text(DRIVER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "team_sinks", raising=False)
    for name in ("VERL_RL_INSIGHT_ENABLE", "TRIAL_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "3")
    for attr, value in (("client", None), ("checked", False), ("off", None)):
        monkeypatch.setattr(RUNTIME, attr, value)
    yield monkeypatch
    if RUNTIME.client is not None:
        RUNTIME.client.at_exit()
    sys.modules.pop("team_sinks", None)


@pytest.fixture
def server(tmp_path):
    """A real server in this process, on a loopback socket (no Prometheus or Tempo)."""
    from rl_insight.server.app import create_app
    from rl_insight.server.lifecycle import _HttpThread
    from rl_insight.server.services.supervisor import Supervisor
    from rl_insight.server.state import ServerState

    s = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path / "srv")},
                    overrides=["host=127.0.0.1"])
    state = ServerState(s, Supervisor(s.supervisor, s.logs_dir))
    state.open()
    sock = netaddr.bind_socket("127.0.0.1", 0)
    http = _HttpThread(create_app(state), sock, "warning")
    http.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    wait_for(lambda: _ok(url + "/healthz"), 20, "the in-process server to answer")
    yield url
    http.stop()
    state.close()


def _ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


class Engine:
    """A rollout replica's /metrics with vLLM's names, served by prometheus_client (what
    vLLM serves them with), on its own thread."""

    def __init__(self) -> None:
        reg = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge("vllm:num_requests_running", "running", labels, registry=reg)
        self.tokens = Counter("vllm:generation_tokens", "tokens", labels, registry=reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "ttft", labels,
                              registry=reg)
        self.ttft.labels("qwen", "0")  # vLLM makes its children as its engine starts
        self.running.labels("qwen", "0").set(3)
        self.tokens.labels("qwen", "0").inc(100)
        self.port = netaddr.free_port()
        self.server, _ = start_http_server(self.port, addr="127.0.0.1", registry=reg)

    def stop(self) -> None:
        self.server.shutdown()


@pytest.fixture
def engine():
    e = Engine()
    yield e
    e.stop()


def sink_calls(index: int) -> list:
    return sys.modules["team_sinks"].SINKS[index].calls


def named(calls: list, name: str) -> list:
    return [c for c in calls if c[1] == name]


def verl_run(engine_address: str) -> None:
    """A verl run's calls, in verl's order (design.md, "How verl calls it")."""
    rl_insight.update_prometheus_config([engine_address], "vllm", [{"replica": 0}])
    tracking = rl_insight.Tracking("proj", "exp-push", {})
    tracking.log({"actor/pg_loss": 0.5, "training/global_step": 1}, step=1)
    rl_insight.metric_gauge("timing_s_update_weight", 0.003)  # verl: "/" -> "_"
    rl_insight.metric_gauge("critic_score_mean", 1.0)

    async def generate(first: asyncio.Event, second: asyncio.Event) -> None:
        # verl's async server: each request's coroutine on the replica's event loop
        with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
            first.set()
            await second.wait()

    async def two_requests() -> None:
        a, b = asyncio.Event(), asyncio.Event()
        one = asyncio.create_task(generate(a, b))
        await a.wait()
        with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
            b.set()
        await one

    asyncio.run(two_requests())
    with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
        pass


def test_a_teams_sink_gets_a_verl_runs_data_while_the_server_gets_it_too(
        fresh, tmp_path, server, engine):
    monitor = tmp_path / "push.yaml"
    monitor.write_text(MONITOR_FILE)
    fresh.setenv("RL_INSIGHT_CONFIG", str(monitor))
    fresh.setenv("RL_INSIGHT_SERVER_URL", server)
    fresh.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    fresh.setenv("TRIAL_ID", "trial-7")
    address = f"127.0.0.1:{engine.port}"

    verl_run(address)
    alpha = sink_calls(0)
    wait_for(lambda: named(alpha, "seed.alphaseed.rollout.num_requests_running"), 20,
             "the poller's first scrape to reach the sinks")
    engine.tokens.labels("qwen", "0").inc(40)
    for seconds in (0.1, 0.3):
        engine.ttft.labels("qwen", "0").observe(seconds)
    engines = sink_calls(2)
    wait_for(lambda: named(engines, "x.time_to_first_token_seconds") and
             named(engines, "x.generation_tokens_total"), 20,
             "a later scrape's counter growth and latency mean")
    rl_insight.finish()

    # the metric stream: trainer scalars by the names the caller gave, tagged
    op, name, value, tags = named(alpha, "seed.alphaseed.trainer.actor/pg_loss")[0]
    assert (op, value) == ("store", 0.5)
    assert {k: tags[k] for k in ("trial", "project", "experiment_name")} == \
        {"trial": "trial-7", "project": "proj", "experiment_name": "exp-push"}
    assert named(alpha, "seed.alphaseed.trainer.timing_s_update_weight")[0][2] == 0.003
    # the trace stream: each busy interval a timer in microseconds, the lane and state
    spans = named(alpha, "seed.alphaseed.trace.vllm_generate")
    assert len(spans) == 1  # two overlapping requests: one interval, as upstream
    assert {k: spans[0][3][k] for k in ("state_lane_id", "state_name",
                                          "monitor.trace_segment")} == \
        {"state_lane_id": "replica_0", "state_name": "vllm_generate",
         "monitor.trace_segment": "state_interval"}
    assert spans[0][3]["process_id"].isdigit()
    assert named(alpha, "seed.alphaseed.trace.actor_update")[0][3]["state_lane_id"] == \
        "rank_0"
    assert not [c for c in alpha if "train_step" in c[1]]  # this package's step marks
    # the whitelist sink: its one mapped scalar, renamed, scaled to microseconds, retagged
    mapped = sink_calls(1)
    assert [(c[0], c[1], c[2], c[3]["stage"]) for c in mapped] == \
        [("timer", "m.timing.driver.duration", pytest.approx(3000.0), "weight_sync_total")]
    # the rollout stream: the vllm pack's names, the target's labels, the engine's own
    running = named(engines, "x.num_requests_running")[0]
    assert running[0] == "store" and running[2] == 3.0
    assert {k: running[3][k] for k in ("replica", "model_name")} == \
        {"replica": "0", "model_name": "qwen"}
    assert named(engines, "x.generation_tokens_total")[0][:3] == \
        ("counter", "x.generation_tokens_total", 40.0)
    assert named(engines, "x.time_to_first_token_seconds")[0][2] == \
        pytest.approx(200_000.0)  # (0.1 + 0.3) / 2 s in microseconds
    assert not [c for c in engines if "trainer." in c[1] or "trace." in c[1]]
    assert all(s.closed for s in sys.modules["team_sinks"].SINKS)  # finish() closed them

    # the server path, alongside: the same gauge, the same interval, the engine target
    def pushed() -> bool:
        text = requests.get(server + "/metrics", timeout=5).text
        return any(line.startswith("rl_insight_monitor_actor_pg_loss{") and
                   'experiment_name="exp-push"' in line and line.endswith(" 0.5")
                   for line in text.splitlines())
    wait_for(pushed, 20, "the server to hold the run's gauge")

    def recent() -> list:
        got = requests.get(server + "/api/v1/traces/recent", timeout=5, params={
            "project": "proj", "experiment_name": "exp-push"}).json()["spans"]
        return [s for s in got if s["state"] == "vllm_generate"]
    at_server = wait_for(recent, 20, "the server to hold the replica's interval")[0]
    assert spans[0][2] == (at_server["end_ns"] - at_server["start_ns"]) // 1000
    targets = requests.get(server + "/api/v1/prometheus/targets", timeout=5).json()
    assert address in json.dumps(targets["targets"])


def test_the_layers_defaults_file_init_config_environment(fresh, home, caplog):
    """defaults < the file RL_INSIGHT_CONFIG names < init(config) < the environment, as
    upstream layers its monitor configuration; the server reads the same file."""
    path = home / "monitor.yaml"
    path.write_text(textwrap.dedent("""
        server: {backend: push, url: "http://from-file:18080"}
        client: {flush_interval_s: 2.5}
        push:
          metric_prefix: from-file.
          sinks: [{driver: "rl_insight.client.push.sinks.logging:create_sink"}]
    """))
    assert resolve().backend == "ray" and resolve().push is None  # the defaults
    fresh.setenv("RL_INSIGHT_CONFIG", str(path))
    got = resolve()
    assert (got.backend, got.push.metric_prefix, got.server_url) == \
        ("push", "from-file.", "http://from-file:18080")
    assert got.client.flush_interval_s == 2.5 and got.push.trace_prefix == "trace."
    got = resolve(init_config={"server": {"url": "http://from-init:18080"},
                               "push": {"metric_prefix": "from-init."}})
    assert (got.push.metric_prefix, got.server_url) == ("from-init.", "http://from-init:18080")
    assert got.push.sinks[0].driver.endswith("logging:create_sink")  # the file's, merged
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://from-env:18080")
    fresh.setenv("RL_INSIGHT_SERVER_BACKEND", "ray")
    got = resolve(init_config={"server": {"url": "http://from-init:18080"}})
    assert (got.server_url, got.backend, got.push) == ("http://from-env:18080", "ray", None)
    # `local` (upstream's server config value): the server path, no warning
    fresh.delenv("RL_INSIGHT_SERVER_BACKEND")
    with caplog.at_level(logging.WARNING):
        got = resolve(init_config={"server": {"backend": "local"}})
    assert (got.backend, got.push, got.enabled) == ("local", None, True)
    assert "unknown" not in caplog.text
    # the server's loader takes the same file: its monitor keys are not settings of its
    assert config.load(environ={"RL_INSIGHT_CONFIG": str(path),
                                "RL_INSIGHT_HOME": str(home)}).client.flush_interval_s == 2.5


def test_drivers_that_do_not_work_are_said_and_training_goes_on(fresh, tmp_path, caplog):
    broken = [("missing", "no_such_team_module:create_sink"), ("no colon", "team_sinks"),
              ("no factory", "team_sinks:create_nope"), ("raises", "team_sinks:create_failing"),
              ("wrong type", "team_sinks:create_wrong"), ("off", "team_sinks:create_nothing")]
    sinks = [{"name": n, "driver": d} for n, d in broken] + [
        {"name": "flaky", "driver": "team_sinks:create_raising_sink"},
        {"name": "good", "driver": "team_sinks:create_sink"}]
    with caplog.at_level(logging.INFO):
        rl_insight.init("p", "e", {"server": {"backend": "push"}, "push": {"sinks": sinks}})
        rl_insight.metric_gauge("loss", 1.0)
        rl_insight.metric_gauge("loss", 2.0)
        rl_insight.metric_count("samples", 3)
        assert rl_insight.flush(5)
    flaky, good = sys.modules["team_sinks"].SINKS
    assert flaky.calls == [] and [c[:3] for c in good.calls] == [
        ("store", "trainer.loss", 1.0), ("store", "trainer.loss", 2.0),
        ("counter", "trainer.samples", 3.0)]
    said = caplog.text
    for name, what in (("missing", "No module named"), ("no colon", "package.module:factory"),
                       ("no factory", "has no 'create_nope'"), ("raises", "KeyError"),
                       ("wrong type", "not a PushSink"), ("off", "returned None"),
                       ("flaky", "RuntimeError")):
        assert f"push sink {name!r}" in said and what in said, name
    assert said.count("push sink 'flaky'") == 1  # said once, then fed no more

    # no sink at all can be built and no server: monitoring stays off, calls are no-ops
    api.finish()
    RUNTIME.client.at_exit()
    fresh.setattr(RUNTIME, "client", None)
    fresh.setattr(RUNTIME, "checked", False)
    rl_insight.init(config={"server": {"backend": "push"},
                            "push": {"sinks": [{"driver": "no_such_team_module:f"}]}})
    assert not rl_insight.enabled()
    rl_insight.metric_gauge("loss", 1.0)
    with rl_insight.trace_state("s"):
        pass


def test_the_rules_upstream_names_read_an_exposition_as_it_does():
    """gauge_timer, ratio and a counter's reset (re-baselined, never a negative growth),
    a counter named with or without _total; a rule's group on what it makes."""
    from rl_insight.client.push.rules import ScrapeState

    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{model_name="m"} 3.0\n'
            '# TYPE vllm:prompt_tokens_total counter\n'
            'vllm:prompt_tokens_total{model_name="m"} %s\n'
            '# TYPE a gauge\na 160.0\n# TYPE b gauge\nb 200.0\n')
    rules = [{"source": "vllm:num_requests_running", "type": "gauge_timer",
              "name": "decode_batch_size", "tags": {"pending_status": "infer"}},
             {"numerator": "a", "denominator": "b", "type": "ratio", "name": "kv"},
             {"source": "vllm:prompt_tokens_total", "type": "counter_delta", "name": "p",
              "group": "vllm"},
             {"source": "vllm:prompt_tokens", "type": "counter_delta", "name": "q"}]
    state = ScrapeState()
    first = state.translate(text % 100, rules)
    assert [(e.name, e.op, e.value) for e in first] == [
        ("decode_batch_size", "timer", 3.0), ("kv", "store", 0.8)]
    assert first[0].tags == {"model_name": "m", "pending_status": "infer"}
    grown = [(e.name, e.op, e.value, e.group) for e in state.translate(text % 150, rules)]
    assert grown[2:] == [("p", "counter", 50.0, "vllm"), ("q", "counter", 50.0, "")]
    assert [e.name for e in state.translate(text % 10, rules)] == ["decode_batch_size", "kv"]
    assert [e.value for e in state.translate(text % 15, rules)][2:] == [5.0, 5.0]


def test_a_ray_job_hands_the_monitor_file_and_backend_to_its_workers():
    from rl_insight.ray.attach import env_vars

    got = env_vars({"RL_INSIGHT_CONFIG": "/shared/push.yaml",
                    "RL_INSIGHT_SERVER_BACKEND": "push"})
    assert (got["RL_INSIGHT_CONFIG"], got["RL_INSIGHT_SERVER_BACKEND"]) == \
        ("/shared/push.yaml", "push")


def test_engines_registered_before_init_names_the_push_backend_are_scraped(fresh, engine):
    """verl registers its engines (LLMServerManager) before Tracking's init(config=
    trainer.rl_insight) names the backend: the poller started then scrapes them."""
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:1")  # a server, not answering
    fresh.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "0")
    address = f"127.0.0.1:{engine.port}"
    rl_insight.update_prometheus_config([address], "vllm", [{"replica": 3}])
    rl_insight.init("p", "e", {"server": {"backend": "push"}, "push": {
        "sinks": [{"driver": "team_sinks:create_sink", "streams": ["rollout"]}],
        "rollout": {"interval_seconds": 0.1, "packs": ["vllm"]}}})
    calls = sink_calls(0)
    got = wait_for(lambda: named(calls, "rollout.num_requests_running"), 20,
                   "the engine registered before init to be scraped")
    assert got[0][3]["replica"] == "3"
