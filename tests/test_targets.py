"""Target validation and the file-based discovery files Prometheus reads."""

from __future__ import annotations

import json

import pytest

from rl_insight.server.targets import (
    TargetError,
    TargetStore,
    parse_registration,
    validate_hostport,
)


@pytest.mark.parametrize("ok", ["10.0.0.5:8000", "node-1.cluster.local:9100",
                                "[::1]:18080", "[fd00::5]:80", "localhost:1"])
def test_valid_targets(ok):
    assert validate_hostport(ok) == ok


@pytest.mark.parametrize("bad, msg", [
    ("10.0.0.5", "expected 'host:port'"), ("http://x:80", "only host:port"),
    ("x:80/metrics", "only host:port"), ("user@x:80", "only host:port"),
    ("::1:80", "brackets"), ("[::zz]:80", "not an IPv6"), ("x:0", "1..65535"),
    ("x:99999", "1..65535"), ("bad_host!:80", "not a valid host"), (":80", "host:port"),
])
def test_invalid_targets(bad, msg):
    with pytest.raises(TargetError, match=msg):
        validate_hostport(bad)


def test_label_forms_of_existing_clients():
    # update_prometheus_config(addresses, "vllm", [{"replica": 0}, {"replica": 1}])
    ts = parse_registration({"job_name": "vllm", "targets": ["a:1", "b:2"],
                             "labels": [{"replica": 0}, None],
                             "project": "p", "experiment_name": "e"})
    assert [dict(t.labels) for t in ts] == [{"replica": "0"}, {}]
    ts = parse_registration({"job_name": "x", "targets": ["a:1", {"target": "b:2",
                             "labels": {"k": "v"}}], "labels": {"all": True}})
    assert [dict(t.labels) for t in ts] == [{"all": "true"}, {"all": "true", "k": "v"}]
    assert ts[0].sd_labels() == {"job": "x", "all": "true"}


@pytest.mark.parametrize("body, msg", [
    ({"targets": ["a:1"]}, "job_name"),
    ({"job_name": "j", "targets": []}, "non-empty"),
    ({"job_name": "j", "targets": ["a:1"], "labels": {"project": "x"}}, "reserved"),
    ({"job_name": "j", "targets": ["a:1"], "labels": {"job": "x"}}, "reserved"),
    ({"job_name": "j", "targets": ["a:1"], "labels": {"bad-name": 1}}, "invalid label name"),
    ({"job_name": "j", "targets": ["a:1"], "labels": [{}, {}]}, "one entry"),
    ({"job_name": "j", "targets": ["a:1"], "project": "p"}, "both project"),
    ({"job_name": "j j", "targets": ["a:1"]}, "job_name"),
])
def test_invalid_registrations(body, msg):
    with pytest.raises(TargetError, match=msg):
        parse_registration(body)


def test_store_persists_and_hides_archived(tmp_path):
    hidden = set()
    store = TargetStore(tmp_path / "t.json", tmp_path / "sd",
                        hidden=lambda p, e: (p, e) in hidden)
    ts = parse_registration({"job_name": "vllm", "targets": ["a:1", "b:2"],
                             "project": "p", "experiment_name": "e"})
    assert store.register(ts) == 2
    assert store.register(ts) == 0  # idempotent
    (sd,) = (tmp_path / "sd").glob("*.json")
    groups = json.loads(sd.read_text())
    assert [g["targets"] for g in groups] == [["a:1"], ["b:2"]]
    assert groups[0]["labels"] == {"job": "vllm", "project": "p", "experiment_name": "e"}
    hidden.add(("p", "e"))
    store.write_sd()
    assert list((tmp_path / "sd").glob("*.json")) == []
    again = TargetStore(tmp_path / "t.json", tmp_path / "sd2")
    assert again.load() == 2 and len(list((tmp_path / "sd2").glob("*.json"))) == 1
    assert again.remove(ts[:1]) == 1 and len(again.list()) == 1
