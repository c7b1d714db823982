"""Alerting without a running server: the rule file (its thresholds from the settings,
loaded and evaluated by the real `promtool` over synthetic series), the Alertmanager
config (receivers, secrets, Debian's `amtool` accepting it), Prometheus' alerting
config, the alerts report and route, the status page section and `rl-insight alerts`."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from rl_insight import config
from rl_insight.commands import main as cli
from rl_insight.commands import server
from rl_insight.server.analyses import alert_rules, alerts, statuspage
from rl_insight.server.app import create_app
from rl_insight.server.services import SERVICES
from rl_insight.server.services.base import ServiceInfo
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire import laneid

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) "
                                    "is not installed: scripts/system-deps.sh")
NAMES = ["RLInsightTrainingStalled", "RLInsightNonFiniteMetric",
         "RLInsightReplicaStuckInState", "RLInsightKVCacheSaturated",
         "RLInsightPreemptionBurst", "RLInsightTargetDown", "RLInsightDroppingEvents",
         "StepTimeRegressed"]
RUN = 'project="p",experiment_name="e"'
ACTIVE = {"series": f'rl_insight_experiment_active{{{RUN},job="rl_insight_server"}}',
          "values": "1x80"}


@pytest.fixture
def settings(tmp_path):
    return config.load(environ={"RL_INSIGHT_HOME": str(tmp_path / "home")})


def rules_by_name(settings) -> dict[str, dict]:
    return {r["alert"]: r for r in alert_rules.render(settings)["groups"][0]["rules"]}


def promtool_test(tmp_path: Path, settings, series: list[dict], expr_tests: list[dict],
                  alert_tests: list[dict] = ()) -> None:
    """Run `promtool test rules` on the generated rule file; fail with its report."""
    rules = alert_rules.write(settings)
    test = tmp_path / "test.yml"
    test.write_text(yaml.safe_dump({
        "rule_files": [str(rules)], "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series,
                   "promql_expr_test": expr_tests, "alert_rule_test": list(alert_tests)}]}))
    r = subprocess.run([PROMTOOL, "test", "rules", str(test)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def counted(expr: str, by: str) -> str:
    """How many series an alert expression yields per label set (its values, NaN and
    Inf, compare badly)."""
    return f"count by ({by}) ({expr})"


# -- the rule file ----------------------------------------------------------------------
def test_one_group_of_alerts_each_with_severity_what_to_do_and_the_run(settings):
    data = alert_rules.render(settings)
    assert [g["name"] for g in data["groups"]] == ["rl_insight"]
    rules = data["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == NAMES
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"] and len(r["annotations"]["description"]) > 80
        if r["alert"] != "RLInsightDroppingEvents":  # the drop counters are per process
            assert "{{ $labels.project }}/{{ $labels.experiment_name }}" in \
                r["annotations"]["summary"]


def test_thresholds_come_from_the_settings(settings):
    for key, value in (("pending_for", "30s"), ("stall_factor", "4.5"), ("stall_min_s", "30"),
                       ("nonfinite_metrics", "actor_pg_loss, my_loss"),
                       ("state_stuck_factor", "7"), ("state_stuck_min_s", "42"),
                       ("state_stuck_window", "20m"), ("kv_cache_usage_max", "0.8"),
                       ("preemptions_per_s_max", "2.5"), ("target_down_for", "2m"),
                       ("dropped_window", "15m")):
        settings = config.with_values(settings, {f"alerts.{key}": value})
    r = rules_by_name(settings)
    assert "clamp_min(4.5 * rl_insight_step_median_duration_seconds, 30)" in \
        r["RLInsightTrainingStalled"]["expr"]
    assert '"rl_insight_monitor_(actor_pg_loss|my_loss)"' in r["RLInsightNonFiniteMetric"]["expr"]
    stuck = r["RLInsightReplicaStuckInState"]["expr"]
    assert "clamp_min(7 * (" in stuck and "), 42) + 5" in stuck and "[20m]" in stuck
    assert "vllm:kv_cache_usage_perc > 0.8" in r["RLInsightKVCacheSaturated"]["expr"]
    assert "sglang:token_usage > 0.8" in r["RLInsightKVCacheSaturated"]["expr"]
    assert "rate(vllm:num_preemptions_total[1m]) > 2.5" in r["RLInsightPreemptionBurst"]["expr"]
    assert r["RLInsightTargetDown"]["for"] == "2m"
    assert r["RLInsightDroppingEvents"]["expr"].count("[15m]") == 3
    assert {x["for"] for n, x in r.items() if n != "RLInsightTargetDown"} == {"30s"}
    for name in ("RLInsightTrainingStalled", "RLInsightNonFiniteMetric",
                 "RLInsightReplicaStuckInState", "RLInsightTargetDown"):
        assert r[name]["expr"].endswith(
            "and on(project, experiment_name) rl_insight_experiment_active == 1"), name


def test_both_sections_take_the_environment_and_flags_like_every_other(home):
    s = config.load(overrides=["alertmanager.group_wait=3s"], environ={
        "RL_INSIGHT_HOME": str(home), "RL_INSIGHT_ALERTS_STALL_FACTOR": "4",
        "RL_INSIGHT_ALERTMANAGER_PORT": "19093",
        "RL_INSIGHT_ALERTMANAGER_WEBHOOK_URLS": "http://h:1/a"})
    assert (s.alerts.stall_factor, s.alertmanager.port) == (4.0, 19093)
    assert (s.alertmanager.webhook_urls, s.alertmanager.group_wait) == ("http://h:1/a", "3s")
    assert [p.key for p in SERVICES["alertmanager"].ports(s)] == ["alertmanager.port"]


@pytest.mark.parametrize("key, value, message", [
    ("alerts.pending_for", "5 minutes", "alerts.pending_for: expected a duration"),
    ("alerts.state_stuck_window", "0s", "alerts.state_stuck_window: must be longer than 0"),
    ("alerts.nonfinite_metrics", "loss|x", "'loss|x' is not a metric name"),
    ("alertmanager.group_interval", "0m", "alertmanager.group_interval: must be longer"),
])
def test_a_bad_duration_or_name_is_an_error_naming_the_setting(settings, key, value, message):
    """The file that reads the setting refuses it: the rule file for alerts.*,
    Alertmanager's config for alertmanager.*; the other renders as before."""
    settings = config.with_values(settings, {key: value})
    reads, other = alert_rules.render, SERVICES["alertmanager"].render
    if key.startswith("alertmanager."):
        reads, other = other, reads
    with pytest.raises(config.ConfigError, match=message.replace("|", r"\|")):
        reads(settings)
    other(settings)  # a setting of one file never breaks the other


