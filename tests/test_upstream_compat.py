"""The client as upstream 0.3.0 code and verl 0.9.1 call it: the API level verl gates
on, busy intervals, trace_state as a decorator, trace_op's extra_labels, the label-list
check, init's upstream keys and the agent-loop session. verl's own RLInsightLogger is
the caller wherever it has the call."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading

import pytest

from rl_insight import config
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
from rl_insight.wire.events import Identity, Metric, Span, StateChange

# verl's class, imported by the first test that asks for it: verl imports torch (11 s),
# which every pytest process paid to collect this module
RLInsightLogger = None


@pytest.fixture
def verl_logger():
    global RLInsightLogger
    if RLInsightLogger is None:
        import verl.utils.tracking as verl_tracking  # installed by `make setup`

        RLInsightLogger = verl_tracking.RLInsightLogger
    return RLInsightLogger


@pytest.fixture
def verl_recorded(recorded, monkeypatch, verl_logger):
    """``recorded``, with monitoring on for verl's RLInsightLogger in this process."""
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    monkeypatch.setattr(RLInsightLogger, "_init_done", True)
    monkeypatch.setattr(RLInsightLogger, "_warned_unsupported_features", set())
    return recorded


def of(got: list, kind: type) -> list:
    return [e for e in got if type(e) is kind]


def test_verl_version_gate_passes(verl_logger):
    import rl_insight

    assert RLInsightLogger._rl_insight_version() >= RLInsightLogger.MINIMUM_RL_INSIGHT_VERSION
    assert rl_insight.__version__ == "0.3.0"
    from rl_insight import agent_loop  # upstream's module paths
    from rl_insight import api as upstream_api

    assert upstream_api.trace_state is api.trace_state
    assert agent_loop.agent_loop_session is rl_insight.agent_loop_session


def test_concurrent_generate_requests_are_one_busy_interval(verl_recorded):
    """verl wraps every request of its async generate (the replica's event loop: vLLM's
    and SGLang's servers are asyncio) in trace_state on the replica's lane; 8 overlapping
    requests are one interval: one enter, one span."""
    c, got = verl_recorded

    async def generate() -> None:
        inside = asyncio.Barrier(8)

        async def request(i: int) -> None:
            with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_0"):
                await asyncio.wait_for(inside.wait(), 10)  # all eight overlap
        await asyncio.gather(*(request(i) for i in range(8)))

    asyncio.run(generate())
    with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_1"):
        pass  # another lane: its own interval
    c.buffer.flush(5)
    spans, enters = of(got, Span), of(got, StateChange)
    assert [(s.name, s.lane) for s in spans] == [("vllm_generate", "replica_0"),
                                                ("vllm_generate", "replica_1")]
    assert [(e.lane, e.token) for e in enters] == [("replica_0", spans[0].span_id),
                                                  ("replica_1", spans[1].span_id)]
    attrs = dict(spans[0].attributes)
    assert attrs["blocks"] == 8 and attrs["monitor.trace_segment"] == "state_interval"
    assert spans[0].ends_state and spans[0].start_ns < spans[0].end_ns
    assert not RUNTIME.open  # every interval closed


def test_requests_of_one_lane_in_threads_are_an_interval_per_thread(verl_recorded):
    """Blocks take no lock: each thread keeps its own intervals, so a lane whose requests
    run in 4 threads at once (a threaded actor) has an interval per thread, 2 requests
    each; its lane stacks them and shows the state once, its seconds not twice."""
    from rl_insight.collector.lanes import LaneCore
    from tests.test_collector import RecordingSender, samples

    c, got = verl_recorded
    inside = threading.Barrier(4)

    def requests() -> None:
        with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_0"):
            with RLInsightLogger.trace_state("vllm_generate", state_lane_id="replica_0"):
                inside.wait(10)
            inside.wait(10)

    threads = [threading.Thread(target=requests) for _ in range(4)]
    t0 = __import__("time").time_ns()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    wall_s = (__import__("time").time_ns() - t0) / 1e9
    c.buffer.flush(5)
    spans = of(got, Span)
    assert len(spans) == 4 and all(dict(s.attributes)["blocks"] == 2 for s in spans)
    assert not RUNTIME.open
    lanes = LaneCore(RecordingSender(), "l")
    shown = set()
    for ev in [e for e in got if type(e) in (StateChange, Span)]:
        lanes.ingest(Identity("p", "e"), "h", [ev])
        shown.add(lanes.stats()["current"].get("p/e/replica_0"))
    assert shown == {"vllm_generate", None}
    lanes.push_metrics()
    pushed = samples(lanes.sender.pushes[-2][2])
    (secs,) = [v for k, v in pushed.items()
               if k[0] == "rl_insight_monitor_lane_state_seconds_total"]
    assert secs <= wall_s


