"""The frameworks' tables and what reads them, in-process: a tracker's dicts as its step,
scalars and timing record; the server's rows from timing keys; a framework's own spans
mapped to lanes (and spans no table names, or of no run, kept and counted); late lanes
replacing a row made from timing keys; the driver lane and goodput buckets in a step's
anatomy; the OpenTelemetry variables `rl-insight ray-env --otel` writes."""

from __future__ import annotations

import re
import time

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rl_insight
from rl_insight import config, frameworks
from rl_insight.anatomy.rows import step_row
from rl_insight.collector.otlp_encode import encode
from rl_insight.frameworks import phases, table
from rl_insight.integrations.tracker import FrameworkTracker
from rl_insight.server.analyses.anatomy import RunAnatomy
from rl_insight.server.ingest import intake
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire.events import Identity, Span
from rl_insight.wire.frameworks import STEP_TIMING

PROTOBUF = "application/x-protobuf"
S = 1_000_000_000


@pytest.fixture
def state(tmp_path):
    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})
    st = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    st.open()
    st.relay.stop()  # what it would relay stays in the spool, to read
    yield st
    st.close()


@pytest.fixture
def sent(monkeypatch):
    """What a framework tracker hands the client, as the lane actors would encode it."""
    from rl_insight.client import api

    got = {"gauges": [], "spans": []}

    def trace_span(*, name, start_time_ns, end_time_ns, attributes):
        got["spans"].append(Span(name, start_time_ns, end_time_ns, None,
                                 tuple(attributes.items())))
    # the client API as the package exports it (the adapters' calls) and as the tracker
    # (the client's own Tracking) calls it
    for where in (rl_insight, api):
        monkeypatch.setattr(where, "enabled", lambda: True)
        monkeypatch.setattr(where, "init", lambda *a, **k: None)
        monkeypatch.setattr(where, "metric_gauge", lambda name, value, doc="", **kw:
                            got["gauges"].append((name, value)))
        monkeypatch.setattr(where, "trace_span", trace_span)
    return got


def test_every_table_names_its_source_and_parts_a_step_has():
    known = {table.GENERATE, table.WEIGHTS, table.IDLE}
    for fw in frameworks.FRAMEWORKS.values():
        assert re.search(r"\b[0-9a-f]{8}\b|\d+\.\d+\.\d+", fw.source), fw.name
        for key, t in fw.timings.items():
            assert t.part in known or re.fullmatch(r"[a-z_]+", t.part), (fw.name, key)
            assert key not in fw.containers
        for rule in fw.spans.values():
            assert rule.lane in (table.DRIVER, table.RANK, table.STEP), fw.name
            assert rule.lane != table.STEP or rule.step_attr, fw.name
        if any(r.lane == table.RANK for r in fw.spans.values()):
            assert fw.rank_from and re.compile(fw.rank_from[1]).groups == 1, fw.name
    assert frameworks.get("NeMo-RL") is frameworks.named("nemo_rl")
    assert frameworks.by_scope("nemo.lens") is frameworks.named("nemo_rl")


def test_a_timing_key_is_a_part_a_container_none_and_a_pattern_matches_each_domain():
    roll = frameworks.named("roll")
    assert roll.timing("time/step_generate").part == table.GENERATE
    assert roll.timing("math_rule/time/compute_advantage").part == "compute_advantage"
    assert roll.timing("actor/pg_loss") is None
    nemo = frameworks.named("nemo_rl")
    assert nemo.timing("timing/train/get_logprobs/shard_data") is None  # in a container
    assert nemo.timing("timing/train/idle/buffer_starvation").part == table.IDLE
    got = table.parts(frameworks.named("slime"), table.timing_values(frameworks.named("slime"), [
        ("perf/rollout_time", 60.0), ("perf/actor_train_time", 30.0),
        ("perf/train_time", 45.0), ("perf/step_time", 110.0),
        ("perf/update_weights_time", float("nan")), ("rollout/rewards", 0.4)]))
    assert (got.generate_s, got.step_s, got.phases) == (60.0, 110.0, {"actor_update": 30.0})


