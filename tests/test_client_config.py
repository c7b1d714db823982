"""The client's configuration, resolved once (rl_insight/client/configuration.py): the
arguments, then the environment, then ``init(config=...)``, then the config file, then
the defaults, into one object that ``init`` and ``attach`` pass explicitly. The
environment is read, never written: a child gets the configuration and the run as
variables its starter passes (``child_env()``, the runtime env ``attach`` hands Ray's
workers)."""

from __future__ import annotations

import dataclasses
import os

import pytest

import rl_insight
from rl_insight.client import api
from rl_insight.client.configuration import resolve
from rl_insight.client.runtime import RUNTIME
from rl_insight.ray.attach import env_vars, runtime_env
from rl_insight.wire.events import Identity

ENVS = ("RL_INSIGHT_SERVER_URL", "RL_INSIGHT_OTLP_ENDPOINT", "VERL_RL_INSIGHT_ENABLE",
        "RL_INSIGHT_TOKEN", "RL_INSIGHT_PROJECT", "RL_INSIGHT_EXPERIMENT_NAME")


@pytest.fixture
def fresh(home, monkeypatch):
    """No client yet, none of the client's variables set, an empty config file."""
    for name in ENVS:  # set, then deleted: the environment is as it was after
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", False)
    monkeypatch.setattr(RUNTIME, "off", None)
    return monkeypatch


def test_each_value_comes_from_the_first_source_that_has_it(fresh, home):
    (home / "config.yaml").write_text("server:\n  token: from-file\n"
                                          "client:\n  flush_interval_s: 2.5\n")
    init_config = {"server": {"url": "http://from-init:18080"},
                   "otel": {"exporter": {"endpoint": "http://collector:4318"}}}
    # nothing in the environment: init(config)'s server (it wins over its OTLP endpoint),
    # the file's token and settings
    got = resolve(init_config=init_config)
    assert (got.server_url, got.otlp_url, got.token) == ("http://from-init:18080", "",
                                                         "from-file")
    assert got.client.flush_interval_s == 2.5 and got.identity is None
    # the environment wins over init(config) and the file (upstream: the variable wins)
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://from-env:18080")
    fresh.setenv("RL_INSIGHT_TOKEN", "from-env")
    fresh.setenv("RL_INSIGHT_PROJECT", "p")
    fresh.setenv("RL_INSIGHT_EXPERIMENT_NAME", "e")
    fresh.setenv("RL_INSIGHT_CLIENT_FLUSH_INTERVAL_S", "0.7")
    got = resolve(init_config=init_config)
    assert (got.server_url, got.token, got.identity) == ("http://from-env:18080",
                                                         "from-env", Identity("p", "e"))
    assert got.client.flush_interval_s == 0.7
    # and the arguments over the environment
    got = resolve(server_url="http://from-arg:18080", token="from-arg", project="q",
                  experiment_name="f", init_config=init_config)
    assert (got.server_url, got.token, got.identity) == ("http://from-arg:18080",
                                                         "from-arg", Identity("q", "f"))
    # VERL_RL_INSIGHT_ENABLE=0: off, whatever else says where to send
    fresh.setenv("VERL_RL_INSIGHT_ENABLE", "0")
    assert not resolve(server_url="http://from-arg:18080", init_config=init_config).enabled


def test_init_with_a_config_turns_monitoring_on_without_writing_the_environment(fresh):
    before = dict(os.environ)
    api.init(project="p", experiment_name="e", config={
        "server": {"url": "http://127.0.0.1:1"}, "client": {"exit_flush_timeout_s": 0}})
    c = RUNTIME.client
    assert c is not None and c.server_url == "http://127.0.0.1:1"
    assert c.identity == Identity("p", "e") and c.settings.exit_flush_timeout_s == 0
    changed = {k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)}
    assert not changed, changed  # the run's name too goes to children explicitly
    # what a Ray job started from here hands its workers: the resolved values
    got = runtime_env({"env_vars": {"OTHER": "1"}})["env_vars"]
    assert got["RL_INSIGHT_SERVER_URL"] == "http://127.0.0.1:1" and got["OTHER"] == "1"
    assert got["VERL_RL_INSIGHT_ENABLE"] == "1"
    assert (got["RL_INSIGHT_PROJECT"], got["RL_INSIGHT_EXPERIMENT_NAME"]) == ("p", "e")


def test_a_child_gets_the_run_this_process_named_from_child_env(fresh):
    """init(project, experiment_name) writes no variable; what a child needs to report
    into the run (where to send, the run) comes from child_env(), which a starter merges
    over the child's environment: Ray's runtime env (the operator's hook too) and the
    site hook's command do; a child resolves the run from it."""
    from rl_insight.ray import hooks

    assert rl_insight.child_env() == {}  # monitoring off here: nothing to hand over
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:1")
    fresh.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "0")
    rl_insight.init(project="p", experiment_name="e")
    assert "RL_INSIGHT_PROJECT" not in os.environ
    child = {**os.environ, **rl_insight.child_env()}
    assert (child["RL_INSIGHT_PROJECT"], child["RL_INSIGHT_EXPERIMENT_NAME"]) == ("p", "e")
    assert resolve(environ=child).identity == Identity("p", "e")
    hooked = hooks.runtime_env_hook({"env_vars": {"OTHER": "1"}})["env_vars"]
    assert (hooked["RL_INSIGHT_PROJECT"], hooked["OTHER"]) == ("p", "1")
    # the job's own values win
    own = hooks.runtime_env_hook({"env_vars": {"RL_INSIGHT_PROJECT": "q"}})["env_vars"]
    assert own["RL_INSIGHT_PROJECT"] == "q"