def test_an_open_interval_is_named_state_of_the_process(verl_recorded):
    """The process's client state is one object (RUNTIME) and each open interval one
    object with named fields: its blocks open and in all, its labels, its failures."""
    c, got = verl_recorded
    with api.trace_state("vllm_generate", state_lane_id="replica_3", step=1):
        with api.trace_state("vllm_generate", state_lane_id="replica_3"):
            (iv,) = [v for k, v in RUNTIME.open.items() if k[0] == "replica_3"]
            assert (iv.depth, iv.blocks, iv.labels, iv.errors) == (2, 2, {"step": 1}, 0)
        with pytest.raises(ValueError):
            with api.trace_state("vllm_generate", state_lane_id="replica_3"):
                raise ValueError("a failed request")
        assert (iv.depth, iv.blocks, iv.errors, iv.last_error) == (1, 3, 1, "ValueError")
    assert not RUNTIME.open and RUNTIME.client is c
    c.buffer.flush(5)
    (span,) = of(got, Span)
    assert span.parent_id == iv.parent == 0 and (span.trace_id, span.span_id) == iv.ids
    assert {k: v for k, v in span.attributes if k in ("blocks", "error", "errors")} == {
        "blocks": 3, "error": "ValueError", "errors": 1}


def test_sequential_blocks_stay_separate_and_per_request_detail(verl_recorded):
    c, got = verl_recorded
    c.reconfigure(dataclasses.replace(c.config, settings=config.with_values(
        c.config.settings, {"client.per_request_spans": True})))
    for _ in range(2):  # not overlapping: two intervals
        with api.trace_state("vllm_generate", state_lane_id="replica_0", step=1):
            pass
    with api.trace_state("vllm_generate", state_lane_id="replica_0"):
        with pytest.raises(ValueError):
            with api.trace_state("vllm_generate", state_lane_id="replica_0"):
                raise ValueError("bad request")
    c.buffer.flush(5)
    intervals = [s for s in of(got, Span) if s.ends_state]
    requests = [s for s in of(got, Span) if not s.ends_state]
    assert len(intervals) == 3 and len(requests) == 4
    assert dict(intervals[0].attributes)["step"] == 1
    assert dict(intervals[2].attributes)["error"] == "ValueError"
    assert dict(intervals[2].attributes)["errors"] == 1
    for r in requests:  # each request a child of its interval, outside the lane's states
        parent = next(i for i in intervals if i.span_id == r.parent_id)
        assert r.trace_id == parent.trace_id and r.lane is None
        assert dict(r.attributes)["state_lane_id"] == "replica_0"


def test_trace_state_decorates_sync_and_async(verl_recorded):
    c, got = verl_recorded

    @api.trace_state("actor_update", state_lane_id="rank_0")
    def update(x):
        return x + 1

    @api.trace_state("vllm_generate", state_lane_id="replica_3")
    async def generate(x):
        await asyncio.sleep(0)
        return x * 2

    async def many():
        return await asyncio.gather(*[generate(i) for i in range(16)])

    assert update(1) == 2 and update(2) == 3
    assert asyncio.run(many()) == [i * 2 for i in range(16)]
    c.buffer.flush(5)
    spans = of(got, Span)
    assert [s.name for s in spans].count("actor_update") == 2
    gen = [s for s in spans if s.name == "vllm_generate"]
    assert len(gen) == 1 and dict(gen[0].attributes)["blocks"] == 16


