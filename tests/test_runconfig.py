"""A run's configuration as plain data (rl_insight/runconfig/): every shape a framework
hands its tracker flattened to dotted keys with JSON-safe values, secrets masked by key
name and by value, the bounds held and what they cut counted, two runs' told apart with
the differing keys first, and the keys /metrics shows chosen so that differences show."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from rl_insight.runconfig import secrets
from rl_insight.runconfig.diff import CHANGED, ONLY_A, ONLY_B, SAME, diff, exposed_keys
from rl_insight.runconfig.flatten import as_text, bound, flatten
from rl_insight.runconfig.section import options_section
from rl_insight.wire import runconfig as config_wire
from tests.conftest import examples


class Mode(enum.Enum):
    SYNC = "sync"


@dataclasses.dataclass
class Optim:
    lr: float = 1e-6
    betas: tuple = (0.9, 0.999)


@dataclasses.dataclass
class Args:  # a TRL- or AReaL-like dataclass of arguments
    optim: Optim = dataclasses.field(default_factory=Optim)
    mode: Mode = Mode.SYNC
    hub_token: str | None = "hf_abcdefghijklmnopqrstuvwxyz0123"
    output_dir: str = "/tmp/out"


def test_every_shape_flattens_to_dotted_keys_with_plain_values():
    """Mappings, dataclasses, argparse and simple namespaces (OpenRLHF's nested ones),
    lists of plain values as one value, lists of mappings by index, enums, numpy-like
    scalars, functions and objects as text without their addresses."""

    class Scalar:  # a numpy or torch 0-d value
        shape = ()

        def item(self):
            return 3

    def fn():
        pass

    config = {"trainer": {"logger": ["console", "rl_insight"], "nnodes": 1},
              "args": argparse.Namespace(seed=7, ratio=float("nan")),
              "logger": SimpleNamespace(wandb=SimpleNamespace(project="p", key="k" * 40)),
              "dc": Args(),
              "rewards": [{"name": "acc", "weight": 1.0}, {"name": "len", "weight": -0.1}],
              "n": Scalar(), "fn": fn, "obj": object(), "empty": {}, "none": [],
              "pair": (1, "x", None, True)}
    flat = flatten(config)
    v = flat.values
    assert v["trainer.logger"] == '["console", "rl_insight"]'
    assert v["trainer.nnodes"] == 1 and v["args.seed"] == 7 and v["args.ratio"] == "nan"
    assert v["logger.wandb.project"] == "p" and v["logger.wandb.key"] == config_wire.MASK
    assert v["dc.optim.lr"] == 1e-6 and v["dc.optim.betas"] == "[0.9, 0.999]"
    assert v["dc.mode"] == "sync" and v["dc.hub_token"] == config_wire.MASK
    assert v["rewards.0.name"] == "acc" and v["rewards.1.weight"] == -0.1
    assert v["n"] == 3 and v["fn"].endswith("fn") and "0x" not in v["obj"]
    assert v["empty"] == "{}" and v["none"] == "[]"
    assert v["pair"] == '[1, "x", null, true]'
    assert flat.masked == 2 and flat.cut == {"keys": 0, "values": 0, "depth": 0}
    json.dumps(flat.body(), allow_nan=False)  # JSON as the wire takes it


def test_an_omegaconf_config_reads_as_its_mappings_resolved_and_what_does_not_resolve_as_written():
    """verl's config: interpolations resolved (without importing omegaconf in the
    package), a ``???`` and a broken interpolation kept as written, not the whole lost."""
    cfg = OmegaConf.create({"trainer": {"experiment_name": "e1", "project_name": "p"},
                            "rollout": {"name": "???", "exp": "${trainer.experiment_name}",
                                        "bad": "${nowhere.at_all}"},
                            "list": [{"a": 1}, {"a": "${trainer.project_name}"}]})
    v = flatten(cfg).values
    assert v["rollout.exp"] == "e1" and v["list.1.a"] == "p" and v["list.0.a"] == 1
    assert v["rollout.name"] == "???" and v["rollout.bad"] == "${nowhere.at_all}"


@pytest.mark.parametrize("key, value, hidden", [
    ("hf_token", "hf_abc", True), ("HF_TOKEN", "x", True), ("WANDB_API_KEY", "abc", True),
    ("wandbApiKey", "abc", True), ("key", "abc", True), ("token", "abc", True),
    ("password", "hunter2", True), ("db_password", "x", True), ("client_secret", "x", True),
    ("aws_secret_access_key", "x", True), ("basic_auth", "u:p", True),
    ("RL_INSIGHT_TOKEN", "kQ3ZtY8xW2mN9pL4vR7s", True),  # looks like a credential
    ("max_tokens", 4096, False), ("max_new_tokens", "512", False),
    ("pad_token", "<|endoftext|>", False), ("eos_token", "</s>", False),
    ("prompt_key", "prompt", False), ("reward_fn_key", "data_source", False),
    ("input_key", "context_messages", False), ("tokenizer", "Qwen/Qwen2.5-0.5B", False),
    ("use_auth_token", True, False),  # whether it is set is no secret
    ("hf_token", None, False), ("hf_token", "", False),
])
def test_secrets_are_masked_by_their_keys_name(key, value, hidden):
    got, masked = secrets.masked(key, value, False)
    assert masked is hidden and (got == config_wire.MASK) is hidden, (key, got)


@pytest.mark.parametrize("text, want", [
    ("https://user:pa55@host:8080/x", "https://user:***@host:8080/x"),
    ("redis://:secret@10.0.0.1:6379/0", "redis://:***@10.0.0.1:6379/0"),
    ("http://h/x?token=abc123&step=2", "http://h/x?token=***&step=2"),
    ("Authorization: Bearer eyJhbGciOi.J9x", "Authorization: Bearer ***"),
    ("HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "HF_TOKEN=***"),
    ("OPENAI sk-proj-abcdefghijklmnopqrstuvwx", "OPENAI ***"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123", "***"),
    ("a basic setting", "a basic setting"), ("https://host:8080/path", "https://host:8080/path"),
    ("tokens per second", "tokens per second"),
])
def test_secrets_inside_values_are_masked_whatever_the_key(text, want):
    assert secrets.mask_text(text) == want
    assert flatten({"note": text}).values["note"] == want


def test_a_secret_sections_values_are_all_masked_but_whether_they_are_set():
    flat = flatten({"credentials": {"user": "alice", "port": 22, "enabled": True,
                                    "missing": None}, "auth": ["a", "b"]})
    mask = config_wire.MASK
    assert flat.values == {"credentials.user": mask, "credentials.port": mask,
                           "credentials.enabled": True, "credentials.missing": None,
                           "auth": mask}
    # the server's second pass over flat keys reads the dotted parts as the sections
    again = bound({"credentials.user": "alice", "x.hf_token": "t", "x.lr": 0.1})
    assert again.values == {"credentials.user": config_wire.MASK, "x.hf_token": config_wire.MASK,
                            "x.lr": 0.1} and again.masked == 2


def test_the_bounds_hold_and_say_what_they_cut(monkeypatch):
    long = "é" * config_wire.MAX_VALUE_BYTES  # 2 bytes a character
    flat = flatten({"long": long, "k" * (config_wire.MAX_KEY_CHARS + 1): 1,
                    "many": {str(i): i for i in range(config_wire.MAX_KEYS + 10)}})
    assert flat.values["long"].endswith(config_wire.TRUNCATED)
    assert len(flat.values["long"].encode()) <= config_wire.MAX_VALUE_BYTES
    assert len(flat.values) == config_wire.MAX_KEYS
    assert flat.cut == {"keys": 12, "values": 1, "depth": 0}
    # the run's bytes
    big = flatten({f"key{i}": "v" * 1000 for i in range(200)})
    assert sum(len(k) + len(v) for k, v in big.values.items()) <= config_wire.MAX_RUN_BYTES
    assert big.cut["keys"] == 200 - len(big.values) > 0
    # depth and cycles: not entered, counted, never a recursion error
    deep: dict = {}
    node = deep
    for _ in range(config_wire.MAX_DEPTH + 5):
        node["d"] = {}
        node = node["d"]
    loop: dict = {"a": 1}
    loop["self"] = loop
    assert flatten(deep).cut["depth"] == 1
    looped = flatten(loop)
    assert looped.values["a"] == 1 and looped.cut["depth"] == 1
    # a huge list: the walk stops at MAX_NODES, in a bounded time, and says so
    monkeypatch.setattr("rl_insight.runconfig.flatten.MAX_NODES", 1000)
    huge = flatten({"rows": [{"x": i} for i in range(100_000)]})
    assert len(huge.values) < 1000 and huge.cut["keys"] >= 1


def test_a_config_that_is_one_value_or_raises_everywhere_still_flattens():
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no")

        def __str__(self):
            raise RuntimeError("no")

    @dataclasses.dataclass
    class Broken:
        x: int = 1

        def __getattribute__(self, name):
            if name == "x":
                raise RuntimeError("unreadable")
            return object.__getattribute__(self, name)

    assert flatten({"a": "x\udad0y", "b\udc00": 1}).values == {"a": "x?y", "b?": 1}
    assert flatten("abc").values == {"config": "abc"}
    assert flatten(Hostile()).values == {"config": "<Hostile>"}
    assert flatten(Broken()).values == {"x": "<unreadable: RuntimeError>"}


PLAIN = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
NESTED = st.recursive(PLAIN, lambda kids: st.lists(kids, max_size=4) |
                      st.dictionaries(st.text(max_size=12), kids, max_size=5), max_leaves=60)


@settings(max_examples=examples(200), deadline=None)
@given(NESTED)
def test_anything_flattens_to_json_within_the_bounds(config):
    flat = flatten(config)
    json.dumps(flat.body(), allow_nan=False)
    assert len(flat.values) <= config_wire.MAX_KEYS
    assert all(len(k) <= config_wire.MAX_KEY_CHARS for k in flat.values)
    assert all(len(v.encode()) <= config_wire.MAX_VALUE_BYTES for v in flat.values.values()
               if isinstance(v, str))
    assert bound(flat.values).values == flat.values  # the server's second pass: no change


def test_the_diff_puts_the_differing_keys_first_with_counts():
    a = {"lr": 1e-6, "batch": 64, "only_a": 1, "same": "x", "flag": True, "one": 1,
         "secret": config_wire.MASK}
    b = {"lr": 2e-6, "batch": 64, "only_b": 2, "same": "x", "flag": 1, "one": 1.0,
         "secret": config_wire.MASK}
    got = diff(a, b, cut_b={"keys": 3})
    assert [(r["key"], r["status"]) for r in got["keys"]] == [
        ("flag", CHANGED), ("lr", CHANGED), ("only_a", ONLY_A), ("only_b", ONLY_B),
        ("batch", SAME), ("one", SAME), ("same", SAME), ("secret", SAME)]
    assert got["counts"] == {CHANGED: 2, ONLY_A: 1, ONLY_B: 1, SAME: 4}
    assert got["differing"] == 4 and got["complete"] is False
    assert got["keys"][1] == {"key": "lr", "status": CHANGED, "a": 1e-6, "b": 2e-6}
    assert got["keys"][2] == {"key": "only_a", "status": ONLY_A, "a": 1}
    assert got["keys"][-1]["masked"] is True  # "same" says nothing of two secrets
    assert diff({}, {})["counts"] == {CHANGED: 0, ONLY_A: 0, ONLY_B: 0, SAME: 0}
    assert diff({"x": math.nan}, {"x": math.nan})["differing"] == 0


def test_metrics_show_the_keys_that_differ_in_a_project_first():
    base = {f"k{i:03d}": i for i in range(50)}
    runs = {("p", "a"): base, ("p", "b"): {**base, "k049": -1, "extra": 1},
            ("q", "c"): dict(base)}
    shown = exposed_keys(runs, 5)
    assert shown[("p", "a")] == ["k049", "k000", "k001", "k002", "k003"]
    assert shown[("p", "b")] == ["extra", "k049", "k000", "k001", "k002"]
    assert shown[("q", "c")] == ["k000", "k001", "k002", "k003", "k004"]  # alone in q


def test_text_of_values_and_the_options_section():
    assert [as_text(x) for x in (None, True, 1, 1.5, "a", float("inf"))] == [
        "null", "true", "1", "1.5", "a", "inf"]
    opts = {"server": {"url": "http://h:1"}}
    assert options_section({"trainer": {"rl_insight": opts}}) == opts
    assert options_section(SimpleNamespace(trainer=SimpleNamespace(rl_insight=opts))) == opts
    assert options_section(OmegaConf.create({"trainer": {"rl_insight": opts}})) == opts
    assert options_section({"trainer": {}}) is None and options_section(None) is None


def test_trackings_config_is_the_options_or_the_runs_configuration():
    """``Tracking(project, experiment_name, config)``: a mapping of init() keys only is the
    options, as before; verl's layout is the run's configuration with its options under
    trainer.rl_insight; a namespace or a dataclass is the run's."""
    from rl_insight.client.runconfig import split

    opts = {"server": {"url": "http://h:1"}, "flush_interval_s": 1.0}
    assert split(opts) == (opts, None) and split({}) == ({}, None)
    assert split(None) == (None, None)
    verl = {"trainer": {"rl_insight": opts, "total_epochs": 2}}
    assert split(verl) == (opts, verl)
    cfg = OmegaConf.create(verl)
    assert split(cfg)[1] is cfg and split(cfg)[0] == opts
    ns = argparse.Namespace(lr=0.1)
    assert split(ns) == (None, ns) and split(Args())[1] == Args()
    assert split({"server": {"url": "x"}, "lr": 0.1})[0] is None  # not options alone


def test_a_hand_over_says_what_its_bounds_cut_and_is_made_once_per_change(caplog):
    """The body the registrar's thread makes: the run's names, who handed it over, the
    flat values; a warning when the bounds cut something; None for the same
    configuration of the same run again (not sent twice), a body when it changed."""
    from rl_insight.client.runconfig import body

    config = {"lr": 0.1, "note": "x" * (config_wire.MAX_VALUE_BYTES + 10)}
    got = body("p", "cut-once", config, "trl")
    assert got["project"] == "p" and got["source"] == "trl" and got["values"]["lr"] == 0.1
    assert "1 values cut short" in caplog.text
    assert body("p", "cut-once", config, "log_config") is None
    config["lr"] = 0.2
    assert body("p", "cut-once", config)["values"]["lr"] == 0.2
