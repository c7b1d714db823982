"""AReaL: ``rl_insight.integrations.areal.attach(trainer)`` (its StatsLogger wrapped, its
perf tracer's ``traces-r{rank}.jsonl`` followed) and ``rl-insight import`` of that file.

The integration tests drive areal 1.0.4 (PyPI; .venv/frameworks/areal/site-packages,
never imported by pytest) in processes of their own (tests/frameworks/areal_run.py):
PPOTrainer's loop from ``areal/trainer/rl_trainer.py`` replayed with AReaL's own
``areal/utils/stats_logger.py`` ``StatsLogger``, ``areal/utils/perf_tracer.py`` and
``areal/utils/stats_tracker.py``, the actor and engine standing in with AReaL's own
``trace_perf`` names (``areal/trainer/ppo/actor.py``, ``areal/engine/fsdp_engine.py``).
Two runs side by side: one with the perf tracer on (the anatomy's rows from its lanes),
one without (rows from the ``timeperf/*`` keys). Step 4's weight sync is 1.2 s slow; the
driver writes what each phase took. A third, traced, runs AReaL main's colocated weight
update through AWEX (areal-project/AReaL cbff54d6, after v2.0.0, not on PyPI: its loop's
order and untimed handover, AReaL 1.0.4's own ``TrainController`` dispatching the
weight update to two workers whose engines carry no trace scope, as tests/frameworks/
areal_run.py says); its step 4's rollout pause is 1.2 s slow.

The fast-tier tests read AReaL-shaped trace lines (the shapes of perf_tracer.py
``_record_complete`` and its metadata events) with rl_insight/integrations/tracefiles.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rl_insight import frameworks
from rl_insight.integrations import tracefiles
from rl_insight.server.ingest import framework_spans, spanwalk
from rl_insight.server.ingest.otlp import value_of
from rl_insight.wire import runconfig as config_wire
from tests import framework_checks as checks
from tests import worlds
from tests.conftest import REPO, prom_query, wait_for

AREAL_PATH = REPO / ".venv" / "frameworks" / "areal" / "site-packages"
DRIVER = REPO / "tests" / "frameworks" / "areal_run.py"
PROJECT = "areal-replay"  # AReaL's experiment_name: the run's project
TRACED, KEYS, IMPORTED = "ppo_traced", "ppo_keys", "ppo_imported"  # trial names
AWEX = "ppo_awex"
STEPS, SLOW, SLOW_EXTRA_S = 6, 4, 1.2
# a part's seconds, timed by the perf tracer's scope, AReaL's record_timing or the adapter
# around the driver's work and inside the driver's own timer, lie between the work's
# seconds and the timer's (tests/frameworks/areal_run.py keeps both): two clocks read a
# few lines apart, to CLOCKS_S. They were held within 0.05 s of the timer's: measured
# 2026-12-07, 10 runs beside one busy loop, 17 ms under it at worst, then 77 ms in a run
# beside another test's; the bounds hold whatever the load adds to either side
CLOCKS_S = 1e-3
# how near the traced run's windows and rank 0's weight sync come to the driver's:
# measured 2026-12-07, 10 runs beside one busy loop: 0.2 ms at worst (180 figures)
CLOSE_S = 0.05
# the imported file's place in time (its mtime taken as its last event's end) against the
# followed run's: measured 2026-12-07, 20 runs beside one busy loop: -7..+44 ms, every
# window of a run shifted by the same offset to the microsecond; three times the worst
ANCHOR_S = 0.15
# the adapter's own lines around the scheduler's call: measured 2026-12-07, 9 runs (51
# steps) beside one busy loop: 9-17 us over the FAKE scheduler's window; on a fresh clone
# beside a busy core and the suite's other worker (2026-12-08) 3.3 ms over, two ranks:
# a GIL hand-over between the adapter's stamp and the call (sys.getswitchinterval(),
# 5 ms) each way on each rank, 4 x 5 ms
WRAPPER_S = 0.02
AREAL = frameworks.named("areal")


def between(got: float, inner: float, outer: float) -> bool:
    """A part timed around the driver's work and inside its timer: between the two."""
    return inner - CLOCKS_S <= got <= outer + CLOCKS_S


# ---------------------------------------------------------------- integration tier


def _command(trial: str):
    """An AReaL replay, started beside the route server's other tests (tests/worlds.py)."""
    def command(url: str, work) -> tuple[list[str], dict, object]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RL_INSIGHT_", "VERL_")) and k not in ("RANK", "WORLD_SIZE")}
        env.update({"RL_INSIGHT_SERVER_URL": url, "VERL_RL_INSIGHT_ENABLE": "1",
                    "PYTHONPATH": f"{REPO}{os.pathsep}{AREAL_PATH}"})
        args = [sys.executable, str(DRIVER), "--root", str(work), "--experiment", PROJECT,
                "--trial", trial, "--slow-step", str(SLOW), "--truth",
                str(work / "truth.json")]
        if trial == KEYS:
            args.append("--no-perf-tracer")
        if trial == AWEX:  # its ranks' and handover's spans go out as the client's lanes
            args.append("--awex")
            env["RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S"] = "1"
        return args, env, work
    return command


for _trial in (TRACED, KEYS, AWEX):
    worlds.background(f"areal_{_trial}", "tests/test_framework_areal.py", _command(_trial))