def test_label_list_length_must_match_even_when_off(monkeypatch):
    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", True)
    with pytest.raises(ValueError, match="labels length must match"):
        api.update_prometheus_config(["a:1", "b:2"], "vllm", [{"replica": 0}])
    api.update_prometheus_config(["a:1", "b:2"], "vllm", [{"replica": 0}, None])  # fine


def test_verl_trace_span_and_agent_loop_session_deliver(verl_recorded, monkeypatch):
    c, got = verl_recorded
    monkeypatch.setattr(RLInsightLogger, "_rl_insight_module", None)
    RLInsightLogger.trace_span("tool_call", start_time_ns=1_000, end_time_ns=5_000,
                               attributes={"state_lane_id": "req_7", "tool": "python"})
    session = RLInsightLogger.agent_loop_session(experiment_name="exp", sample=3, session=1,
                                                 traj=0, uid="u-9", global_steps=12)
    assert session.identity["state_lane_id"] == "experiment=exp/sample=3/session=1/traj=0"

    class Traj:  # what verl's agent loop hands over: chain_id, reward_score, num_turns
        def __init__(self, chain_id, reward, turns):
            self.chain_id, self.reward_score, self.num_turns = chain_id, reward, turns

    session.finish(trajectories=[Traj(1, 1.0, 3), Traj(2, 0.0, 5)], status="ok",
                   runner_name="react", reward_source="rule", finished=True)
    c.buffer.flush(5)
    assert not RLInsightLogger._warned_unsupported_features  # nothing was turned off
    spans = {s.name: s for s in of(got, Span)}
    assert spans["tool_call"].lane == "req_7"
    assert dict(spans["tool_call"].attributes) == {"tool": "python"}
    sess = spans["agent_session"]
    attrs = dict(sess.attributes)
    assert sess.lane == "experiment=exp/sample=3/session=1/traj=0"
    assert (attrs["status"], attrs["num_trajectories"], attrs["reward_mean"]) == ("ok", 2, 0.5)
    assert (attrs["uid"], attrs["finished"]) == ("u-9", True)
    trajs = [s for s in of(got, Span) if s.name == "agent_trajectory"]
    assert sorted(dict(t.attributes)["traj"] for t in trajs) == ["0", "1"]
    metrics = of(got, Metric)
    names = {m.name for m in metrics}
    assert {"rl_insight_monitor_agent_loop_sessions_total",
            "rl_insight_monitor_agent_loop_trajectory_reward",
            "rl_insight_monitor_agent_loop_global_step"} <= names
    # bounded: no label names a sample, session or trajectory
    assert {k for m in metrics for k, _ in m.labels} <= {"status", "runner_name",
                                                         "reward_source"}
    reward = next(m for m in metrics if m.name.endswith("trajectory_reward"))
    assert reward.buckets[0] < 0  # reward bounds, not seconds


def test_init_honours_upstream_keys(monkeypatch, caplog):
    for name in ("RL_INSIGHT_SERVER_URL", "RL_INSIGHT_OTLP_ENDPOINT"):
        monkeypatch.setenv(name, "")  # restored afterwards, whatever init() sets
        monkeypatch.delenv(name)
    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", False)
    caplog.set_level(logging.WARNING, logger="rl_insight")
    api.init(config={"server": {"url": "http://127.0.0.1:9", "namespace": "mine",
                                "backend": "ray"},
                     "prometheus": {"metrics_report_port": 9555},
                     "flush_interval_s": 1.5, "client": {"lane_pool_size": 2},
                     "mystery": 1})
    c = RUNTIME.client
    try:
        assert c is not None and c.server_url == "http://127.0.0.1:9"  # turned on by config
        assert c.settings.metrics_port == 9555 and c.settings.flush_interval_s == 1.5
        assert c.settings.lane_pool_size == 2
        text = caplog.text
        assert "server.namespace='mine' is not used" in text
        assert "ignores unknown keys: mystery" in text
    finally:
        monkeypatch.setattr(RUNTIME, "client", None)
    # the environment wins over server.url
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://127.0.0.1:8")
    monkeypatch.setattr(RUNTIME, "checked", False)
    api.init(config={"server": {"url": "http://127.0.0.1:9"}})
    assert RUNTIME.client.server_url == "http://127.0.0.1:8"
    monkeypatch.setattr(RUNTIME, "client", None)