def test_a_slime_rollouts_dicts_make_one_step_in_the_order_its_processes_log_them(
        state, sent):
    """slime logs a rollout three times (the rollout manager's dict, then the training
    rank's before its actor train, then its perf dict) and each optimizer step's train/*
    dict without rollout/step: the step mark comes with the perf dict alone, every dict
    with rollout/step carries its timing keys, the train/* dicts are scalars only."""
    tracker = FrameworkTracker("slime")
    for k in (1, 2):
        tracker.log({"rollout/response_len/mean": 480.0, "perf/rollout_time": 6.0,
                     "rollout/step": k}, k)
        tracker.log({"rollout/rewards": 0.4, "rollout/step": k}, k)
        tracker.log({"train/loss": 0.01, "train/step": 2 * k}, 2 * k)
        tracker.log({"perf/actor_train_time": 3.0, "perf/log_probs_time": 1.0,
                     "perf/train_wait_time": 7.0, "perf/train_time": 4.0,
                     "perf/step_time": 11.0, "rollout/step": k}, k)
    steps = [v for n, v in sent["gauges"] if n == "step"]
    assert steps == [1.0, 2.0]
    records = [dict(s.attributes) for s in sent["spans"] if s.name == STEP_TIMING]
    assert [(r["step"], sorted(k for k in r if k.startswith("timing."))) for r in records] \
        == [(k, keys) for k in (1, 2) for keys in (
            ["timing.perf/rollout_time"], ["timing.perf/actor_train_time",
                                           "timing.perf/log_probs_time",
                                           "timing.perf/step_time"])]
    now = time.time_ns()
    body = encode([(Identity("p", "e"), "x", s._replace(start_ns=now + i, end_ns=now + i))
                   for i, s in enumerate(sent["spans"])])
    intake.accept_spans(state, body, PROTOBUF, "")
    state.anatomy.update(now / 1e9 + 10)  # step 1: a later one reported, settle passed
    rows = state.anatomy.rows("p", "e")
    assert [r.step for r in rows] == [1], rows
    row = rows[0]
    assert (row.source, row.framework, row.duration_s, row.generate_s) == \
        ("timing_keys", "slime", 11.0, 6.0)
    assert row.phases == {"actor_update": 3.0, "actor_compute_log_prob": 1.0}
    assert row.other_s == pytest.approx(1.0)


def provider(service: str, exporter: InMemorySpanExporter, **attrs) -> TracerProvider:
    p = TracerProvider(resource=Resource.create({"service.name": service, **attrs}))
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p


def test_a_frameworks_own_spans_map_to_lanes_and_the_others_are_kept_and_counted(state):
    """ROLL-shaped spans from the real SDK (scopes `driver` and `worker`): the step, the
    driver's phases and a rank's work on their lanes, annotated for Tempo; a span its
    table does not name, and spans of no run, kept unchanged and counted; spans of no
    framework untouched."""
    out = InMemorySpanExporter()
    run = {"project": "p", "experiment_name": "e"}
    driver = provider("driver", out, **run).get_tracer("driver")
    rank = provider("actor_train", out, **run,
                    **{"service.instance.id": "actor_train-1-G1"}).get_tracer("worker")
    nameless = provider("driver", out).get_tracer("driver")
    other = provider("mine", out, **run).get_tracer("my.own")
    with driver.start_as_current_span("pipeline_step", attributes={"global_step": 7}):
        with driver.start_as_current_span("generate"):
            pass
        with driver.start_as_current_span("train"):
            with rank.start_as_current_span("worker.train_step"):
                with rank.start_as_current_span("exec"):
                    pass
    with nameless.start_as_current_span("generate"):
        pass
    with other.start_as_current_span("train"):
        pass
    body = encode_spans(out.get_finished_spans()).SerializeToString()
    intake.accept_spans(state, body, PROTOBUF, "")
    lanes = {lane["lane"]: lane["states"] for lane in state.lanes.list("p", "e")}
    assert lanes["driver"] == {"generate": 1, "actor_update": 1}, lanes
    assert lanes["rank_1"] == {"actor_update": 1}
    assert lanes["trainer"] == {"train_step": 1}
    metrics = state.metrics.registry
    count = {(s.labels["framework"], s.labels["outcome"]): s.value
             for m in metrics.collect() if m.name == "rl_insight_framework_spans"
             for s in m.samples if s.name.endswith("_total")}
    assert count == {("roll", "mapped"): 4, ("roll", "unmatched"): 1,
                     ("roll", "no_run"): 1}, count
    (_, n, payload), = state.spool.peek_many(10**9)
    assert n == 7  # every span relayed, the mapped ones with their lane
    assert payload.count(b"state_lane_id") == 4 and b"exec" in payload and b"my.own" in payload