@pytest.fixture(scope="module")
def runs(route_server):
    """The two runs, started with the server: {trial: truth} (truth: what each phase of
    each step took, the trace file). Their processes have ended when this returns."""
    assert (AREAL_PATH / "areal" / "utils" / "stats_logger.py").exists(), (
        f"areal is not in {AREAL_PATH}: run `make setup` (it installs AREAL_PACKAGES "
        "there without their dependencies)")
    truths = {}
    for trial in (TRACED, KEYS):
        run = route_server.background[f"areal_{trial}"]
        code, output = run.result(300)  # areal's import alone: 7 s idle, 30 s loaded
        assert code == 0, output[-5000:]
        truths[trial] = json.loads((run.cwd / "truth.json").read_text())
        truths[trial]["log"] = output
        truths[trial]["t_start"], truths[trial]["t_done"] = run.t_start, time.time()
    return truths


def anatomy(url: str, experiment: str) -> list[dict]:
    r = requests.get(url + "/api/v1/anatomy", timeout=10,
                     params={"project": PROJECT, "experiment_name": experiment})
    return r.json()["steps"] if r.status_code == 200 else []


def all_rows(url: str, experiment: str) -> list[dict]:
    """The run's rows once every step has one (the run finished: none is held back)."""
    return wait_for(lambda: (rows := anatomy(url, experiment)) and
                    [r["step"] for r in rows] == list(range(STEPS)) and rows, 30,
                    f"a row for each of the {STEPS} steps of {PROJECT}/{experiment}")


@pytest.mark.integration
def test_committed_scalars_reach_prometheus_with_the_runs_labels(route_server, runs):
    """Every number AReaL's commit got (its ``__count`` keys dropped, as its own commit
    drops them) is a gauge of the run named by AReaL's experiment and trial names."""
    truth = runs[TRACED]
    assert "Epoch 2/2 Step 3/3 Train step 6/6 done." in truth["log"]  # AReaL's own line
    assert truth["last_commit_step"] == STEPS - 1
    prom = route_server.cli.prometheus
    run = f'project="{PROJECT}",experiment_name="{TRACED}"'
    want = {"rl_insight_monitor_timeperf_rollout": truth["steps"][-1]["phases"]["rollout"],
            "rl_insight_monitor_timeperf_update_weights":
                truth["steps"][-1]["phases"]["update_weights"],
            "rl_insight_monitor_ppo_actor_task_reward_avg": 0.5,
            "rl_insight_monitor_ppo_actor_update_grad_norm": 0.31,
            "rl_insight_monitor_rollout_reward": 0.5}

    series: list[dict] = []

    def got() -> dict:
        series[:] = prom_query(prom, f'last_over_time({{{run},__name__=~'
                                     f'"rl_insight_monitor_.*"}}[10m])')
        return {x["metric"]["__name__"]: float(x["value"][1]) for x in series}
    wait_for(lambda: (g := got()) and all(abs(g.get(k, -1) - v) < 1e-3
                                          for k, v in want.items()), 30,
             f"the last commit's keys of {PROJECT}/{TRACED} in Prometheus")
    keys = {x["metric"].get("metric_key") for x in series}
    assert {"timeperf/rollout", "ppo_actor/task_reward/avg", "rollout/reward"} <= keys
    assert not [k for k in keys if k and k.endswith("__count")], keys  # AReaL drops them
    assert not [x for x in series if "__count" in x["metric"]["__name__"]]
    # its steps are marked by its perf trace, exactly: the commits mark none (the step
    # gauge); without the trace, the commits mark them
    assert "rl_insight_monitor_step" not in got()
    keyed = f'project="{PROJECT}",experiment_name="{KEYS}"'
    wait_for(lambda: any(float(x["value"][1]) == STEPS - 1 for x in prom_query(
        prom, f"last_over_time(rl_insight_monitor_step{{{keyed}}}[10m])")), 30,
        f"the last step of {PROJECT}/{KEYS}, marked by its commits")


@pytest.mark.integration
def test_the_experiment_config_is_the_runs_configuration(route_server, runs):
    """AReaL's experiment config (the dataclass its StatsLogger hands wandb), handed over
    by ``attach``: its fields, the wandb key in it masked; the two runs differ in it by
    their trial and their perf tracer."""
    traced, keys = (checks.run_config(route_server.url, {
        "project": PROJECT, "experiment_name": t}, "areal") for t in (TRACED, KEYS))
    assert traced["trial_name"] == TRACED and traced["total_train_epochs"] == 2
    assert traced["stats_logger.wandb.wandb_api_key"] == config_wire.MASK
    assert traced["perf_tracer.enabled"] is True and keys["perf_tracer"] is None


@pytest.mark.integration
def test_steps_from_the_perf_tracers_lanes(route_server, runs):
    """The perf tracer followed: a row per global_step from the driver lane (the
    trainer's ``train.*`` scopes; its window from the rollout's start to the last
    mapped scope's end, train.eval's), each part as long as the driver measured it;
    the actor's weight sync (``fsdp_engine.update_weights_from_distributed``) on rank
    0's lane."""
    truth = runs[TRACED]
    assert truth["trace_file"].endswith("perf_tracer/master/traces-r0.jsonl")
    rows = all_rows(route_server.url, TRACED)
    for row, step in zip(rows, truth["steps"], strict=True):
        ph, inner, win = step["phases"], step["inner"], step["windows"]
        where = f"step {row['step']}: {row}"
        assert row["source"] == "lanes", where
        for got, key in ((row["generate_s"], "rollout"),
                         (row["phases"]["update_weights"], "update_weights"),
                         (row["phases"]["actor_update"], "train_step"),
                         (row["phases"]["compute_advantage"], "compute_advantage")):
            assert between(got, inner[key], ph[key]), (key, where)
        assert row["start_ns"] / 1e9 == pytest.approx(win["rollout"][0], abs=CLOSE_S), where
        assert row["end_ns"] / 1e9 == pytest.approx(win["eval"][1], abs=CLOSE_S), where
        assert row["gpu_seconds"]["weight_sync"]["busy"] == pytest.approx(
            ph["update_weights"], abs=CLOSE_S), where  # rank_0's lane
    assert rows[SLOW]["phases"]["update_weights"] > SLOW_EXTRA_S