def test_trace_span_attributes_as_upstream_caller_wins_and_sequences_are_arrays(
        verl_recorded, monkeypatch):
    """An agent framework's span (Uni-Agent puts its tool list there) through verl's
    RLInsightLogger.trace_span, encoded as the lane actors send it and read back with
    OTLP's own classes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from rl_insight.collector import otlp_encode

    c, got = verl_recorded
    monkeypatch.setattr(RLInsightLogger, "_rl_insight_module", None)
    RLInsightLogger.trace_span("tool_call", start_time_ns=1_000, end_time_ns=5_000, attributes={
        "tools": ["search", "python", "browser"], "turn_rewards": (0.5, 1.0),
        "state_lane_id": "agent_3", "state_name": "tool_execution",
        "process_id": "worker-7", "experiment_name": "agent-exp", "project": "",
        "mixed": [1, "a", None]})
    c.buffer.flush(5)
    span = next(s for s in of(got, Span) if s.name == "tool_call")
    raw = otlp_encode.encode([(Identity("proj", "run-1"), "pid-1", span)])
    sent = ExportTraceServiceRequest.FromString(raw).resource_spans[0].scope_spans[0].spans[0]

    def value(v):
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return [value(x) for x in v.array_value.values]
        return getattr(v, kind)

    attrs = {kv.key: value(kv.value) for kv in sent.attributes}
    assert attrs["tools"] == ["search", "python", "browser"]  # an OTLP array, not str()
    assert attrs["turn_rewards"] == [0.5, 1.0]
    assert attrs["mixed"] == [1, "a", "None"]
    assert attrs["state_name"] == "tool_execution"  # the caller's, not the span name
    assert attrs["process_id"] == "worker-7" and attrs["experiment_name"] == "agent-exp"
    assert attrs["project"] == "proj"  # an empty one does not take it out of its run
    assert attrs["state_lane_id"] == "agent_3" and sent.name == "tool_call"


def test_verl_nested_annotations_hold_one_state_per_lane_in_self_time(verl_recorded):
    """verl annotates update_actor (role actor_update) and, inside it, the training
    worker's train_batch (role train_batch) on the same rank_<r> lane. The lane holds one
    state at a time (the outer again when the inner ends), the inner span is a child of
    the outer, and the lane's state times add up to its busy time, not more."""
    import time

    from verl.utils.profiler.profile import DistProfiler

    from rl_insight.collector.lanes import LaneCore
    from tests.test_collector import RecordingSender, samples

    c, got = verl_recorded

    class TrainingWorker:  # verl.workers.engine_workers: the inner worker
        def __init__(self):
            self.profiler = DistProfiler(rank=3)

        @DistProfiler.annotate(color="red", role="train_batch")
        def train_batch(self):
            time.sleep(0.03)

    class ActorRolloutRefWorker:
        def __init__(self):
            self.profiler = DistProfiler(rank=3)
            self.actor = TrainingWorker()

        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self):
            time.sleep(0.01)
            self.actor.train_batch()
            time.sleep(0.01)

    worker = ActorRolloutRefWorker()
    t0 = time.time_ns()
    for _ in range(4):
        worker.update_actor()
    wall_s = (time.time_ns() - t0) / 1e9
    c.buffer.flush(5)
    lanes = LaneCore(RecordingSender(), "l")
    ident = Identity("p", "e")
    seen, shown = [], []
    for ev in [e for e in got if type(e) in (StateChange, Span)]:
        lanes.ingest(ident, "h", [ev])
        seen.append(lanes.stats()["current"].get("p/e/rank_3"))
        lanes.push_metrics()  # what a scrape after each event would see
        now = samples([p[2] for p in lanes.sender.pushes if "project" in p[1]][-1])
        shown.append(sorted(dict(k[1])["state_name"] for k, v in now.items()
                            if k[0] == "rl_insight_monitor_lane_state" and v == 1))
    assert seen == ["actor_update", "train_batch", "actor_update", None] * 4
    # the gauge: the one state the lane holds, never the outer beside the inner
    assert shown == [["actor_update"], ["train_batch"], ["actor_update"], []] * 4
    pushed = samples(next(p[2] for p in reversed(lanes.sender.pushes) if "project" in p[1]))
    took = {dict(k[1])["state_name"]: v for k, v in pushed.items()
            if k[0] == "rl_insight_monitor_state_duration_seconds_sum"}
    assert sum(took.values()) <= wall_s + 1e-3  # not 1.6x the wall time, as before
    # the timeline's seconds per state: the self times (one push after all was heard: a
    # push while a state's end is still on its way counts it open until then)
    once = LaneCore(RecordingSender(), "l")
    once.ingest(ident, "h", [e for e in got if type(e) in (StateChange, Span)])
    once.push_metrics()
    pushed = samples(next(p[2] for p in once.sender.pushes if "project" in p[1]))
    secs = {dict(k[1])["state_name"]: v for k, v in pushed.items()
            if k[0] == "rl_insight_monitor_lane_state_seconds_total"}
    assert secs == pytest.approx(took, abs=1e-6)
    spans = [s for s in of(got, Span) if s.lane == "rank_3"]
    outer = [s for s in spans if s.name == "actor_update"]
    inner = [s for s in spans if s.name == "train_batch"]
    assert [s.parent_id for s in inner] == [s.span_id for s in outer]  # children in Tempo
    # self time, from the spans' own clocks (not from how long the sleeps took)
    inner_s = sum(s.end_ns - s.start_ns for s in inner) / 1e9
    outer_s = sum(s.end_ns - s.start_ns for s in outer) / 1e9
    assert took["train_batch"] == pytest.approx(inner_s, abs=1e-6)
    assert took["actor_update"] == pytest.approx(outer_s - inner_s, abs=1e-6)  # its own only
    assert inner_s > 0 and outer_s - inner_s > 0