def test_lanes_that_come_after_a_steps_timing_keys_replace_its_row():
    """A framework's spans come seconds after its tracker's mark and timing keys (an
    exporter's batch, a followed file): the row made from the timing keys meanwhile is
    made again from the lanes, in its place."""
    run = RunAnatomy(100)
    settings = config.AnatomySettings(settle_s=1, max_wait_s=30)
    t = 1_000 * S
    for step in (1, 2):
        run.add_span("trainer", "train_step", t + (step - 1) * 10 * S, t + step * 10 * S, step)
        run.add_timing("roll", step, t + step * 10 * S, {"time/step_generate": 4.0})
    made = run.finalize(t + 40 * S, settings, finished=True)
    assert [(r.step, r.source) for r in made] == [(1, "timing_keys"), (2, "timing_keys")]
    run.add_span("driver", "generate", t + 1 * S, t + 6 * S, None)  # step 1's, late
    run.add_span("driver", "actor_update", t + 7 * S, t + 9 * S, None)
    redone = run.finalize(t + 41 * S, settings, finished=True)
    assert [(r.step, r.source) for r in redone] == [(1, "lanes")]
    assert [(r.step, r.source, r.generate_s) for r in run.rows] == \
        [(1, "lanes", 5.0), (2, "timing_keys", 4.0)]


def test_the_driver_lane_and_goodput_buckets_in_a_step():
    row = step_row(1, 0, 10 * S, {
        "driver": [("generate", 0, 4 * S), ("actor_update", 5 * S, 8 * S),
                   ("idle", 8 * S, 9 * S)],
        "rank_0": [("actor_update", 5 * S, 8 * S)]},
        buckets={"productive": [(0, 4 * S), (5 * S, 8 * S)], "idle": [(8 * S, 9 * S)]})
    assert (row.generate_s, row.straggler_ratio, row.roles["rollout"].replicas) == \
        (4.0, None, 0)
    assert row.phases == {"actor_update": 3.0}  # waiting is no phase: it stays in other
    assert (row.trainer_busy_s, row.other_s) == (3.0, 3.0)
    assert row.buckets == {"productive": 7.0, "idle": 1.0}


