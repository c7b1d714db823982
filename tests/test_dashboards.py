"""The dashboards as Grafana models: generated output checked in, valid structure,
datasources by uid, variables, and TraceQL of Tempo's documented form."""

from __future__ import annotations

import json
import re

import pytest

from dashboards import build
from dashboards import panels as P
from tests.traceql import TraceQLError, check

HERE = build.HERE  # the shipped dashboards


def all_models() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(HERE.glob("*.json"))}


def test_checked_in_json_is_the_generated_output():
    assert build.main(["--check"]) == 0
    assert set(all_models()) == set(build.render_all())


def test_a_quiet_panel_says_so():
    """With nothing regressed, the step anatomy's What changed panels say "nothing
    changed", and with no alert firing every firing-alerts table says "nothing firing"
    (Grafana's "No value" text), never a bare "No data"."""
    models = all_models()

    def quiet(model: dict, title: str) -> str | None:
        panel = next(p for p in model["panels"] if p["title"] == title)
        return panel["fieldConfig"]["defaults"].get("noValue")

    anatomy = models["rl-insight-step-anatomy.json"]
    for title in ("Open regressions", "Step time against its baseline", "What moved with it"):
        assert quiet(anatomy, title) == "nothing changed", title
    tables = [(name, p["title"]) for name, m in models.items() for p in m["panels"]
              if p["title"] in ("Firing alerts", "Firing alerts, every run")]
    assert len(tables) >= 5, tables
    for name, title in tables:
        assert quiet(models[name], title) == "nothing firing", (name, title)
    # the culprit ranks' and profiles' tables, wherever they are (issue 60: 8 dashboards)
    for title, text in (("The rank each step waited for", P.BALANCED),
                        ("The ranks' code: profiles", P.NO_PROFILE)):
        where = [name for name, m in models.items()
                 if any(p["title"] == title for p in m["panels"])]
        assert len(where) >= 8, (title, where)
        for name in where:
            assert quiet(models[name], title) == text, (name, title)
    # a panel that is never quiet keeps Grafana's own
    assert quiet(anatomy, "Where each step's time went") is None


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


def _training_queries(curated: bool) -> list[str]:
    d = next(d for d in build.dashboards() if d.uid == "rl-insight-training")
    return [q.expr for sec in d.sections for p in sec.panels if bool(p.repeat) != curated
            for q in p.queries]


def _exported(key: str) -> str:
    """The exported name of a key, or of one member of a ``head/*`` family."""
    return P.gauge_key(key[:-1] + "x") if key.endswith("/*") else P.gauge_key(key)


def test_every_key_verl_logs_reaches_exactly_one_all_metrics_row():
    """verl 0.9.1's trainer keys (read from its metric code) each land in one row of
    "All trainer metrics": a key nobody curated is still on screen, and none twice."""
    from tests.verl_keys import verl_trainer_keys

    keys = verl_trainer_keys()
    assert len(keys) > 100, sorted(keys)
    groups = P.key_groups()
    repeated = _training_queries(curated=False)
    assert {g.variable for g in groups} == {
        re.search(r"\$\{(\w+)\}", q).group(1) for q in repeated}  # a row per group
    for key, where in sorted(keys.items()):
        name = _exported(key)
        rows = [g.title for g in groups if re.fullmatch(g.include, name)
                and not (g.exclude and re.fullmatch(g.exclude, name))]
        assert len(rows) == 1, f"{key} ({where}) -> {name}: rows {rows}"
    for own in ("rl_insight_monitor_lane_state", "rl_insight_monitor_step",
                "rl_insight_monitor_agent_loop_sessions_total"):  # not trainer keys
        assert not [g for g in groups if re.fullmatch(g.include, own)
                    and not re.fullmatch(g.exclude, own)], own
    assert [g.title for g in groups if re.fullmatch(g.include, "rl_insight_monitor_my_key")
            and not re.fullmatch(g.exclude, "rl_insight_monitor_my_key")] == ["Other keys"]


@pytest.mark.parametrize("key", [
    "actor/pg_clipfrac_lower", "actor/entropy_loss", "actor/reward_kl_penalty",
    "actor/reward_kl_penalty_coeff", "critic/score/min", "critic/rewards/max",
    "critic/advantages/min", "critic/returns/max", "critic/values/min", "critic/vf_loss",
    "global_seqlen/*", "perf/mfu/actor", "response_length_non_aborted/*",
    "rollout_corr/*", "timing_per_token_ms/*", "training/num_turns/*", "val-aux/*",
    "perf/max_memory_allocated_gb", "response/aborted_ratio"])
