"""The dashboards as Grafana models: generated output checked in, valid structure,
datasources by uid, variables, and TraceQL of Tempo's documented form."""

from __future__ import annotations

import json

import pytest

from dashboards import build
from tests.traceql import TraceQLError, check

HERE = build.HERE  # the shipped dashboards


def all_models() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(HERE.glob("*.json"))}


def test_checked_in_json_is_the_generated_output():
    assert build.main(["--check"]) == 0
    assert set(all_models()) == set(build.render_all())


@pytest.mark.parametrize("name", sorted(build.render_all()))
def test_valid_grafana_model(name):
    d = all_models()[name]
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    assert d["uid"] and d["title"].startswith("RL-Insight")
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    boxes = []
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0 and g["y"] >= 0
        for (x, y, w, h) in boxes:
            overlap = g["x"] < x + w and x < g["x"] + g["w"] and g["y"] < y + h and \
                y < g["y"] + g["h"]
            assert not overlap, f"{p['title']} overlaps another panel"
        boxes.append((g["x"], g["y"], g["w"], g["h"]))
        if p["type"] == "row":
            continue
        uids = {p["datasource"]["uid"]} | {t["datasource"]["uid"] for t in p["targets"]}
        assert uids <= {"prometheus", "tempo"} and p["targets"]
        assert p["title"]
    names = [v["name"] for v in d["templating"]["list"]]
    for v in d["templating"]["list"]:
        assert v["datasource"]["uid"] == "prometheus"
    text = json.dumps(d["panels"])
    for var in ("project", "experiment_name", "replica", "node"):
        if f"${var}" in text:
            assert var in names, f"${var} is used but not defined"
    assert "10.0." not in text and "localhost" not in text  # nothing a user must edit


def traceql_expressions() -> list[str]:
    out = []
    for d in all_models().values():
        for p in d["panels"]:
            out += [t["query"] for t in p.get("targets", []) if t.get("queryType") == "traceql"]
    return sorted(set(out))


def test_every_traceql_expression_is_documented_syntax():
    exprs = traceql_expressions()
    assert len(exprs) >= 2
    for q in exprs:
        check(q)


@pytest.mark.parametrize("bad", [
    '{ span.state_lane_id = "replica_0" ',           # unclosed
    '{ span.state_lane_id == "replica_0" }',         # == is not TraceQL
    '{ "a" = "b" }',                                  # no attribute
    '{ span.x = "a" } | select(',                     # broken stage
    '{ span.x = "a" } | frobnicate(span.x)',          # unknown stage
    '{ span.x = "a" } | count()',                     # an aggregate needs a comparison
    'span.x = "a"',                                   # no braces
])
def test_the_traceql_checker_rejects_invalid_queries(bad):
    with pytest.raises(TraceQLError):
        check(bad)


def test_the_traceql_checker_accepts_documented_forms():
    for good in ['{}', '{ span.http.status_code >= 500 && duration > 2s }',
                 '{ resource.service.name = "api" } >> { status = error }',
                 '{ .foo =~ "ba.*" } | by(resource.service.name) | count() > 3',
                 '{ name = "vllm_generate" } | avg(duration) > 100ms',
                 '({ kind = server } && { span:status = ok })']:
        check(good)
