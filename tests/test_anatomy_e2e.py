"""End to end, with faults: the simulated run on a real Ray cluster, with a straggler
replica, a replica that hangs in generation, a trainer that stalls, a NaN loss, a replica
whose KV cache is too small (its requests preempted), an engine that goes down, a worker
that floods its buffer, one 30,000-token request and a burst of queued requests; the
engines trace every request (vLLM's llm_request spans, through the OpenTelemetry SDK's
own exporter, authenticated and attributed as docs/requests.md says). The server, the
real Prometheus (evaluating the generated rules) and the real Alertmanager deliver every
alert to a webhook receiver in this test; the step anatomy matches the simulation's own
ground truth, in `rl-insight report` and in Prometheus; `rl-insight report --step N`
explains the slow steps down to what was injected."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from bench.anatomy_error import compare
from dashboards import panels
from tests.conftest import REPO, wait_for
from tests.worlds import Favoured

pytestmark = pytest.mark.integration
RUN = {"project": "e2e-faults", "experiment_name": "anatomy"}
STEPS = 7
SIM = ["--mode", "sync", "--steps", str(STEPS), "--replicas", "3", "--ranks", "2",
       "--step-seconds", "3", "--val-every", "0", "--no-transfer-queue",
       "--straggler", "2:2",  # replica 2 generates twice as long as the others
       "--kv-pressure", "1",  # replica 1: KV cache saturated, preempting
       "--flood-at", "2",  # a worker drops events
       "--hang", "0:4:16",  # replica 0 stuck in vllm_generate in step 4 (threshold: 10 s)
       "--nan-loss-at", "5",
       "--stall-at", "6", "--stall-seconds", "12",  # the trainer hangs before step 6
       "--engine-down-at", "7",  # replica 0's /metrics goes away
       "--engine-traces",  # every request an llm_request span, as vLLM's
       "--long-request", "0:2:30000",  # step 2: replica 0 generates 30,000 tokens once
       # step 5: 100 more requests queue on replica 0 (the replica the stuck alert is
       # expected on: a burst as long as this trips it too)
       "--queue-burst", "0:5:100",
       "--linger", "4", "--project", RUN["project"], "--experiment-name",
       RUN["experiment_name"]]
ALERTS = {  # alert -> labels it must carry
    "RLInsightTrainingStalled": RUN,
    "RLInsightNonFiniteMetric": RUN,
    "RLInsightReplicaStuckInState": {**RUN, "state_lane_id": "replica_0",
                                     "state_name": "vllm_generate"},
    "RLInsightKVCacheSaturated": {**RUN, "replica": "1"},
    "RLInsightPreemptionBurst": {**RUN, "replica": "1"},
    "RLInsightTargetDown": {**RUN, "replica": "0"},
    "RLInsightDroppingEvents": {},
}


@pytest.fixture(scope="module")
def world(ray_world, tmp_path_factory):
    """The faulty run on the shared server and Ray cluster (tests/worlds.py: its alert
    thresholds and webhook are this module's)."""
    truth = tmp_path_factory.mktemp("truth") / "truth.json"
    cluster = ray_world.cluster
    # its steps are explained down to what was injected: the Ray world's processes come
    # first over the tests beside it (beside one busy loop and the suite, its flood's
    # step took 3.2 s more outside every phase, 2026-12-07, and ranked before the
    # injected generation)
    with Favoured(cluster):
        r = subprocess.run([sys.executable, str(REPO / "examples" / "simulate_rl.py"), *SIM,
                            "--truth", str(truth)], env=cluster.env(), cwd=cluster.workdir,
                           capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("SIMULATION "))
    sim = json.loads(line[len("SIMULATION "):])
    return ray_world.cli, ray_world.url, ray_world.hook, sim, json.loads(truth.read_text())


def test_every_alert_reaches_the_webhook_through_alertmanager(world):
    _cli, _url, hook, _sim, _truth = world

    def missing() -> list[str]:
        got = hook.alerts()
        return [name for name, labels in ALERTS.items()
                if not any(a["labels"].get("alertname") == name and
                           all(a["labels"].get(k) == v for k, v in labels.items())
                           for a in got)]
    wait_for(lambda: not missing(), 60, "every alert at the webhook", interval=0.5)
    stuck = [a for a in hook.alerts()
             if a["labels"]["alertname"] == "RLInsightReplicaStuckInState" and
             a["labels"].get("project") == RUN["project"]]  # the webhook is shared
    assert {a["labels"]["state_lane_id"] for a in stuck} == {"replica_0"}  # only the hung
    assert all(a["annotations"].get("summary") for a in hook.alerts())


def test_report_matches_the_ground_truth(world):
    cli, url, _hook, _sim, truth = world
    out = cli.run("report", "--server-url", url, "--project", RUN["project"],
                  "--experiment-name", RUN["experiment_name"], "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    err = compare(rows, truth)
    print("anatomy error against the ground truth:", json.dumps(err))
    assert err["steps_compared"] == STEPS
    assert err["duration_s"]["max"] < 0.05  # the marks are the trainer's own log times
    assert err["replica_generate_s"]["max"] < 0.1
    assert err["weight_update_s"]["max"] < 0.1
    # the ratio as the replicas' own records give it (how far above 2 it lands depends
    # on the machine's load: replica 1, short of KV cache, is slow too and moves the median)
    # (each generating time within 0.1 s: a ratio of ~2.5 over a ~2 s median within 0.35)
    assert err["straggler_ratio"]["max"] < 0.35, err
    for row in rows:  # the straggler, but where replica 0 hung, had the long request or
        # the burst
        assert row["slowest_replica"] == ("0" if row["step"] in (2, 4, 5) else "2"), row
        if row["step"] != 4:
            assert row["straggler_ratio"] > 1.3, row
        assert row["staleness"] == 0 and row["overlap_s"] < 0.05  # synchronous
        assert set(row["phases"]) >= {"actor_compute_log_prob", "actor_update",
                                      "update_weights"}
    by_step = {r["step"]: r for r in rows}
    assert by_step[6]["trainer_idle_s"] > 11  # the stall: no rank in any phase
    table = cli.run("report", "--server-url", url, "--project", RUN["project"],
                    "--experiment-name", RUN["experiment_name"])
    assert table.returncode == 0 and table.stdout.splitlines()[0].split()[0] == "STEP"
    assert len([x for x in table.stdout.splitlines() if x.split()[:1] == ["7"]]) == 2
    csv = cli.run("report", "--server-url", url, "--project", RUN["project"],
                  "--experiment-name", RUN["experiment_name"], "--format", "csv")
    assert csv.stdout.splitlines()[0].startswith("step,") and \
        len(csv.stdout.splitlines()) == STEPS + 1


def test_prometheus_holds_one_sample_per_step_at_the_step_end(world):
    cli, url, _hook, sim, _truth = world
    rows = requests.get(url + "/api/v1/anatomy", params=RUN, timeout=10).json()["steps"]
    ends = [r["end_ns"] / 1e6 for r in rows]
    sel = f'project="{RUN["project"]}",experiment_name="{RUN["experiment_name"]}"'
    window = int(time.time() - sim["t_start"]) + 30

    def samples() -> list:
        got = requests.get(cli.prometheus + "/api/v1/query", params={
            "query": f"rl_insight_step_duration_seconds{{{sel}}}[{window}s]"},
            timeout=10).json()["data"]["result"]
        return got[0]["values"] if got else []
    wait_for(lambda: len(samples()) >= STEPS - 1, 15, "a sample per step in Prometheus")
    got = samples()
    stamps = [round(float(t) * 1000) for t, _ in got]
    assert len(stamps) == len(set(stamps))  # never the same step twice
    # each at a step's end, as the report has it (the text format counts whole ms)
    assert all(min(abs(t - e) for e in ends) <= 1 for t in stamps), (stamps, ends)
    # per replica, one series each (no step label), one sample per step
    reps = requests.get(cli.prometheus + "/api/v1/query", params={
        "query": f"count_over_time(rl_insight_step_replica_generate_seconds{{{sel}}}"
                 f"[{window}s])"}, timeout=10).json()["data"]["result"]
    assert sorted(x["metric"]["replica"] for x in reps) == ["0", "1", "2"]


def test_alert_panels_show_the_firing_alerts(world):
    """The dashboards' alert table has rows while this run's alerts fire."""
    cli, _url, _hook, sim, _truth = world
    for panel in (panels.ALERT_PANELS[1], panels.ALL_ALERTS):
        expr = panel.queries[0].expr.replace("$project", RUN["project"]).replace(
            "$experiment_name", RUN["experiment_name"])
        r = requests.get(cli.prometheus + "/api/v1/query_range", params={
            "query": expr, "start": sim["t_start"], "end": time.time(), "step": "1s"},
            timeout=10).json()
        names = {x["metric"].get("alertname") for x in r["data"]["result"]}
        assert {"RLInsightTrainingStalled", "RLInsightNonFiniteMetric"} <= names, names


def test_slow_steps_are_explained_down_to_what_was_injected(world):
    """Step 2: replica 0's one 30,000-token request; step 5: the burst queued on replica
    0; replica 1, short of KV cache, has its requests preempted."""
    cli, url, _hook, sim, _truth = world

    def explain(step: int) -> dict:
        out = cli.run("report", "--server-url", url, "--project", RUN["project"],
                      "--experiment-name", RUN["experiment_name"], "--step", str(step),
                      "--format", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    two = explain(2)
    assert two["contributions"][0]["part"] == "generate:rollout", two["contributions"]
    cp = two["critical_path"]
    assert cp["slowest_replica"] == "0", cp
    top = cp["longest"]  # replica 0's longest request
    assert top["completion_tokens"] == 30_000 and top["replica"] == "0", top
    assert top["dominant_phase"] == "decode", top
    assert "generated 30,000 tokens" in top["why"], top
    five = explain(5)
    assert five["contributions"][0]["part"] == "generate:rollout", five["contributions"]
    cp = five["critical_path"]
    assert cp["slowest_replica"] == "0", cp
    # the requests replica 0 finished last queued behind the burst: far longer than the
    # role's usual queueing
    last = cp["tail"][0]
    assert last["dominant_phase"] == "queue", last
    assert last["queue_s"] > 2 * cp["requests"]["queue"]["baseline_mean_s"], (last, cp)
    # step 2 against step 1 (the simulation warms its replicas and ranks before step 1,
    # as verl's init_workers and fit() do: step 1 is no warm-up)
    assert two["goodput"]["gpu_hours_over_baseline"] > 0, \
        (two["duration_s"], two["baseline_duration_s"], two["goodput"])
    text = cli.run("report", "--server-url", url, "--project", RUN["project"],
                   "--experiment-name", RUN["experiment_name"], "--step", "2").stdout
    assert f"longest: {top['request_id']}" in text and \
        top["trace_id"] in text
    # the preempted replica, in the request series (never a request id as a label)
    sel = f'project="{RUN["project"]}",experiment_name="{RUN["experiment_name"]}"'
    got = requests.get(cli.prometheus + "/api/v1/query", params={
        "query": f"max by (replica) (max_over_time(rl_insight_request_preemptions_total"
                 f"{{{sel}}}[10m]))"}, timeout=10).json()["data"]["result"]
    preempted = {x["metric"]["replica"]: float(x["value"][1]) for x in got}
    assert preempted.get("1", 0) > 0 and preempted.get("0", 0) == 0, preempted
    labels = requests.get(cli.prometheus + "/api/v1/labels", params={
        "match[]": f'{{__name__=~"rl_insight_request_.+",{sel}}}'}, timeout=10).json()["data"]
    assert set(labels) <= {"__name__", "project", "experiment_name", "role", "replica",
                           "le", "job", "instance"}, labels


def test_the_why_section_fills_from_the_engines_requests(world, ray_world):
    """Every panel of the step-anatomy dashboard's "why was a step slow" section has
    data for this run, and its Tempo table finds the engines' request spans (step ->
    replica -> request)."""
    from tests.test_simulation_e2e import query_range, substitute
    from tests.traceql import span_filter

    cli, _url, _hook, sim, _truth = world
    run = {**RUN, "t_start": sim["t_start"]}
    empty = []
    for panel in panels.WHY:
        for q in panel.queries:
            expr = substitute(q.expr, run)
            if q.datasource == "tempo":
                keep = span_filter(expr.replace('.replica =~ ".*"', '.replica =~ "0"'))
                if not any(keep(a, s) for a, s in ray_world.tempo.spans):
                    empty.append(f"{panel.title}: {expr}")
            elif not query_range(cli.prometheus, expr, sim["t_start"], time.time()):
                empty.append(f"{panel.title}: {expr}")
    assert not empty, "\n".join(empty)