def test_keyword_calls_as_upstream_documents_them(recorded):
    c, got = recorded
    api.metric_gauge(name="kw_gauge", value=2.5, documentation="a doc", stage="x")
    api.metric_count(name="kw_count", amount=3)
    api.metric_histogram(name="kw_hist", value=0.2)
    api.metric_gauge("positional", 1.0, name="a label")  # positional wins: name is a label
    api.metric_gauge(value=1.0)  # no name: logged, never raised
    c.buffer.flush(5)
    by = {m.name: m for m in of(got, Metric)}
    assert by["rl_insight_monitor_kw_gauge"].value == 2.5
    assert dict(by["rl_insight_monitor_kw_gauge"].labels) == {"stage": "x"}
    assert by["rl_insight_monitor_kw_gauge"].doc == "a doc"
    assert by["rl_insight_monitor_kw_count_total"].value == 3
    assert "rl_insight_monitor_kw_hist" in by
    assert dict(by["rl_insight_monitor_positional"].labels) == {"name": "a label"}
    assert len(of(got, Metric)) == 4


def test_upstream_module_paths_version_and_help(capsys):
    import importlib.util

    from rl_insight import cli, utils
    from rl_insight.commands import main as commands_main

    assert cli.main is commands_main.main  # upstream's path, the command's one parser
    assert utils.update_prometheus_config is api.update_prometheus_config
    assert utils.MonitorDefaults.NAMESPACE + "_" == "rl_insight_monitor_"
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == "rl-insight 0.3.0"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: rl-insight") and "monitoring for reinforcement-learning" \
        in text and "parse the command line" not in text
    assert importlib.util.find_spec("rl_insight.__main__") is not None  # python -m rl_insight