@pytest.mark.parametrize("key", ["alerts.stall_factor", "alerts.stall_min_s",
                                 "alerts.state_stuck_factor", "alerts.state_stuck_min_s",
                                 "alerts.kv_cache_usage_max"])
def test_thresholds_that_would_always_fire_are_refused(settings, key):
    with pytest.raises(config.ConfigError, match=f"{key}: must be at least"):
        settings = config.with_values(settings, {key: "0"})


@needs_promtool
@pytest.mark.integration  # starts promtool
def test_step_time_regressed_names_the_onset_size_part_and_first_cause(settings, tmp_path):
    """The alert keeps its labels as the ranking changes (the cause is read, not
    matched), and says what moved first."""
    base = f'{RUN},job="rl_insight_server",onset_step="31",signal="step_time"'
    series = [ACTIVE,
              {"series": f'rl_insight_step_regression_seconds{{{base},part="generate:rollout",'
                         'cause="response_length/mean +15%",scope=""}',
               "values": "_x4 8.5x40"},
              {"series": f'rl_insight_step_regression_ratio{{{base}}}', "values": "_x4 0.14x40"}]
    desc = ("The run's step_time has stayed 8.5 s (14%) over its baseline since step 31, in "
            "generate:rollout; first cause: response_length/mean +15%. Run `rl-insight "
            "report --changes --project p --experiment-name e` for what moved with it, or "
            "open the What changed section of the Step anatomy dashboard.")
    promtool_test(tmp_path, settings, series, [], [
        {"eval_time": "30s", "alertname": "StepTimeRegressed", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "StepTimeRegressed", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "project": "p", "experiment_name": "e",
                           "job": "rl_insight_server", "onset_step": "31"},
            "exp_annotations": {
                "summary": "p/e: steps 8.5 s slower (14%) since step 31",
                "description": desc}}]}])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_promtool_loads_the_rule_file_and_prometheus_config(settings):
    rules = alert_rules.write(settings)
    r = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and f"{len(NAMES)} rules found" in r.stdout, r.stdout + r.stderr
    launch = SERVICES["prometheus"].launch(settings, Path(shutil.which("prometheus") or
                                                          "/usr/bin/prometheus"))
    prom_yml = launch.argv[1].split("=", 1)[1]
    r = subprocess.run([PROMTOOL, "check", "config", prom_yml], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and "1 rule files found" in r.stdout, r.stdout + r.stderr


@needs_promtool
@pytest.mark.integration  # starts a process
def test_nonfinite_fires_on_nan_and_both_infinities_of_listed_metrics_of_active_runs(
        settings, tmp_path):
    def s(name: str, values: str, run: str = RUN) -> dict:
        return {"series": f'rl_insight_monitor_{name}{{{run},job="rl_insight"}}',
                "values": values}
    series = [s("actor_pg_loss", "1 1 NaN NaN NaN NaN NaN NaN NaN NaN"),
              s("actor_entropy", "Inf Inf Inf Inf Inf Inf Inf Inf Inf Inf"),
              s("critic_vf_loss", "-Inf -Inf -Inf -Inf -Inf -Inf -Inf -Inf -Inf -Inf"),
              s("actor_grad_norm", "1 2 3 4 5 6 7 8 9 10"),  # finite
              s("actor_lr", "NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN"),  # not listed
              s("actor_pg_loss", "NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN",
                'project="p",experiment_name="finished"'),  # not active
              ACTIVE]
    expr = rules_by_name(settings)["RLInsightNonFiniteMetric"]["expr"]
    by = "project, experiment_name, metric"
    run = {"project": "p", "experiment_name": "e"}
    description = rules_by_name(settings)["RLInsightNonFiniteMetric"]["annotations"][
        "description"].replace("{{ $labels.metric }}", "actor_pg_loss")
    promtool_test(tmp_path, settings, series, [
        {"expr": counted(expr, by), "eval_time": "15s", "exp_samples": [
            {"labels": f'{{{RUN},metric="actor_entropy"}}', "value": 1},
            {"labels": f'{{{RUN},metric="critic_vf_loss"}}', "value": 1}]},
        {"expr": counted(expr, by), "eval_time": "2m", "exp_samples": [
            {"labels": f'{{{RUN},metric="{m}"}}', "value": 1}
            for m in ("actor_entropy", "actor_pg_loss", "critic_vf_loss")]},
    ], [  # each fires after pending_for (1m), with its summary and description
        {"eval_time": "45s", "alertname": "RLInsightNonFiniteMetric", "exp_alerts": []},
        {"eval_time": "2m", "alertname": "RLInsightNonFiniteMetric", "exp_alerts": [
            {"exp_labels": {**run, "job": "rl_insight", "metric": m, "severity": "critical"},
             "exp_annotations": {
                 "summary": f"p/e: {m} is {v}",
                 "description": description.replace("actor_pg_loss", m)}}
            for m, v in (("actor_pg_loss", "NaN"), ("actor_entropy", "+Inf"),
                         ("critic_vf_loss", "-Inf"))]},
    ])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_training_stalled_after_max_of_factor_times_median_and_the_minimum(settings,
                                                                          tmp_path):
    def run(name: str, last_end: str, median: str) -> list[dict]:
        labels = f'project="p",experiment_name="{name}",job="rl_insight_server"'
        return [{"series": f"rl_insight_step_last_end_timestamp_seconds{{{labels}}}",
                 "values": last_end},
                {"series": f"rl_insight_step_median_duration_seconds{{{labels}}}",
                 "values": median},
                {"series": f"rl_insight_experiment_active{{{labels}}}", "values": "1x40"}]
    series = (run("short", "0x40", "10x40")  # stalled since 0: min 120 s rules
              + run("long", "0x40", "100x40")  # 3 x 100 s = 300 s rules
              + run("moving", "0+15x40", "10x40"))  # a step ends every 15 s
    expr = rules_by_name(settings)["RLInsightTrainingStalled"]["expr"]
    by = "experiment_name"
    promtool_test(tmp_path, settings, series, [
        {"expr": counted(expr, by), "eval_time": "1m", "exp_samples": []},
        {"expr": counted(expr, by), "eval_time": "2m15s",
         "exp_samples": [{"labels": '{experiment_name="short"}', "value": 1}]},
        {"expr": counted(expr, by), "eval_time": "5m15s",
         "exp_samples": [{"labels": '{experiment_name="long"}', "value": 1},
                         {"labels": '{experiment_name="short"}', "value": 1}]},
    ])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_replica_stuck_compares_its_time_in_the_state_with_the_usual(settings, tmp_path):
    settings = config.with_values(settings, {"alerts.state_stuck_min_s": "60"})
    base = f'{RUN},job="rl_insight_lanes",lane_actor="lanes-0"'

    def lane(lane_id: str, state: str, since: str, mean_s: float) -> list[dict]:
        role = laneid.role_of(lane_id)  # as the lane actors label the series
        labels = f'{base},role="{role}",state_lane_id="{lane_id}",state_name="{state}"'
        return [
            {"series": f"rl_insight_monitor_lane_state_since_seconds{{{labels}}}",
             "values": since},
            # the histogram's _sum and _count (no `le`): one state change every 15 s
            {"series": f"rl_insight_monitor_state_duration_seconds_sum{{{labels}}}",
             "values": f"0+{mean_s}x80"},
            {"series": f"rl_insight_monitor_state_duration_seconds_count{{{labels}}}",
             "values": "0+1x80"}]
    series = (lane("replica_0", "vllm_generate", "30x80", 10)  # in it since 30 s; usual 10 s
              + lane("replica_1", "vllm_generate", "0x80", 10)  # not in it now
              + lane("replica_2", "vllm_sleep", "30x80", 60)  # usual 60 s: 5 x 60 = 300 s
              + lane("rank_0", "actor_update", "30x80", 10)  # not a replica lane
              # verl main's lanes by role (RLInsightLogger.rollout_state_lane_id): a
              # teacher's replica is a replica lane too
              + lane("teacher_deepseek_r1_replica_2", "vllm_generate", "30x80", 10)
              # the same lane, an earlier lane actor's series: aggregated, not an error
              + [{"series": f'rl_insight_monitor_lane_state_since_seconds{{{RUN},'
                            'job="rl_insight_lanes",lane_actor="lanes-old",'
                            'state_lane_id="replica_0",state_name="vllm_generate"}',
                  "values": "0x80"}, ACTIVE])
    expr = rules_by_name(settings)["RLInsightReplicaStuckInState"]["expr"]
    by = "state_lane_id, state_name"
    promtool_test(tmp_path, settings, series, [
        # 30 s in: nothing; 2 min in (> max(5 x 10, 60) s + a 5 s lane tick): replica_0 only
        {"expr": counted(expr, by), "eval_time": "1m", "exp_samples": []},
        {"expr": counted(expr, by), "eval_time": "2m30s", "exp_samples": [
            {"labels": '{state_lane_id="replica_0",state_name="vllm_generate"}',
             "value": 1},
            {"labels": '{state_lane_id="teacher_deepseek_r1_replica_2",'
                       'state_name="vllm_generate"}', "value": 1}]},
        # over 300 s in its state, the sleeping replica too
        {"expr": counted(expr, by), "eval_time": "6m", "exp_samples": [
            {"labels": '{state_lane_id="replica_0",state_name="vllm_generate"}', "value": 1},
            {"labels": '{state_lane_id="replica_2",state_name="vllm_sleep"}', "value": 1},
            {"labels": '{state_lane_id="teacher_deepseek_r1_replica_2",'
                       'state_name="vllm_generate"}', "value": 1}]},
    ])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_engine_alerts_kv_cache_and_preemptions_of_vllm_and_sglang(settings, tmp_path):
    eng = f'{RUN},instance="10.0.0.5:8000",replica="0"'
    series = [
        {"series": f'vllm:kv_cache_usage_perc{{{eng},job="vllm"}}', "values": "0.97x20"},
        {"series": f'vllm:kv_cache_usage_perc{{{eng},job="vllm",engine="1"}}',
         "values": "0.5x20"},
        {"series": f'sglang:token_usage{{{eng},job="sglang"}}', "values": "0.99x20"},
        {"series": f'vllm:num_preemptions_total{{{eng},job="vllm"}}',
         "values": "0+120x20"},  # 8/s
        {"series": f'vllm:num_preemptions_total{{{eng},job="vllm",engine="1"}}',
         "values": "0+3x20"},  # 0.2/s
        {"series": f'sglang:num_retracted_reqs{{{eng},job="sglang"}}', "values": "3x20"},
    ]
    r = rules_by_name(settings)
    promtool_test(tmp_path, settings, series, [
        {"expr": counted(r["RLInsightKVCacheSaturated"]["expr"], "job, engine"),
         "eval_time": "2m", "exp_samples": [{"labels": '{job="vllm"}', "value": 1},
                                            {"labels": '{job="sglang"}', "value": 1}]},
        {"expr": counted(r["RLInsightPreemptionBurst"]["expr"], "job, engine"),
         "eval_time": "2m", "exp_samples": [{"labels": '{job="vllm"}', "value": 1},
                                            {"labels": '{job="sglang"}', "value": 1}]},
    ])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_target_down_only_for_engine_jobs_of_active_runs(settings, tmp_path):
    def up(job: str, run: str = RUN, value: str = "0x20") -> dict:
        return {"series": f'up{{{run},job="{job}",instance="10.0.0.5:8000"}}',
                "values": value}
    series = [up("vllm"), up("transfer_queue_storage"), up("sglang", value="1x20"),
              up("node-exporter"), up("vllm", 'project="p",experiment_name="done"'), ACTIVE]
    expr = rules_by_name(settings)["RLInsightTargetDown"]["expr"]
    promtool_test(tmp_path, settings, series, [
        {"expr": counted(expr, "job, experiment_name"), "eval_time": "1m", "exp_samples": [
            {"labels": '{job="vllm",experiment_name="e"}', "value": 1},
            {"labels": '{job="transfer_queue_storage",experiment_name="e"}', "value": 1}]},
    ])


@needs_promtool
@pytest.mark.integration  # starts a process
def test_dropping_events_names_each_counter_that_grew(settings, tmp_path):
    series = [
        {"series": 'rl_insight_hub_events_dropped_total{job="rl_insight_hub",hub="h"}',
         "values": "0 0 5 5 5 5 5 5 5 5"},
        {"series": 'rl_insight_lane_spans_dropped_total{job="rl_insight_lanes",'
                   'lane_actor="l"}', "values": "0x10"},
        {"series": 'rl_insight_spans_dropped_total{job="rl_insight_server",reason="full"}',
         "values": "2 2 2 3 3 3 3 3 3 3"},
    ]
    expr = rules_by_name(settings)["RLInsightDroppingEvents"]["expr"]
    promtool_test(tmp_path, settings, series, [
        {"expr": counted(expr, "counter"), "eval_time": "2m", "exp_samples": [
            {"labels": '{counter="hub_events"}', "value": 1},
            {"labels": '{counter="server_spans"}', "value": 1}]},
    ])


# -- Prometheus' config ----------------------------------------------------------------
def test_prometheus_loads_the_rules_and_sends_to_the_managed_alertmanager(settings):
    prom = SERVICES["prometheus"]
    data = prom.render(settings, alertmanager=True)
    assert data["rule_files"] == [str(alert_rules.rule_file(settings))]
    # beyond loopback (the default host) Alertmanager wants its password: from its file
    assert data["alerting"]["alertmanagers"] == [
        {"api_version": "v2", "static_configs": [{"targets": ["127.0.0.1:9093"]}],
         "basic_auth": {"username": "rl-insight", "password_file":
                        str(settings.state_dir / "alertmanager.password")}}]
    settings = config.with_values(settings, {"alertmanager.host": "127.0.0.1"})
    assert prom.render(settings, alertmanager=True)["alerting"]["alertmanagers"] == [
        {"api_version": "v2", "static_configs": [{"targets": ["127.0.0.1:9093"]}]}]
    assert "alerting" not in prom.render(settings, alertmanager=False)
    settings = config.with_values(settings, {"alertmanager.enabled": "false"})
    assert "alerting" not in prom.render(settings)
    settings = config.with_values(settings, {"alerts.enabled": "false"})
    assert "rule_files" not in prom.render(settings)


@pytest.mark.integration  # starts a process
def test_an_alertmanager_that_is_not_installed_is_not_sent_to(settings, tmp_path):
    settings = config.with_values(settings, {
        "alertmanager.binary": str(tmp_path / "no-such-alertmanager")})
    launch = SERVICES["prometheus"].launch(settings, Path("/usr/bin/prometheus"))
    data = yaml.safe_load(Path(launch.argv[1].split("=", 1)[1]).read_text())
    assert "alerting" not in data and data["rule_files"]
    assert alert_rules.rule_file(settings).is_file()


# -- Alertmanager's config -------------------------------------------------------------
def test_alertmanager_groups_per_alert_and_run_into_one_receiver(settings):
    for key, value in (("group_wait", "5s"), ("group_interval", "2m"),
                       ("repeat_interval", "12h"),
                       ("webhook_urls", "http://10.0.0.9:5001/hook, https://x.example/h")):
        settings = config.with_values(settings, {f"alertmanager.{key}": value})
    data = SERVICES["alertmanager"].render(settings)
    assert data["route"] == {"receiver": "rl-insight",
                             "group_by": ["alertname", "project", "experiment_name"],
                             "group_wait": "5s", "group_interval": "2m",
                             "repeat_interval": "12h"}
    assert data["receivers"] == [{"name": "rl-insight", "webhook_configs": [
        {"url": "http://10.0.0.9:5001/hook", "send_resolved": True},
        {"url": "https://x.example/h", "send_resolved": True}]}]


def test_slack_and_email_receivers(settings):
    for key, value in (("slack_api_url", "https://hooks.slack.com/services/T/B/x"),
                       ("slack_channel", "#rl-alerts"), ("email_to", "team@example.com"),
                       ("email_from", "rl@example.com"),
                       ("smtp_smarthost", "smtp.example.com:587"),
                       ("smtp_auth_username", "rl"), ("smtp_auth_password", "pw")):
        settings = config.with_values(settings, {f"alertmanager.{key}": value})
    receiver = SERVICES["alertmanager"].render(settings)["receivers"][0]
    assert "webhook_configs" not in receiver
    assert receiver["slack_configs"] == [{"api_url": "https://hooks.slack.com/services/T/B/x",
                                          "send_resolved": True, "channel": "#rl-alerts"}]
    assert receiver["email_configs"] == [{
        "to": "team@example.com", "from": "rl@example.com",
        "smarthost": "smtp.example.com:587", "send_resolved": True,
        "auth_username": "rl", "auth_password": "pw"}]


@pytest.mark.parametrize("overrides, message", [
    (["email_to=a@b.c"], "alertmanager.email_from must be set"),
    (["email_to=a@b.c", "email_from=x@b.c"], "alertmanager.smtp_smarthost must be set"),
    (["email_to=a@b.c", "email_from=x@b.c", "smtp_smarthost=smtp.b.c"], "expected host:port"),
    (["webhook_urls=10.0.0.9:5001/hook"], "alertmanager.webhook_urls: expected an http"),
])
def test_an_incomplete_receiver_is_an_error_naming_the_setting(settings, overrides, message):
    for o in overrides:
        key, _, value = o.partition("=")
        settings = config.with_values(settings, {f"alertmanager.{key}": value})
    with pytest.raises(config.ConfigError, match=message):
        SERVICES["alertmanager"].render(settings)


@pytest.mark.skipif(AMTOOL is None, reason="amtool (Debian prometheus-alertmanager) is not "
                    "installed: scripts/system-deps.sh")
@pytest.mark.parametrize("receivers", [{}, {
    "webhook_urls": "http://127.0.0.1:9/a", "slack_api_url": "https://hooks.slack.com/x",
    "slack_channel": "#a", "email_to": "a@b.c", "email_from": "x@b.c",
    "smtp_smarthost": "smtp.b.c:25", "smtp_auth_username": "u", "smtp_auth_password": "p"}],
    ids=["no receiver", "every receiver"])
@pytest.mark.integration  # starts a process
def test_debians_alertmanager_0_25_accepts_the_config(settings, receivers):
    for key, value in receivers.items():
        settings = config.with_values(settings, {f"alertmanager.{key}": value})
    launch = SERVICES["alertmanager"].launch(settings, Path("/usr/bin/prometheus-alertmanager"))
    path = launch.argv[1].split("=", 1)[1]
    r = subprocess.run([AMTOOL, "check-config", path], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_secrets_only_in_the_0600_config_never_in_argv(settings):
    settings = config.with_values(settings, {
        "alertmanager.slack_api_url": "https://hooks.slack.com/SECRET1",
        "alertmanager.email_to": "a@b.c", "alertmanager.email_from": "x@b.c",
        "alertmanager.smtp_smarthost": "smtp.b.c:25",
        "alertmanager.smtp_auth_password": "SECRET2"})
    launch = SERVICES["alertmanager"].launch(settings, Path("/usr/bin/alertmanager"))
    assert not any("SECRET" in a for a in launch.argv) and not launch.env
    path = Path(launch.argv[1].split("=", 1)[1])
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert "SECRET1" in path.read_text() and "SECRET2" in path.read_text()
    assert "--cluster.listen-address=" in launch.argv  # no gossip port
    assert launch.ready_url == "http://127.0.0.1:9093/-/ready"


def test_secrets_are_masked_in_server_config_and_passed_to_a_detached_server_as_env(
        home, capsys):
    secrets = ["alertmanager.slack_api_url=https://hooks.slack.com/SECRET1",
               "alertmanager.smtp_auth_password=SECRET2"]
    args = ["server", "config"] + [x for s in secrets for x in ("--set", s)]
    assert cli.main(args) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["alertmanager"]["slack_api_url"] == "***"
    assert out["alertmanager"]["smtp_auth_password"] == "***"
    parsed = cli.build_parser().parse_args(["server", "start", "--detach"] +
                                           [x for s in secrets for x in ("--set", s)])
    flags, env = server.passthrough(parsed)
    assert not any("SECRET" in f for f in flags)
    assert env == {"RL_INSIGHT_ALERTMANAGER_SLACK_API_URL": "https://hooks.slack.com/SECRET1",
                   "RL_INSIGHT_ALERTMANAGER_SMTP_AUTH_PASSWORD": "SECRET2"}


# -- the alerts report, route, status page and CLI ------------------------------------
class _Fake(http.server.BaseHTTPRequestHandler):
    """Prometheus' GET /api/v1/alerts and Alertmanager's GET /api/v2/alerts, canned."""

    answers: dict[str, object] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps(self.answers.get(self.path.split("?")[0], {})).encode()
        self.send_response(200 if self.path.split("?")[0] in self.answers else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def fake_server(answers: dict) -> tuple[http.server.HTTPServer, int]:
    handler = type("Handler", (_Fake,), {"answers": answers})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def prom_alert(name: str, state: str, run: str, **labels) -> dict:
    p, e = run.split("/")
    return {"labels": {"alertname": name, "project": p, "experiment_name": e,
                       "severity": "critical", **labels},
            "annotations": {"summary": f"{run}: {name}"}, "state": state,
            "activeAt": "2026-01-01T00:00:00Z", "value": "NaN"}


@pytest.fixture
def fakes(settings):
    firing = prom_alert("RLInsightNonFiniteMetric", "firing", "p/e", metric="actor_pg_loss")
    silenced = prom_alert("RLInsightTargetDown", "firing", "p/e", instance="h:1")
    pending = prom_alert("RLInsightTrainingStalled", "pending", "q/f")
    prom, prom_port = fake_server({"/api/v1/alerts": {"status": "success", "data": {
        "alerts": [pending, silenced, firing]}}})
    am, am_port = fake_server({"/api/v2/alerts": [
        {"labels": firing["labels"], "status": {"state": "active"}},
        {"labels": silenced["labels"], "status": {"state": "suppressed"}}]})
    settings = config.with_values(settings, {"host": "127.0.0.1"})
    settings = config.with_values(settings, {"prometheus.port": str(prom_port)})
    settings = config.with_values(settings, {"alertmanager.port": str(am_port)})
    services = {n: ServiceInfo(n, True, True) for n in ("prometheus", "alertmanager")}
    yield settings, services
    prom.shutdown()
    am.shutdown()


def test_report_lists_firing_first_with_alertmanagers_word_and_filters_by_run(fakes):
    settings, services = fakes
    got = alerts.report(settings, services)
    assert (got["prometheus"], got["alertmanager"]) == ("ok", "ok") and "error" not in got
    assert [(a["name"], a["state"], a["notification"]) for a in got["alerts"]] == [
        ("RLInsightNonFiniteMetric", "firing", "sent to receivers"),
        ("RLInsightTargetDown", "firing", "silenced"),
        ("RLInsightTrainingStalled", "pending", None)]
    first = got["alerts"][0]
    assert first["labels"]["metric"] == "actor_pg_loss" and first["value"] == "NaN"
    assert first["active_at"] and first["annotations"]["summary"]
    only = alerts.report(settings, services, project="q", experiment_name="f")
    assert [a["name"] for a in only["alerts"]] == ["RLInsightTrainingStalled"]


def test_report_without_prometheus_says_what_to_do_and_without_alertmanager_still_lists(
        fakes, tmp_path):
    settings, services = fakes
    got = alerts.report(settings, {**services, "alertmanager": ServiceInfo(
        "alertmanager", True, False)})
    assert len(got["alerts"]) == 3 and all(a["notification"] is None for a in got["alerts"])
    assert "not installed: run `rl-insight server install`" in got["alertmanager"]
    settings = config.with_values(settings, {"prometheus.port": "1"})  # nothing answers there
    down = alerts.report(settings, services, timeout=1)
    assert down["alerts"] == [] and "no answer from" in down["prometheus"]
    assert "`rl-insight server status`" in down["error"]


def test_route_answers_200_with_the_error_when_prometheus_is_down(settings, tmp_path):
    settings = config.with_values(settings, {"prometheus.port": "1"})
    state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir),
                        {"prometheus": ServiceInfo("prometheus", True, True)})
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            r = c.get("/api/v1/alerts", params={"project": "p"})
            assert r.status_code == 200, r.text
            assert r.json()["alerts"] == [] and "cannot tell which alerts fire" in \
                r.json()["error"]
            page = c.get("/")
            assert page.status_code == 200 and "<h2>Alerts</h2>" in page.text
            assert "cannot tell which alerts fire" in page.text
    finally:
        state.close()


def test_experiment_active_gauge_is_absent_for_finished_and_archived_runs(settings):
    state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    state.open()
    try:
        for e in ("a", "f", "x"):
            state.experiments.touch("p", e)
        state.set_experiment_status("p", "f", "finished")
        state.set_experiment_status("p", "x", "archived")
        with TestClient(create_app(state)) as c:
            text = c.get("/metrics").text
        lines = [ln for ln in text.splitlines()
                 if ln.startswith("rl_insight_experiment_active{")]
        assert lines == ['rl_insight_experiment_active{experiment_name="a",project="p"} 1.0']
    finally:
        state.close()


def test_status_page_section_lists_alerts_or_none_firing(fakes):
    settings, services = fakes
    report = {"server": {"pid": 1, "port": 1, "version": "v", "uptime_s": 1.0},
              "services": [], "clients": {"server_url": "http://h:1"},
              "traces": {"relay_url": "u", "relay_up": True, "spooled_spans": 0}}
    page = statuspage.render(report, [], [], [], None,
                             alerts=alerts.report(settings, services))
    section = page.split("<h2>Alerts</h2>", 1)[1].split("<h2>", 1)[0]
    assert "RLInsightNonFiniteMetric" in section and "p/e: RLInsightNonFiniteMetric" in section
    assert "silenced" in section and "pending" in section
    empty = statuspage.render(report, [], [], [], None, alerts={
        "alerts": [], "prometheus": "ok", "alertmanager": "ok"})
    assert "None firing." in empty


def test_cli_prints_one_line_per_alert_and_exits_1_when_some_fire(fakes, capsys):
    settings, services = fakes
    got = alerts.report(settings, services)
    server, port = fake_server({"/api/v1/alerts": got})
    try:
        code = cli.main(["alerts", "--server-url", f"http://127.0.0.1:{port}"])
        lines = capsys.readouterr().out.splitlines()
        assert code == 1
        assert lines[0].split()[:3] == ["FIRING", "RLInsightNonFiniteMetric", "p/e"]
        assert lines[0].endswith("p/e: RLInsightNonFiniteMetric")
        assert lines[2].split()[:3] == ["PENDING", "RLInsightTrainingStalled", "q/f"]
        assert cli.main(["alerts", "--server-url", f"http://127.0.0.1:{port}",
                         "--json"]) == 1
        assert json.loads(capsys.readouterr().out) == got
    finally:
        server.shutdown()
    quiet, port = fake_server({"/api/v1/alerts": {**got, "alerts": got["alerts"][2:]}})
    try:  # pending only: nothing fires
        assert cli.main(["alerts", "--server-url", f"http://127.0.0.1:{port}"]) == 0
    finally:
        quiet.shutdown()
    assert cli.main(["alerts", "--server-url", "http://127.0.0.1:1"]) == 2