def test_ray_env_otel_points_a_frameworks_own_tracer_at_the_server():
    from rl_insight.ray.attach import framework_tracing_env

    ours = {"RL_INSIGHT_SERVER_URL": "http://10.0.0.5:18080", "RL_INSIGHT_TOKEN": "t k",
            "RL_INSIGHT_PROJECT": "p", "RL_INSIGHT_EXPERIMENT_NAME": "e 1"}
    got = framework_tracing_env(ours, {"OTEL_RESOURCE_ATTRIBUTES": "team=rl,project=x"})
    assert got["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "http://10.0.0.5:18080/v1/traces"
    assert got["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert got["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] == "Authorization=Bearer%20t%20k"
    # the job's own resource attributes stay, its project too; the run's name joins them
    assert got["OTEL_RESOURCE_ATTRIBUTES"] == "team=rl,project=x,experiment_name=e%201"
    assert framework_tracing_env({}, {}) == {}


def test_each_adapter_registers_the_engines_its_framework_knows(monkeypatch):
    """TRL's vLLM server (server mode), AReaL's inference servers (its launcher's
    AREAL_LLM_SERVER_ADDRS, else its rollout controller's), SkyRL's engines (its
    inference client): each a replica of its backend's job."""
    from types import SimpleNamespace as NS

    from rl_insight.integrations import areal, skyrl
    from rl_insight.integrations import trl as trl_adapter

    got = []
    monkeypatch.setattr(rl_insight, "update_prometheus_config",
                        lambda addrs, job, labels: got.append((list(addrs), job, labels)))
    monkeypatch.setattr(rl_insight, "init", lambda *a, **k: None)
    args = NS(use_vllm=True, vllm_mode="server", vllm_server_base_url=None,
              vllm_server_host="10.0.0.7", vllm_server_port=8000, run_name="r",
              output_dir="/tmp/out")
    trl_adapter.RLInsightCallback().on_train_begin(args, NS(is_world_process_zero=True), None)
    monkeypatch.setenv("AREAL_LLM_SERVER_ADDRS", "10.0.0.8:30000,10.0.0.9:30000")
    areal.register_servers(NS(), NS(allocation_mode="sglang:d2+fsdp:d2"))
    monkeypatch.delenv("AREAL_LLM_SERVER_ADDRS")
    areal.register_servers(NS(rollout=NS(server_infos=[NS(host="10.0.0.10", port=8000)])),
                           NS(allocation_mode="vllm:d1+fsdp:d1"))
    skyrl.register_engines(NS(trainer=NS(inference_engine_client=NS(
        server_urls=["http://10.0.0.11:8000", "http://10.0.0.12:8000"]))))
    assert got == [
        (["10.0.0.7:8000"], "vllm", [{"replica": 0}]),
        (["10.0.0.8:30000", "10.0.0.9:30000"], "sglang", [{"replica": 0}, {"replica": 1}]),
        (["10.0.0.10:8000"], "vllm", [{"replica": 0}]),
        (["10.0.0.11:8000", "10.0.0.12:8000"], "vllm", [{"replica": 0}, {"replica": 1}])]


def test_nemo_rls_chrome_trace_imported_gives_its_steps_from_its_own_step_spans(
        state, tmp_path):
    """NeMo-RL's Chrome trace (branch youngeunk/ray-overhead 852f78df
    nemo_rl/utils/trace.py: one JSON array written at the run's end; begin/end pairs of
    the driver, ``time.monotonic()`` µs, ``args.step`` 0-based): each ``step`` pair a
    step mark (1-based, as its logger's), its phases on the driver lane, read a step at
    a time and placed by the file's last write."""
    import json
    import os

    from rl_insight.integrations import tracefiles

    def pair(name, t0, t1, **args):
        return [{"name": name, "ph": "B", "ts": t0, "pid": 7, "tid": 7,
                 "args": {"tracer_name": "", **args}},
                {"name": name, "ph": "E", "ts": t1, "pid": 7, "tid": 7}]
    events = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 7, "args": {"name": "driver"}}]
    base = 81_234_600_000  # µs of time.monotonic()
    for step in range(3):
        t = base + step * 3_000_000
        slow = 1_000_000 if step == 1 else 0
        events += pair("step", t, t + 1_900_000 + slow, step=step)
        events += pair("sample", t + 100_000, t + 700_000)
        events += pair("policy_training", t + 800_000, t + 1_500_000 + slow)
        events += pair("weight_sync", t + 1_600_000, t + 1_800_000)
    path = tmp_path / "nemorl_trace.json"
    path.write_text(json.dumps(sorted(events, key=lambda e: e["ts"])))
    now = time.time()
    os.utime(path, (now, now))
    run = tracefiles.Run(frameworks.named("nemo_rl"), "p", "nemo")
    for _, payload, _ in tracefiles.read_all([path], run):
        intake.accept_spans(state, payload, PROTOBUF, "")
    state.anatomy.update(now + 60)
    rows = {r.step: r for r in state.anatomy.rows("p", "nemo")}
    assert sorted(rows) in ([1, 2], [1, 2, 3]), rows  # the last waits for the run's end
    assert rows[1].generate_s == pytest.approx(0.6)
    assert rows[2].phases["actor_update"] == pytest.approx(1.7)
    assert rows[1].weight_update_s == pytest.approx(0.2)
    assert rows[2].end_ns / 1e9 <= now + 1e-3  # placed before the file's write