@pytest.mark.integration
def test_steps_from_the_timing_keys_without_the_perf_tracer(route_server, runs):
    """No perf tracer: the rows come from each commit's ``timeperf/*`` keys."""
    truth = runs[KEYS]
    assert truth["trace_file"] is None
    rows = all_rows(route_server.url, KEYS)
    for row, step in zip(rows, truth["steps"], strict=True):
        ph, inner = step["phases"], step["inner"]
        where = f"step {row['step']}: {row}"
        assert row["source"] == "timing_keys", where
        assert row["framework"] == "areal", where
        for got, key in ((row["generate_s"], "rollout"),
                         (row["phases"]["update_weights"], "update_weights"),
                         (row["phases"]["actor_update"], "train_step")):
            assert between(got, inner[key], ph[key]), (key, where)


@pytest.mark.integration
@pytest.mark.parametrize("trial", [TRACED, KEYS])
def test_the_slow_step_is_explained_by_its_weight_sync(route_server, runs, trial):
    """Step 4's 1.2 s of extra weight sync comes first, over the API and in
    ``rl-insight report --step 4``."""
    all_rows(route_server.url, trial)
    assert_slow_step_explained_by(route_server, trial, "phase:update_weights")


def assert_slow_step_explained_by(route_server, trial: str, part: str) -> None:
    """Step SLOW's SLOW_EXTRA_S comes first as ``part``, over the API and in
    ``rl-insight report --step SLOW``."""
    got = requests.get(route_server.url + "/api/v1/anatomy/explain", timeout=10, params={
        "project": PROJECT, "experiment_name": trial, "step": SLOW}).json()
    top = got["contributions"][0]
    assert top["part"] == part, got
    # (measured 2026-12-07, 10 runs beside one busy loop: -0.004..+0.019 s off, 29 steps)
    assert top["over_s"] == pytest.approx(SLOW_EXTRA_S, abs=0.2), got
    r = route_server.cli.run("report", "--project", PROJECT, "--experiment-name", trial,
                             "--step", str(SLOW))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"step {SLOW}: "), r.stdout
    first = lines[lines.index("where the time went, most over the baseline first:") + 1]
    assert part in first, r.stdout


@pytest.fixture(scope="module")
def awex(route_server):
    """The AWEX run's truth, once its process ended."""
    run = route_server.background[f"areal_{AWEX}"]
    code, output = run.result(300)
    assert code == 0, output[-5000:]
    return json.loads((run.cwd / "truth.json").read_text())


@pytest.mark.integration
def test_awex_weight_sync_is_measured_per_rank_and_its_pause_named(route_server, awex):
    """AReaL main's colocated weight update through AWEX: each rank's update_weights
    (no trace scope in MegatronEngine's AWEX path) on its own lane, as long as the worker
    took; the untimed handover's pauses a part of their own (``rollout_pause``), its
    offloads and onload ``offload``; step 4's slow pause named first by the API and by
    ``rl-insight report --step 4``."""
    rows = all_rows(route_server.url, AWEX)
    for row, step in zip(rows, awex["steps"], strict=True):
        ph, inner, where = step["phases"], step["inner"], f"step {row['step']}: {row}"
        assert row["source"] == "lanes", where
        for key in ("rollout_pause", "offload", "update_weights"):
            assert between(row["phases"][key], inner[key], ph[key]), (key, where)
        # each rank's update from the controller's dispatch to the worker's answer (the
        # adapter times the scheduler's call): at least the workers' own windows, at most
        # the dispatches' as the FAKE scheduler saw them (the thread's hand-over each way
        # is the run's own: 0.13 s over the workers' windows once, a loaded machine; it
        # was held within 0.1 s of them)
        worker = sum(end - start for start, end in step["ranks"].values())
        dispatched = sum(end - start for start, end in step["dispatched"].values())
        busy = row["gpu_seconds"]["weight_sync"]["busy"]
        assert len(step["ranks"]) == len(step["dispatched"]) == 2, where
        assert worker - 1e-3 <= busy <= dispatched + WRAPPER_S, where
    assert_slow_step_explained_by(route_server, AWEX, "phase:rollout_pause")


