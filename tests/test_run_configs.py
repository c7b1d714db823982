"""Each run's configuration at the server (rl_insight/server/ingest/runconfigs.py, the
routes in server/routes/experiments.py), in-process: kept with the run in the database
(a restart, a failed commit), masked and bounded again whoever sent it, the latest
hand-over winning, each bad body refused with its reason and nothing stored lost, an
archived run's refused, and /metrics' info series: a bounded few hundred keys a run, the
keys that differ between its project's runs first, gone with the run."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from rl_insight import config
from rl_insight.runconfig.flatten import flatten
from rl_insight.server.app import create_app
from rl_insight.server.ingest.runconfigs import RunConfigStore
from rl_insight.server.ingest.store import Store
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire import runconfig as config_wire

PATH = config_wire.CONFIG_PATH
RUN = {"project": "p", "experiment_name": "a"}


def hand_over(c, values, **run):
    return c.post(PATH, json={**RUN, **run, "values": values, "source": "test"})


def read(c, **run):
    return c.get(PATH, params={**RUN, **run})


def info(c) -> dict[tuple[str, str], dict[str, str]]:
    """/metrics' rl_insight_run_config_info: per run, key -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {}
    for fam in text_string_to_metric_families(c.get("/metrics").text):
        if fam.name == config_wire.INFO_METRIC:
            for s in fam.samples:
                run = (s.labels["project"], s.labels["experiment_name"])
                out.setdefault(run, {})[s.labels["key"]] = s.labels["value"]
    return out


def test_a_hand_over_is_kept_read_back_masked_again_and_replaced_by_the_next(served):
    c, state = served
    r = hand_over(c, {"lr": 1e-6, "hf_token": "hf_plain", "url": "https://u:pw@h/x",
                      "logger": '["console"]', "seed": None})
    assert r.status_code == 200, r.text
    assert r.json()["keys"] == 5 and r.json()["masked"] == 2 and "values" not in r.json()
    got = read(c).json()
    assert got["values"] == {"lr": 1e-6, "hf_token": config_wire.MASK, "url": "https://u:***@h/x",
                             "logger": '["console"]', "seed": None}
    assert got["source"] == "test" and got["cut"] == {"keys": 0, "values": 0, "depth": 0}
    assert state.experiments.get("p", "a") is not None  # the run is known from it
    assert hand_over(c, {"lr": 2e-6}).status_code == 200  # the latest wins
    # JSON Schema's integers include 2.0, which JSON reads as a float
    assert c.post(PATH, json={**RUN, "values": {}, "masked": 2.0, "cut": {"keys": 3.0}}
                  ).json()["cut"]["keys"] == 3
    assert hand_over(c, {"lr": 2e-6}).status_code == 200
    assert read(c).json()["values"] == {"lr": 2e-6}
    r = read(c, experiment_name="never")
    assert r.status_code == 404 and "handed none over" in r.json()["error"]


BAD = [  # (body, what the answer says)
    ({**RUN, "values": {"a": {"b": 1}}}, "values['a']: a dict is no plain value"),
    ({**RUN, "values": {"a": [1]}}, "values['a']: a list is no plain value"),
    ({**RUN, "values": {"a": "x" * (config_wire.MAX_VALUE_BYTES + 1)}}, "1025 characters, over"),
    ({**RUN, "values": {"k" * (config_wire.MAX_KEY_CHARS + 1): 1}}, "a key of 257 characters"),
    ({**RUN, "values": {str(i): i for i in range(config_wire.MAX_KEYS + 1)}},
     "values: Dictionary should have at most 2000 items"),
    ({"project": "p", "values": {}}, "experiment_name: Field required"),
    ({**RUN, "values": {}, "masked": -1}, "masked: a count is a whole number"),
    ({**RUN, "values": {}, "cut": {"keys": 1.5}}, "cut.keys: a count is a whole number"),
    ({**RUN, "values": "a=1"}, "values"),
    ([1], "the body must be a JSON object"),
]


def test_each_bad_hand_over_says_what_is_wrong_and_keeps_what_is_stored(served):
    c, _ = served
    assert hand_over(c, {"kept": 1}).status_code == 200
    for body, message in BAD:  # one server for all: its start and stop cost 0.5 s
        r = c.post(PATH, json=body)
        assert r.status_code == 400 and message in r.json()["error"], (body, r.text)
        assert read(c).json()["values"] == {"kept": 1}