def test_slime_with_a_backend_registry_calls_the_backend_through_it(sent, monkeypatch):
    """slime's tracking manager (THUDM/slime PR 1591, 3906ba15,
    slime/utils/tracking/manager.py): ``BACKEND_REGISTRY = {name: (cls, args_flag)}``
    read when ``init_tracking`` runs; ``attach`` registers ``rl_insight`` there with its
    flag set, and the manager's own calls reach the tracker (no patching of its log)."""
    import sys
    import types
    from argparse import Namespace

    from rl_insight.integrations import slime as adapter

    manager = types.ModuleType("slime.utils.tracking.manager")
    manager.BACKEND_REGISTRY = {}
    for name in ("slime", "slime.utils", "slime.utils.tracking"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.utils.tracking.manager", manager)
    monkeypatch.setattr(adapter, "_tracker", None)
    monkeypatch.setattr("atexit.register", lambda *a, **k: None)
    args = Namespace(hf_checkpoint="/m/Qwen3-4B", wandb_project=None, wandb_group=None,
                     custom_megatron_init_path=None, custom_rollout_log_function_path=None)
    adapter.attach(args)
    cls, flag = manager.BACKEND_REGISTRY["rl_insight"]
    assert flag == "use_rl_insight" and getattr(args, flag) is True
    # TrackingManager.init / log as the PR's logging_utils calls them
    backends = []
    for _, (kind, attr) in manager.BACKEND_REGISTRY.items():
        if getattr(args, attr, False):
            backend = kind()
            backend.init(args, primary=False, role="actor")
            backends.append(backend)
    for backend in backends:
        backend.log({"perf/actor_train_time": 3.0, "perf/step_time": 9.0,
                     "train/loss": 0.1, "rollout/step": 5}, step=5)
    assert ("step", 5.0) in sent["gauges"] and ("train/loss", 0.1) in sent["gauges"]
    (record,) = [dict(s.attributes) for s in sent["spans"] if s.name == STEP_TIMING]
    assert record["step"] == 5 and record["timing.perf/actor_train_time"] == 3.0


def test_roll_replaying_its_history_on_resume_sends_and_marks_no_finished_step(sent):
    """ROLL resumes (alibaba/ROLL 8eb27cc2 roll/pipeline/base_pipeline.py l.74-83 and
    l.136, rlvr_pipeline.py l.815-822): the pipeline makes the tracker, its executor thread
    replays state.log_history through tracker.log, and the first new step is logged by the
    pipeline's own thread once that replay is done (do_checkpoint waits for it). The old
    steps keep the times they were logged at: none is sent or marked again."""
    from concurrent import futures

    from rl_insight.integrations import roll

    tracker = roll.RLInsightTracker({"exp_name": "x", "resume_from_checkpoint": True},
                                    project="p", experiment_name="e")
    history = [{"system/step": s, "time/step_train": 2.0, "actor/pg_loss@sum": 0.1 * s}
               for s in range(4)]
    executor = futures.ThreadPoolExecutor(max_workers=5)

    def resume_metrics():
        for metrics in history:
            tracker.log(values=metrics, step=metrics["system/step"])

    resume_futures = [executor.submit(resume_metrics)]
    futures.wait(resume_futures)  # do_checkpoint, before the step's own log
    tracker.log(values={"system/step": 4, "time/step_train": 2.5,
                        "actor/pg_loss@sum": 0.5}, step=4)
    assert [v for k, v in sent["gauges"] if k == "step"] == [4.0]
    assert [v for k, v in sent["gauges"] if k == "actor/pg_loss"] == [0.5]
    assert [dict(s.attributes)["step"] for s in sent["spans"]] == [4]
    assert tracker.replayed == 4
    # a run that does not resume logs every dict, from any thread
    fresh = roll.RLInsightTracker({"exp_name": "y"}, project="p", experiment_name="f")
    executor.submit(fresh.log, {"system/step": 0, "time/step_train": 1.0}, 0).result()
    assert [v for k, v in sent["gauges"] if k == "step"] == [4.0, 0.0]


def test_rolls_newer_timers_and_spans_have_their_parts():
    roll_ = frameworks.named("roll")
    assert roll_.timing("math_rule/time/get_sample_level_mask").part == phases.DATA
    assert roll_.timing("time/get_sample_level_mask").part == phases.DATA
    for name, part in (("stop_server", phases.OFFLOAD), ("val_generate", phases.VALIDATION),
                       ("get_sample_level_mask", phases.DATA)):
        rule = roll_.rule(name, "driver")
        assert (rule.lane, rule.state) == (table.DRIVER, part), name


def test_skyrls_fully_async_checkpoint_is_no_part_of_its_step_and_the_syncs_is():
    """SkyRL's fully-async trainer (skyrl 0.3.0 fully_async_trainer.py l.505-600) saves
    after its `step` timer ends and logs the save's time in the same payload; the
    synchronous trainer (trainer.py l.340-491) saves inside its step."""
    sky = frameworks.named("skyrl")
    fully_async = [("timing/step", 10.0), ("timing/run_training", 6.0),
                   ("timing/sync_weights", 1.0), ("timing/save_checkpoints", 30.0),
                   ("timing/wait_for_generation_buffer", 2.0)]
    got = table.timing_values(sky, fully_async)
    assert "timing/save_checkpoints" not in got and got["timing/sync_weights"] == 1.0
    parts = table.parts(sky, got)
    assert parts.step_s == 10.0 and "save_checkpoint" not in parts.phases
    sync = [("timing/step", 40.0), ("timing/train_critic_and_policy", 6.0),
            ("timing/policy_train", 6.0), ("timing/save_checkpoints", 30.0)]
    assert table.parts(sky, table.timing_values(sky, sync)).phases["save_checkpoint"] == 30.0


def test_nemo_rls_dynamic_sampling_timer_is_inside_its_reward_calculation():
    """NeMo-RL (NVIDIA-NeMo/RL 7ea279ab nemo_rl/algorithms/grpo.py l.1752, l.3036-3089):
    with use_dynamic_sampling its `dynamic_sampling` timer runs within
    `reward_calculation`'s; counted once, as the reward's."""
    nemo = frameworks.named("nemo_rl")
    got = table.timing_values(nemo, [("timing/train/reward_calculation", 3.0),
                                     ("timing/train/dynamic_sampling", 2.0),
                                     ("timing/train/total_step_time", 20.0)])
    assert table.parts(nemo, got).phases == {"reward": 3.0}
    assert nemo.timing("timing/train/dynamic_sampling") is None


def _slime_with_a_registry(monkeypatch):
    """FAKE stand-ins of slime with a backend registry, as THUDM/slime pull request 1591
    (3906ba15) has it: slime/utils/tracking/manager.py's BACKEND_REGISTRY {name: (cls,
    args flag)}, read once when a process's init_tracking runs (TrackingManager.init);
    its logging module's log(args, metrics, step_key) fanning out to the backends the
    manager holds, here at main's path (slime/observability/logging_utils.py)."""
    import sys
    import types

    manager = types.ModuleType("slime.utils.tracking.manager")
    manager.BACKEND_REGISTRY = {}
    logging_utils = types.ModuleType("slime.observability.logging_utils")
    logging_utils.backends = []

    def init_tracking(args, primary=True, **kwargs):
        for kind, flag in list(manager.BACKEND_REGISTRY.values()):
            if getattr(args, flag, False):
                backend = kind()
                backend.init(args, primary=primary, **kwargs)
                logging_utils.backends.append(backend)

    def log(args, metrics, step_key):
        for backend in logging_utils.backends:
            backend.log(metrics, step=metrics.get(step_key))

    logging_utils.init_tracking, logging_utils.log = init_tracking, log
    timer = types.ModuleType("slime.observability.timer")  # slime's Timer: start, end

    class Timer:
        def start(self, name):
            pass

        def end(self, name):
            pass

    timer.Timer = Timer
    monkeypatch.setitem(sys.modules, "slime.observability.timer", timer)
    for name in ("slime", "slime.utils", "slime.utils.tracking", "slime.observability"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "slime.utils.tracking.manager", manager)
    monkeypatch.setitem(sys.modules, "slime.observability.logging_utils", logging_utils)
    return manager, logging_utils


@pytest.mark.parametrize("order", ["tracking set up first", "hook first"])
def test_slimes_rollout_manager_delivers_each_dict_once_whichever_comes_first(
        sent, monkeypatch, order):
    """Issue 50: slime's rollout manager sets up its tracking in its __init__
    (slime/ray/rollout.py l.402 at 624b824a), before our rollout-log hook first runs; a
    process whose hook ran first (the training rank's init hook) has the backend in its
    manager. Either way each rollout dict reaches RL-Insight exactly once."""
    from argparse import Namespace

    from rl_insight.integrations import slime as adapter

    _, logging_utils = _slime_with_a_registry(monkeypatch)
    monkeypatch.setattr(adapter, "_tracker", None)
    monkeypatch.setattr(adapter, "_in_manager", False)
    monkeypatch.setattr(adapter, "register_engines", lambda args: True)
    args = Namespace(hf_checkpoint="/m/Qwen3-4B", wandb_project=None, wandb_group=None,
                     use_rl_insight=True, custom_rollout_log_function_path=None,
                     custom_megatron_init_path=None)
    if order == "tracking set up first":
        logging_utils.init_tracking(args, primary=False)  # nothing registered yet
        adapter.rollout_log(7, args, [], {}, 5.0)  # the hook: registers, patches
    else:
        # a training rank: slime's init (actor.py l.80) runs our Megatron init hook,
        # then its main rank sets up its tracking (l.82-83)
        adapter.megatron_init(args)
        logging_utils.init_tracking(args, primary=False)  # the manager takes ours
    logging_utils.log(args, {"perf/rollout_time": 5.0, "rollout/response_len/mean": 300.0,
                             "rollout/step": 7}, "rollout/step")
    logging_utils.log(args, {"eval/gsm8k": 0.5, "eval/step": 7}, "eval/step")
    assert [v for k, v in sent["gauges"] if k == "perf/rollout_time"] == [5.0]
    assert [v for k, v in sent["gauges"] if k == "eval/gsm8k"] == [0.5]
    timings = [dict(s.attributes) for s in sent["spans"] if s.name == STEP_TIMING]
    assert [t["step"] for t in timings] == [7]


def test_slimes_reference_model_update_is_a_part_of_its_step():
    assert frameworks.named("slime").timing("perf/ref_model_update_time").part == "update_ref"