@pytest.mark.integration
def test_import_of_the_trace_file_gives_the_same_rows(route_server, runs):
    """``rl-insight import traces-r0.jsonl --framework areal`` after the run, into a
    run of its own: the steps from the events' global_step, the file placed in time by
    its mtime (its last event ends when it was written), so the same rows; the import
    sends a step at a time and marks the run finished, so its last step is made too."""
    url = route_server.url
    trace = runs[TRACED]["trace_file"]
    followed = all_rows(url, TRACED)
    r = route_server.cli.run("import", trace, "--framework", "areal", "--project", PROJECT,
                             "--experiment-name", IMPORTED)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"as {PROJECT}/{IMPORTED}" in r.stdout, r.stdout
    rows = wait_for(lambda: (got := anatomy(url, IMPORTED)) and
                    [x["step"] for x in got] == list(range(STEPS)) and got,
                    30, f"a row for steps 0-{STEPS - 1} of {PROJECT}/{IMPORTED}")
    # the file is placed in time by one anchor: every window shifted alike (to the
    # microsecond in 20 runs; 10 ms for a followed window that is its tracker's mark, a
    # few ms off), by how long after its last event the file was written (ANCHOR_S)
    offsets = [(row[k] - was[k]) / 1e9 for row, was in zip(rows, followed, strict=True)
               for k in ("start_ns", "end_ns")]
    assert max(offsets) - min(offsets) <= 0.01 and abs(offsets[0]) <= ANCHOR_S, offsets
    for row, was in zip(rows, followed, strict=True):
        where = f"step {row['step']}: {row} / followed: {was}"
        assert row["step"] == was["step"] and row["source"] == "lanes", where
        # the followed run's window may be its tracker's mark (commit to commit), the
        # first of the two to arrive: a few ms apart; its parts are the same spans'
        assert row["duration_s"] == pytest.approx(was["duration_s"], abs=CLOSE_S), where
        assert row["generate_s"] == pytest.approx(was["generate_s"], abs=1e-3), where
        assert row["phases"] == pytest.approx(was["phases"], abs=1e-3), where
        assert row["gpu_seconds"]["weight_sync"]["busy"] == pytest.approx(
            was["gpu_seconds"]["weight_sync"]["busy"], abs=1e-3), where  # rank 0's lane


@pytest.mark.integration
def test_areals_dashboard_fills_from_the_traced_run(route_server, runs):
    """Every panel of AReaL's dashboard has data for the traced run (its spans in Tempo
    with their lanes), and every key it committed reaches exactly one row."""
    all_rows(route_server.url, TRACED)
    run = {"project": PROJECT, "experiment_name": TRACED, "t_start": runs[TRACED]["t_start"],
           "t_done": runs[TRACED]["t_done"]}
    prom = route_server.cli.prometheus
    checked, empty = checks.empty_panels(prom, route_server.tempo.spans, "areal", run)
    assert checked > 10 and not empty, empty
    logged, off = checks.keys_not_in_one_row(prom, "areal", run)
    assert logged > 10 and not off, off


# ---------------------------------------------------------------- fast tier

PID = 1344
META = [  # perf_tracer.py: the metadata events it writes once per process and thread
    {"name": "thread_name", "ph": "M", "pid": PID, "tid": PID, "args": {"name": "MainThread"}},
    {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": "[master] Rank 0, Process"}},
    {"name": "process_sort_index", "ph": "M", "pid": PID, "args": {"sort_index": 0}},
]


def ev(name: str, ts: int, dur: int, cat: str = "compute", step: int | None = None,
       **args) -> dict:
    """One complete event as perf_tracer.py's ``_record_complete`` writes it: the
    trainer's scopes carry ``global_step``, nested ``trace_perf`` events only rank and role."""
    a = {} if step is None else {"global_step": step}
    a.update(args)
    a.update({"rank": 0, "role": "master"})
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": PID, "tid": PID,
            "cat": cat, "args": a}


def step_events(step: int, t0: int) -> list[dict]:
    """One PPO step's events in the file's order (a span is written when it exits: the
    nested one before its scope), ``t0`` µs after the tracer's start."""
    return [
        ev("train.rollout", t0, 400_000, step=step, epoch_step=step % 3),
        ev("ppo_actor.compute_advantages", t0 + 400_100, 19_800),
        ev("train.compute_advantage", t0 + 400_050, 20_000, step=step),
        ev("ppo_actor.ppo_update", t0 + 420_200, 199_600),
        ev("train.ppo_update", t0 + 420_100, 200_000, step=step),
        ev("fsdp_engine.update_weights_from_distributed", t0 + 620_200, 99_700, "comm"),
        ev("train.update_weights", t0 + 620_100, 100_000, "comm", step=step),
        ev("train.save", t0 + 720_200, 1, "io", step=step),
        ev("train.checkpoint", t0 + 720_300, 1, "io", step=step),
        ev("train.eval", t0 + 720_400, 1, step=step),
        ev("train.clear_batches", t0 + 720_500, 1, "instr", step=step),
        ev("train.log_stats", t0 + 720_600, 5_000, "instr", step=step),
    ]


STEP_US = 730_000
TRACE = META + step_events(0, 600) + step_events(1, 600 + STEP_US)


def lines(events: list[dict]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)  # json.dumps, a line each


def decode(payload: bytes) -> tuple[dict, list[tuple[str, int, int, dict]]]:
    """(resource attributes, [(name, start ns, end ns, attributes)]) of one export."""
    req = ExportTraceServiceRequest.FromString(payload)
    (rs,) = req.resource_spans
    res = {kv.key: value_of(kv.value) for kv in rs.resource.attributes}
    spans = [(s.name, s.start_time_unix_nano, s.end_time_unix_nano,
              {kv.key: value_of(kv.value) for kv in s.attributes})
             for ss in rs.scope_spans for s in ss.spans]
    return res, spans


def marks_of(payloads: list[bytes]) -> dict[int, tuple[int, int]]:
    """step -> (start, end) of every step mark among the exports (a step twice fails)."""
    out: dict[int, tuple[int, int]] = {}
    for p in payloads:
        for name, start, end, attrs in decode(p)[1]:
            if attrs.get("monitor.trace_segment") == "step":
                assert name == "train_step" and attrs["state_lane_id"] == "trainer"
                assert attrs["step"] not in out, f"step {attrs['step']} marked twice"
                out[attrs["step"]] = (start, end)
    return out


def window(step: int, anchor_s: float) -> tuple[int, int]:
    """A step's mark as it should be: its rollout's start to its last mapped scope's
    end, train.clear_batches' (the table does not map train.log_stats, and the nested
    events carry no step)."""
    t0 = 600 + step * STEP_US
    return int(anchor_s * 1e9) + t0 * 1000, int(anchor_s * 1e9) + (t0 + 720_501) * 1000