def test_a_workers_variables_come_from_the_configuration_given(fresh):
    """attach(server_url=..., token=...) resolves them and hands them to Ray's runtime env
    as they were resolved; the environment's own, for its client settings only."""
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://not-this:18080")
    fresh.setenv("RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S", "1")
    config = resolve(server_url="http://this:18080", token="t0k", project="p",
                     experiment_name="e")
    assert env_vars(config=config) == {
        "RL_INSIGHT_SERVER_URL": "http://this:18080", "RL_INSIGHT_TOKEN": "t0k",
        "RL_INSIGHT_PROJECT": "p", "RL_INSIGHT_EXPERIMENT_NAME": "e",
        "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1", "VERL_RL_INSIGHT_ENABLE": "1",
        # the engines' own exporter, with the token (tests/test_engine_tracing.py)
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%20t0k",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert os.environ["RL_INSIGHT_SERVER_URL"] == "http://not-this:18080"  # untouched


def test_a_bare_init_resolves_again_only_when_the_environment_changed(fresh):
    api.init()
    assert RUNTIME.client is None and RUNTIME.off is not None
    seen = RUNTIME.off
    api.init()  # the same environment: nothing resolved again (Uni-Agent's every emit)
    assert RUNTIME.off is seen
    fresh.setenv("OTHER_VARIABLE", "1")  # a variable that turns nothing on: still off
    api.init()
    assert RUNTIME.off is seen
    fresh.setenv("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:1")
    fresh.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "0")
    api.init()
    assert RUNTIME.client is not None and RUNTIME.client.server_url == "http://127.0.0.1:1"


def test_the_environment_wins_over_init_config_for_client_settings(fresh, home):
    """The documented order holds for the client's settings too: the environment's
    ``RL_INSIGHT_CLIENT_*`` over ``init(config=...)``'s, that over the file's (the init
    config used to be applied last, over all of them)."""
    (home / "config.yaml").write_text("client:\n  flush_interval_s: 2.5\n  batch_size: 7\n"
                                      "  hub_push_interval_s: 4\n")
    fresh.setenv("RL_INSIGHT_CLIENT_FLUSH_INTERVAL_S", "0.7")
    got = resolve(server_url="http://127.0.0.1:1", init_config={
        "flush_interval_s": 30, "client": {"batch_size": 64}})
    assert got.client.flush_interval_s == 0.7  # the environment
    assert got.client.batch_size == 64  # init(config) over the file
    assert got.client.hub_push_interval_s == 4  # the file over the default


def test_the_resolved_configuration_is_never_changed(fresh):
    """``resolve`` reads every source once; a later ``init(config=...)`` resolves a new
    configuration that the running client takes whole, keeping where it sends (its
    transport runs), and the one it had stays as it was."""
    fresh.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "0")
    api.init(config={"server": {"url": "http://127.0.0.1:1"}})
    first = api.configuration()
    was = (first.server_url, first.client.batch_size, first.bucket_map)
    api.init(config={"batch_size": 64, "histogram_buckets": {"my_latency": [0.1, 1]}})
    now = api.configuration()
    assert now is not first and (first.server_url, first.client.batch_size,
                                 first.bucket_map) == was
    assert now.server_url == "http://127.0.0.1:1" and now.client.batch_size == 64
    assert RUNTIME.client.buffer.batch_size == 64
    assert RUNTIME.client.buckets_for("my_latency") == (0.1, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):  # nothing sets a field of it
        now.server_url = "http://elsewhere:1"


def test_an_adapters_follower_sends_where_init_config_said(fresh, tmp_path):
    """ROLL passes its endpoint in ``tracker_kwargs`` (``init(config=...)``), with none in
    the environment: the trace-file follower an adapter starts sends there, from the
    configuration monitoring runs with, not from one read again (which found none)."""
    from rl_insight import frameworks
    from rl_insight.integrations import follow

    fresh.setenv("RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", "0")
    api.init(project="p", experiment_name="e",
             config={"server": {"url": "http://127.0.0.1:1"}})
    pattern = str(tmp_path / "traces-*.jsonl")
    follower = follow.start(pattern, frameworks.named("roll"), "p", "e", interval_s=60)
    try:
        assert follower is not None  # with a resolved endpoint it follows
        assert follower.send.__self__.server_url == "http://127.0.0.1:1"
    finally:
        loop = follow._running.pop(pattern, None)
        if loop is not None:
            loop.stop(1.0)


def test_an_adapter_names_its_run_from_the_configuration(configured):
    """Every adapter's run names come through ``kit.run_names`` from the resolved
    configuration: the environment's names first where it had them when resolved."""
    from rl_insight.integrations import kit

    configured(RL_INSIGHT_PROJECT="team", RL_INSIGHT_EXPERIMENT_NAME="exp")
    assert kit.run_names(("theirs",), ("their-run",), "fw", "run") == ("team", "exp")
    configured()
    assert kit.run_names(("theirs",), (None, "their-run"), "fw", "run") == \
        ("theirs", "their-run")
    assert kit.run_names((), (), "fw", "run") == ("fw", "run")