def test_the_families_upstream_shows_have_curated_panels(key):
    name = _exported(key)  # for a family, the name of one member

    def shows(q: str) -> bool:  # the name itself, or a name regex of the query matching it
        return bool(re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", q)) or any(
            re.fullmatch(rx, name) for rx in re.findall(r'__name__=~"([^"]+)"', q))
    assert any(shows(q) for q in _training_queries(curated=True)), key


def test_every_key_verl_omni_logs_reaches_exactly_one_all_metrics_row():
    """VeRL-Omni's trainer keys (tests/verl_omni_keys.py) each land in one row of "All
    trainer metrics" (none in Other keys), and the families its trainers add have
    curated panels on their mode's dashboard."""
    from dashboards import build
    from tests import verl_omni_keys as K

    groups = P.key_groups()
    keys = {k for ks in K.MODES.values() for k in ks} | set(K.OMNI_DPO) | set(K.VALIDATION)
    for key in sorted(keys):
        name = P.gauge_key(key)
        rows = [g.title for g in groups if re.fullmatch(g.include, name)
                and not (g.exclude and re.fullmatch(g.exclude, name))]
        assert len(rows) == 1 and rows != ["Other keys"], f"{key} -> {name}: rows {rows}"
    boards = {d.uid: d for d in build.dashboards()}
    for mode, families in {
            "diffusion": ("timing_per_image_ms/gen", "perf/total_num_images",
                          "perf/throughput", "critic/reward/clap/mean",
                          "critic/rewards/zero_std_ratio", "old_policy/decay",
                          "actor/ratio_mean", "rollout_corr/kl", "val-core/x/reward/mean@1"),
            "diffusion-v1": ("training/off_policy/trajectory_staleness/mean",
                             "training/rollout_failure/evicted_groups",
                             "training/filter_groups/evicted_samples",
                             "training/off_policy/dropped_samples"),
            "omni": ("val/audio/dpo_loss", "actor/dpo_loss", "agentic_reward/done/mean",
                     "perf/total_num_tokens", "training/off_policy/trajectory_spans/max")
            }.items():
        queries = [q.expr for sec in boards[f"rl-insight-verl-omni-{mode}"].sections
                   for p in sec.panels if not p.repeat for q in p.queries]
        for key in families:
            name = P.gauge_key(key)
            assert any(re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", q) or any(
                re.fullmatch(rx, name) and not any(re.fullmatch(x, name) for x in re.findall(
                    r'__name__!~"([^"]+)"', q))
                for rx in re.findall(r'__name__=~"([^"]+)"', q)) for q in queries), \
                (mode, key)
    # images, not tokens: the diffusion throughput panel's unit says so
    throughput = next(p for p in P.DIFFUSION if p.title == "Throughput")
    assert "img/s" in throughput.unit


def test_every_panel_unit_is_its_metrics_unit():
    """A panel that plots a metric as its source reports it shows it in that unit
    (dashboards/units.py: each source's unit and where it says so). Measured on an H200:
    DCGM's 39,287 MiB showed as 39.3 GB in decimal megabytes where the GPU held 41.2 GB."""
    from dashboards import units

    wrong, checked = [], 0
    for d in build.dashboards():
        for section in d.sections:
            for panel in section.panels:
                for q in panel.queries:
                    got = units.expected(q.expr) if q.datasource == "prometheus" else None
                    if got is None:
                        continue
                    checked += 1
                    if got[0] != panel.unit:
                        wrong.append(f"{d.uid} / {panel.title}: {panel.unit}, but "
                                     f"{', '.join(sorted(set(got[1])))} is in {got[0]} "
                                     f"({units.unit_of(got[1][0]).source})")
    assert checked > 30
    assert not wrong, "\n".join(wrong)


def test_the_units_table_reads_what_each_expression_plots():
    from dashboards import units

    assert units.expected('max by (node) (DCGM_FI_DEV_FB_USED{node=~"a"})')[0] == "mbytes"
    assert units.expected("sum(rate(node_network_receive_bytes_total[1m]))")[0] == "Bps"
    assert units.expected("DCGM_FI_DEV_FB_USED / 1024") is None  # computed: not checked
    assert units.expected("up") is None  # no unit known