def test_an_archived_runs_hand_over_is_refused_and_its_config_is_not_shown(served):
    c, state = served
    assert hand_over(c, {"lr": 1}).status_code == 200
    assert info(c)[("p", "a")] == {"lr": "1"}
    state.set_experiment_status("p", "a", "archived")
    r = hand_over(c, {"lr": 2})
    assert r.status_code == 409 and "archived" in r.json()["error"]
    assert read(c).json()["values"] == {"lr": 1}  # still read, never shown
    assert ("p", "a") not in info(c)


def test_metrics_show_a_bounded_few_keys_a_run_the_differing_first(served, monkeypatch):
    c, _ = served
    monkeypatch.setattr(config_wire, "EXPOSED_KEYS", 4)
    common = {f"actor.k{i:02d}": i for i in range(20)}
    assert hand_over(c, {**common, "actor.lr": 1e-6, "long": "v\n\x00" * 100}).status_code \
        == 200
    assert hand_over(c, {**common, "actor.lr": 2e-6}, experiment_name="b").status_code == 200
    shown = info(c)
    assert list(shown[("p", "a")]) == ["actor.lr", "long", "actor.k00", "actor.k01"]
    assert list(shown[("p", "b")]) == ["actor.lr", "actor.k00", "actor.k01", "actor.k02"]
    assert shown[("p", "a")]["actor.lr"] == "1e-06"
    assert len(shown[("p", "a")]["long"]) == config_wire.EXPOSED_VALUE_CHARS
    assert shown[("p", "a")]["long"].endswith(config_wire.TRUNCATED)
    assert shown[("p", "a")]["long"].startswith("v  v  ")  # one line: a scrape reads it
    keys = [line for line in c.get("/metrics").text.splitlines()
            if line.startswith(config_wire.KEYS_METRIC + "{") and 'experiment_name="a"' in line]
    assert any('kind="stored"' in x and x.endswith(" 22.0") for x in keys), keys
    assert any('kind="exposed"' in x and x.endswith(" 4.0") for x in keys), keys


def test_a_finished_runs_config_leaves_memory_and_metrics_with_its_other_state(served):
    """Forgotten with its lanes and pushed groups (push.finished_ttl_s after it
    finished); its row stays for run-against-run comparison."""
    c, state = served
    for run in ("done", "going"):
        assert hand_over(c, {"run": run}, experiment_name=run).status_code == 200
    state.set_experiment_status("p", "done", "finished")
    state.forget_finished(time.time())  # within the grace: kept
    assert set(info(c)) == {("p", "done"), ("p", "going")}
    state.forget_finished(time.time() + state.settings.push.finished_ttl_s + 1)
    assert set(info(c)) == {("p", "going")} and len(state.configs) == 1
    assert read(c, experiment_name="done").json()["values"] == {"run": "done"}


def test_configs_survive_a_restart_and_memory_holds_only_live_runs(tmp_path):
    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})

    def started() -> ServerState:
        state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
        state.open()
        return state

    state = started()
    with TestClient(create_app(state)) as c:
        for run in ("live", "old"):
            assert hand_over(c, {"lr": 0.1, "run": run}, experiment_name=run).status_code \
                == 200
    state.experiments.set_status("p", "old", "finished")
    state.experiments._items[("p", "old")].finished_at = time.time() - 10 ** 6
    state.experiments._write([state.experiments._items[("p", "old")]])
    state.close()
    again = started()
    try:
        assert len(again.configs) == 1  # the old run's is read from the disk when asked
        with TestClient(create_app(again)) as c:
            assert read(c, experiment_name="live").json()["values"] == {"lr": 0.1,
                                                                         "run": "live"}
            assert read(c, experiment_name="old").json()["values"]["run"] == "old"
            assert set(info(c)) == {("p", "live")}
    finally:
        again.close()


def test_a_rolled_back_write_leaves_memory_as_the_database_and_the_oldest_rows_go(tmp_path):
    store = Store(tmp_path)
    configs = RunConfigStore(store, max_stored=2)
    try:
        with store.transaction():
            configs.put("p", "a", flatten({"lr": 1}), "t")
        def refused() -> None:
            with store.transaction():
                configs.put("p", "a", flatten({"lr": 2}), "t")
                raise RuntimeError("the commit failed")

        with pytest.raises(RuntimeError):
            refused()
        assert configs.get("p", "a")["values"] == {"lr": 1}
        for run in ("b", "c"):
            with store.transaction():
                configs.put("p", run, flatten({"lr": 1}), "t")
        configs.forget({("p", "a"), ("p", "b"), ("p", "c")})
        assert configs.get("p", "a") is None  # the oldest of three, beyond max_stored
        assert configs.get("p", "c")["values"] == {"lr": 1}
    finally:
        store.close()