RUN = tracefiles.Run(AREAL, PROJECT, "unit")
ANCHOR = 1_796_411_930.0  # the tracer's clock's zero, in unix seconds


def test_complete_events_keep_areals_spans_and_skip_its_metadata():
    got = list(tracefiles.complete_events(
        TRACE + [{"name": "workflow_executor.rollout_batch", "ph": "i", "ts": 5, "s": "t",
                  "pid": PID, "tid": PID, "args": {}}]))
    assert [e["name"] for e in got] == [e["name"] for e in TRACE if e["ph"] == "X"]
    assert got[0] == {"name": "train.rollout", "ts": 600.0, "dur": 400_000.0,
                      "args": {"global_step": 0, "epoch_step": 0, "rank": 0,
                               "role": "master"}, "pid": PID, "tid": PID}
    # begin/end pairs (NeMo-RL's shape), innermost first
    be = [{"name": "outer", "ph": "B", "ts": 10, "pid": 1, "tid": 1, "args": {"k": 1}},
          {"name": "inner", "ph": "B", "ts": 20, "pid": 1, "tid": 1},
          {"name": "inner", "ph": "E", "ts": 30, "pid": 1, "tid": 1},
          {"name": "outer", "ph": "E", "ts": 50, "pid": 1, "tid": 1}]
    assert [(e["name"], e["ts"], e["dur"]) for e in tracefiles.complete_events(be)] == \
        [("inner", 20.0, 10.0), ("outer", 10.0, 40.0)]


def test_chrome_export_places_events_at_the_anchor_and_maps_them_at_the_server():
    events = list(tracefiles.complete_events(TRACE))
    run = tracefiles.Run(AREAL, PROJECT, "unit", {"rank": 0})
    res, spans = decode(tracefiles.chrome_export(events, run, ANCHOR))
    assert res["rl_insight.framework"] == "areal" and res["project"] == PROJECT
    assert res["experiment_name"] == "unit" and res["rank"] == 0
    name, start, end, attrs = spans[0]
    assert (name, start, end) == ("train.rollout", int(ANCHOR * 1e9) + 600_000,
                                  int(ANCHOR * 1e9) + 400_600_000)
    assert attrs == {"global_step": 0, "epoch_step": 0, "rank": 0, "role": "master"}
    assert tracefiles.chrome_export([], run, ANCHOR) is None
    # the server's mapping of the same export: the trainer's scopes on the driver lane,
    # the actor's on rank 0's, the rest (train.log_stats, nested helpers) kept, counted
    found = framework_spans.read(spanwalk.walk(ExportTraceServiceRequest.FromString(
        tracefiles.chrome_export(events, run, ANCHOR))).spans)
    lanes = {(row[2], row[3]) for row in found.rows}
    assert ("driver", "generate") in lanes and ("driver", "update_weights") in lanes
    assert ("rank_0", "actor_update") in lanes and ("rank_0", "update_weights") in lanes
    assert ("rank_0", "compute_advantage") in lanes and ("driver", "data_processing") in lanes
    # per step: train.log_stats (the commit's own time), kept in Tempo, counted
    assert found.counts[("areal", "unmatched")] == 2 * 1


def test_step_marks_span_each_global_steps_mapped_events():
    events = list(tracefiles.complete_events(TRACE))
    marks = marks_of([tracefiles.step_marks(events, RUN, ANCHOR)])
    assert marks == {0: window(0, ANCHOR), 1: window(1, ANCHOR)}
    # only events that carry the step and that the table maps count
    assert tracefiles.step_marks(
        [e for e in events if "global_step" not in e["args"]], RUN, ANCHOR) is None
    assert tracefiles.step_marks(
        [e for e in events if e["name"] == "train.log_stats"], RUN, ANCHOR) is None
    # a framework with a step span of its own gets none
    assert tracefiles.step_marks(events, tracefiles.Run(frameworks.named("verl"), "p", "e"),
                                 ANCHOR) is None
    # a step at a time, in the order they end: the events that ended in the step (in
    # exports of at most `size`), then its mark; the server makes its row as it comes
    out = list(tracefiles.chrome_exports(events, RUN, ANCHOR, size=5))
    marks_at = [i for i, (_, n) in enumerate(out) if n == 0]
    assert len(marks_at) == 2 and marks_of([out[marks_at[0]][0]]) == {0: marks[0]}
    assert marks_of([out[marks_at[1]][0]]) == {1: marks[1]}
    assert sum(n for _, n in out) == len(events)
    assert all(n <= 5 for _, n in out)
    before = sum(n for _, n in out[:marks_at[0]])
    end0 = (marks[0][1] - int(ANCHOR * 1e9)) / 1000  # step 0's end, trace µs
    assert before == sum(1 for e in events if e["ts"] + e["dur"] <= end0)


def test_anchor_from_mtime_ends_the_last_event_at_the_files_write():
    events = list(tracefiles.complete_events(TRACE))
    last_end = (600 + STEP_US + 720_600 + 5_000) / 1e6  # step 1's train.log_stats
    assert tracefiles.anchor_from_mtime(events, ANCHOR + 10) == \
        pytest.approx(ANCHOR + 10 - last_end)
    assert tracefiles.anchor_from_mtime([], ANCHOR) is None
    wall = [dict(e, ts=ANCHOR * 1e6 + e["ts"]) for e in events]  # unix µs already
    assert tracefiles.anchor_from_mtime(wall, ANCHOR) is None


@pytest.mark.parametrize("path, rank", [
    ("traces-r0.jsonl", 0), ("/x/logs/u/exp/trial/perf_tracer/master/traces-r12.jsonl", 12),
    ("/x/perf_tracer/actor/traces-r3.jsonl", 3), ("nemorl_trace.json", None),
    ("/x/r5/traces.jsonl", None)])
def test_rank_of_reads_areals_file_name(path, rank):
    assert tracefiles.rank_of(path) == rank


class Sink:
    """The Follower's ``send``: keeps what it was given (or refuses, when told)."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.refuse = False

    def __call__(self, payload: bytes) -> bool:
        if self.refuse:
            return False
        self.payloads.append(payload)
        return True

    def names(self) -> list[str]:
        return [s[0] for p in self.payloads for s in decode(p)[1]
                if s[3].get("monitor.trace_segment") != "step"]


def traces_file(tmp_path: Path) -> Path:
    d = tmp_path / "logs" / "u" / PROJECT / "unit" / "perf_tracer" / "master"
    d.mkdir(parents=True)
    return d / "traces-r0.jsonl"


def test_follower_reads_the_file_as_it_grows_and_a_torn_line_waits(tmp_path):
    path = traces_file(tmp_path)
    sink = Sink()
    f = tracefiles.Follower(str(path.parent / "traces-r*.jsonl"), RUN, sink, ANCHOR)
    assert f.poll() == 0  # no file yet
    step0, step1 = META + step_events(0, 600), step_events(1, 600 + STEP_US)
    path.write_text(lines(step0))  # perf_tracer.save(step=0)
    assert f.poll() == 12 and sink.names() == [e["name"] for e in step0 if e["ph"] == "X"]
    assert marks_of(sink.payloads) == {0: window(0, ANCHOR)}
    res, _ = decode(sink.payloads[0])
    assert res["rank"] == 0 and res["experiment_name"] == "unit"  # from traces-r0
    assert f.poll() == 0  # nothing new
    text = lines(step1)
    cut = text.index("\n", len(text) // 2) + 20  # inside a line
    with path.open("a") as out:
        out.write(text[:cut])
    before = len(sink.names())
    n = f.poll()
    assert n == text[:cut].count("\n") and len(sink.names()) == before + n
    with path.open("a") as out:
        out.write(text[cut:])
    assert f.poll() == 12 - n
    assert sink.names()[12:] == [e["name"] for e in step1]  # each line once, in order
    assert marks_of(sink.payloads) == {0: window(0, ANCHOR), 1: window(1, ANCHOR)}
    assert f.spans_sent == 24 and not f.bad


def test_follower_sends_again_what_the_server_refused(tmp_path):
    path = traces_file(tmp_path)
    sink = Sink()
    f = tracefiles.Follower(str(path), RUN, sink, ANCHOR)
    path.write_text(lines(META + step_events(0, 600)))
    sink.refuse = True
    assert f.poll() == 0 and f.exports_failed == 2 and len(f.unsent) == 2
    sink.refuse = False
    assert f.poll() == 12 and not f.unsent
    assert marks_of(sink.payloads) == {0: window(0, ANCHOR)}


def test_the_last_read_at_exit_sends_again_until_taken_within_the_deadline(tmp_path, caplog):
    """At exit (follow.last_read): the loop's last poll, then what the server refused
    sent again until it is taken, within the client's exit deadline; a server that never
    takes it is given up on at the deadline, said with what to do."""
    from rl_insight.collector.loop import Periodic
    from rl_insight.integrations import follow

    path = traces_file(tmp_path)
    path.write_text(lines(META + step_events(0, 600)))
    tries = []

    class Busy(Sink):  # refuses its first three sends, as a server timing out would
        def __call__(self, payload: bytes) -> bool:
            tries.append(payload)
            return len(tries) > 3 and super().__call__(payload)

    sink = Busy()
    f = tracefiles.Follower(str(path), RUN, sink, ANCHOR)
    loop = Periodic(3600, f.poll, "test-follow").start()
    follow.last_read(loop, f, 10.0)
    assert not f.unsent and len(sink.payloads) == 2 and len(tries) > 3

    path.write_text(lines(META + step_events(0, 600)))
    sink.refuse = True
    f = tracefiles.Follower(str(path), RUN, sink, ANCHOR)
    loop = Periodic(3600, f.poll, "test-follow").start()
    with caplog.at_level("WARNING"):
        follow.last_read(loop, f, 0.2)
    assert f.unsent and "RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S" in caplog.text


def test_follower_without_an_anchor_takes_the_files_mtime(tmp_path):
    path = traces_file(tmp_path)
    path.write_text(lines(TRACE))
    written = time.time() - 30
    os.utime(path, (written, written))
    sink = Sink()
    tracefiles.Follower(str(path), RUN, sink).poll()
    anchor = written - (600 + STEP_US + 725_600) / 1e6
    got = marks_of(sink.payloads)
    for step in (0, 1):
        assert got[step][0] == pytest.approx(window(step, anchor)[0], abs=2_000)
        assert got[step][1] == pytest.approx(window(step, anchor)[1], abs=2_000)


def worker_events(rank: int, t0: int) -> list[dict]:
    """An actor worker's file in single-controller mode (areal-project/AReaL v2.0.0
    fee938ea: its own tracer, role ``actor``, its index as rank; no global_step crosses
    the RPC): its PPO update and weight sync."""
    out = []
    for name, ts, dur in (("ppo_actor.ppo_update", t0 + 420_200, 199_600),
                          ("fsdp_engine.update_weights_from_distributed", t0 + 620_200,
                           99_700)):
        e = ev(name, ts, dur)
        e["args"].update(rank=rank, role="actor")
        out.append(e)
    return out


def test_single_controller_mode_follows_the_driver_and_every_actor_workers_file(tmp_path):
    """AReaL 2's default mode: the driver's tracer writes perf_tracer/master/traces-r0.jsonl
    and each actor worker perf_tracer/actor/traces-r{i}.jsonl from its own process
    (areal/utils/perf_tracer.py _default_trace_path l.199-243, rl_trainer.py
    _config_perf_tracer l.896-914); all are followed live from the driver, each worker's
    spans on its own rank lane. In SPMD ("legacy") each rank follows its own file."""
    from rl_insight.integrations import areal as adapter

    own = traces_file(tmp_path)
    patterns = adapter.trace_patterns(str(own), single=True)
    assert patterns == [str(own), str(own.parent.parent / "actor" / "traces-r*.jsonl")]
    assert adapter.trace_patterns(str(own), single=False) == [str(own)]
    own.write_text(lines(META + step_events(0, 600)))
    (own.parent.parent / "actor").mkdir()
    for rank in (0, 1):
        (own.parent.parent / "actor" / f"traces-r{rank}.jsonl").write_text(
            lines(worker_events(rank, 600)))
    sink = Sink()
    followers = [tracefiles.Follower(p, RUN, sink, ANCHOR) for p in patterns]
    assert sum(f.poll() for f in followers) == 12 + 2 * 2
    ranks = {}
    for payload in sink.payloads:
        res, spans = decode(payload)
        for name, *_ in spans:
            if name.startswith(("ppo_actor.", "fsdp_engine.")):
                ranks.setdefault(res.get("rank"), set()).add(name)
    assert set(ranks) == {0, 1}  # each worker's own rank (the driver's file is rank 0 too)
    assert ranks[1] == {"ppo_actor.ppo_update",
                        "fsdp_engine.update_weights_from_distributed"}


@pytest.mark.parametrize("value, ranks", [(None, None), ("all", None), ("", None),
                                          ("0", {0}), ("0,2-4", {0, 2, 3, 4}),
                                          ("0,x,3", {0, 3})])
def test_a_rank_areal_does_not_trace_is_said_not_silently_missing(value, ranks, caplog):
    """AREAL_PERF_TRACER_RANKS (AReaL after 2.0.0, areal/utils/environ.py
    rank_in_env_filter): unset, empty or `all` traces every rank; otherwise the ranks it
    names, bad parts ignored. Which ranks, said once in the log."""
    from rl_insight.integrations import areal as adapter

    assert adapter.say_rank_filter(value) == ranks
    said = [r.getMessage() for r in caplog.records if "AREAL_PERF_TRACER_RANKS" in
            r.getMessage()]
    assert bool(said) == (ranks is not None)
    if ranks:
        assert f"traces ranks {', '.join(map(str, sorted(ranks)))} only" in said[0]


class _FakeStatsLogger:
    """FAKE: AReaL's StatsLogger's step rule as areal/utils/stats_logger.py l.135-159
    (1.0.4 and 2.0.0 alike) has it: a commit of n dicts is logged at steps
    max(global_step, last + 1) .. +n-1, and the last kept (and restored on resume)."""

    def __init__(self) -> None:
        self._last_commit_step = -1
        self.logged: list[int] = []

    def commit(self, epoch, step, global_step, data):
        data = [data] if isinstance(data, dict) else data
        first = max(global_step, self._last_commit_step + 1)
        self.logged += [first + i for i in range(len(data))]
        self._last_commit_step = first + len(data) - 1

    def close(self):
        pass


def test_each_dict_keeps_the_step_areals_stats_logger_logged_it_at(monkeypatch):
    """A commit of two dicts at global_step 1 takes steps 1 and 2; the next commit, at
    global_step 2, is logged at 3 by AReaL: RL-Insight's steps are AReaL's own."""
    from rl_insight.integrations import areal as adapter

    monkeypatch.setattr(adapter, "_rank", lambda: 0)
    logged: list[int] = []
    tracker = type("T", (), {"log": lambda self, data, step: logged.append(step),
                             "finish": lambda self: None})()
    fake = _FakeStatsLogger()
    adapter.wrap(fake, tracker)
    fake.commit(0, 0, 0, {"a": 1.0})
    fake.commit(0, 1, 1, [{"a": 1.0}, {"a": 2.0}])
    fake.commit(0, 2, 2, {"a": 3.0})
    assert logged == fake.logged == [0, 1, 2, 3]
    fake._last_commit_step = 9  # restored from a checkpoint's state
    fake.commit(0, 3, 3, {"a": 4.0})
    assert logged[-1] == fake.logged[-1] == 10


class _AwexTrainer:
    """FAKE: what of PPOTrainer the AWEX handover touches in single-controller mode
    (areal-project/AReaL cbff54d6 rl_trainer.py l.768-780, l.874, l.879-897): the rollout
    controller's pause, pause_generation_sync and offload(tags), the actor controller's
    onload and update_weights, which TrainController dispatches to each worker through
    ``scheduler.async_call_engine(worker.id, method, "actor/<i>", ...)`` and gathers
    (train_controller.py l.471-483, l.558-589)."""

    def __init__(self, awex: bool = True, workers: int = 2) -> None:
        self.awex, self.called = awex, []
        self.config = object()
        record = self.called.append

        class Scheduler:
            async def async_call_engine(self, worker_id, method, engine_name=None, *args,
                                        rpc_meta=None, **kwargs):
                record((method, engine_name))

        class Actor:
            _worker_role, scheduler = "actor", Scheduler()

            def onload(self):
                record(("onload", None))

            def update_weights(self, meta):
                import asyncio

                async def call_workers():
                    return await asyncio.gather(*(self.scheduler.async_call_engine(
                        f"actor/{i}", "update_weights", f"actor/{i}", meta=meta)
                        for i in range(workers)))
                asyncio.run(call_workers())

        class Rollout:
            def pause(self):
                record(("pause", None))

            def pause_generation_sync(self):
                record(("pause_generation_sync", None))

            def offload(self, tags=None):
                record(("offload", tuple(tags)))

        self.actor, self.rollout = Actor(), Rollout()

    def _is_v1_awex_colocate(self, config) -> bool:
        return self.awex

    def step(self) -> None:
        """One step's calls in the loop's order."""
        self.rollout.pause()
        self.rollout.pause_generation_sync()
        self.rollout.offload(tags=["kv_cache"])
        self.rollout.offload(tags=["weights"])
        self.actor.onload()
        self.rollout.pause()
        self.actor.update_weights({"version": 1})


def test_awex_handover_is_timed_into_the_step_and_each_ranks_weight_sync_on_its_lane(
        monkeypatch):
    """AReaL main's AWEX colocated handover (untimed by AReaL) measured under the names
    its TMS path gives the same calls, added to the step's committed dict; each worker's
    update_weights, as the controller dispatched it, a span on its rank's lane; the
    pauses and offloads on the driver's lane; every call made as AReaL made it."""
    import asyncio

    import rl_insight
    from rl_insight.frameworks import table
    from rl_insight.integrations import areal as adapter
    from rl_insight.integrations import areal_awex

    spans: list[tuple[str, str]] = []
    monkeypatch.setattr(rl_insight, "trace_span", lambda *, name, start_time_ns,
                        end_time_ns, attributes: spans.append(
                            (attributes["state_lane_id"], name)))
    monkeypatch.setattr(adapter, "_rank", lambda: 0)
    trainer = _AwexTrainer()
    handover = areal_awex.install(trainer, lanes=True)
    logged: list[dict] = []
    tracker = type("T", (), {"log": lambda self, data, step: logged.append(data),
                             "finish": lambda self: None})()
    fake = _FakeStatsLogger()
    adapter.wrap(fake, tracker, handover.take)
    trainer.step()
    asyncio.run(trainer.actor.scheduler.async_call_engine("actor/0", "export_stats",
                                                          "actor/0"))
    fake.commit(0, 0, 0, {"ppo_actor/task_reward/avg": 0.5})
    assert trainer.called == [
        ("pause", None), ("pause_generation_sync", None), ("offload", ("kv_cache",)),
        ("offload", ("weights",)), ("onload", None), ("pause", None),
        ("update_weights", "actor/0"), ("update_weights", "actor/1"),
        ("export_stats", "actor/0")]
    (step,) = logged
    timed = {k for k in step if k.startswith("timeperf/")}
    assert timed == {"timeperf/rollout_pause", "timeperf/rollout_pause_generation",
                     "timeperf/rollout_offload", "timeperf/actor_onload"}
    parts = table.parts(AREAL, {k: step[k] for k in timed})
    assert set(parts.phases) == {"rollout_pause", "offload"}
    assert sorted(spans) == sorted(
        [("driver", "rollout_pause")] * 3 + [("driver", "offload")] * 3 +
        [("rank_0", "update_weights"), ("rank_1", "update_weights")])
    fake.commit(0, 1, 1, {"ppo_actor/task_reward/avg": 0.5})  # nothing measured since
    assert not [k for k in logged[1] if k.startswith("timeperf/")]


def test_awex_lanes_only_where_the_perf_tracer_is_followed_and_other_modes_untouched(
        monkeypatch):
    """Without the perf tracer the rows come from the timing keys, which lanes of these
    spans alone would replace: none is sent. A run not in AWEX's colocated mode (AReaL
    times its other modes itself) is left as it is."""
    import rl_insight
    from rl_insight.integrations import areal_awex

    spans: list = []
    monkeypatch.setattr(rl_insight, "trace_span", lambda **kw: spans.append(kw))
    trainer = _AwexTrainer()
    handover = areal_awex.install(trainer, lanes=False)
    trainer.step()
    assert not spans and handover.take()["timeperf/actor_onload"] >= 0
    plain = _AwexTrainer(awex=False)
    pause = plain.rollout.pause
    assert areal_awex.install(plain, lanes=True) is None
    assert plain.rollout.pause == pause and "async_call_engine" not in vars(
        plain.actor.scheduler)


def test_awex_in_spmd_times_this_ranks_own_weight_update(monkeypatch):
    """SPMD ("legacy"): every rank runs the loop, its actor the engine itself; its own
    update_weights is timed, on its own rank's lane (RANK), the driver's lane left to
    rank 0."""
    import rl_insight
    from rl_insight.integrations import areal_awex, kit

    spans: list[tuple[str, str]] = []
    monkeypatch.setattr(rl_insight, "trace_span", lambda *, name, start_time_ns,
                        end_time_ns, attributes: spans.append(
                            (attributes["state_lane_id"], name)))
    monkeypatch.setattr(kit, "process_rank", lambda: 3)
    trainer = _AwexTrainer()
    engine = type("Engine", (), {"onload": lambda self: None,
                                 "update_weights": lambda self, meta: meta["version"]})()
    trainer.actor = engine
    areal_awex.install(trainer, lanes=True)
    trainer.rollout.pause()
    assert engine.update_weights({"version": 7}) == 7
    assert spans == [("rank_3", "update_weights")]
