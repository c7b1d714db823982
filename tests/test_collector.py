"""The collector cores as plain Python: run aggregation and its text exposition, lanes,
the hub's handling of runs and jobs, and the client's bounded buffer."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from rl_insight.client.buffer import EventBuffer
from rl_insight.collector.hub import HubCore
from rl_insight.collector.lanes import LaneCore
from rl_insight.collector.push import group_path
from rl_insight.collector.runs import RunMetrics, Runs
from rl_insight.ray.hooks import runtime_env_hook
from rl_insight.wire.events import Batch, Identity, Metric, Span, StateChange


class RecordingSender:
    """Stands in for the HTTP edge; records what would be sent."""

    def __init__(self, ok: bool = True, server_text: str = "") -> None:
        self.ok = ok
        self.server_text = server_text
        self.on_server_restart: list = []
        self.pushes: list[tuple[str, dict, str]] = []
        self.span_payloads: list[bytes] = []
        self.last_error = ""

    def push(self, job, grouping, text, replace=False):
        if self.ok:
            self.pushes.append((job, dict(grouping), text))
        return self.ok

    def push_groups(self, groups):
        """Several groups in one request (Sender.push_groups); recorded one by one."""
        self.batches = getattr(self, "batches", 0) + 1
        return [self.push(*g) for g in groups]

    def spans(self, payload):
        if self.ok:
            self.span_payloads.append(payload)
        return self.ok

    def post_json(self, path, body):
        return self.ok

    def get_text(self, path):
        return self.server_text


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_run_exposition_is_valid_and_aggregates():
    run = RunMetrics(max_series=100)
    run.apply(Metric("counter", "rl_insight_monitor_tokens_total", 2, (("r", "0"),)))
    run.apply(Metric("counter", "rl_insight_monitor_tokens_total", 3, (("r", "0"),)))
    run.apply(Metric("gauge", "rl_insight_monitor_loss", 1.5, (), 'a "doc"\nline'))
    run.apply(Metric("gauge", "rl_insight_monitor_loss", 0.5, ()))
    for v in (0.003, 0.2, 700):
        run.apply(Metric("histogram", "rl_insight_monitor_t", v, (("k", 'q"\\'),)))
    run.apply(Metric("gauge", "rl_insight_monitor_t", 1, ()))  # another kind: dropped
    got = samples(run.render())
    assert got[("rl_insight_monitor_tokens_total", (("r", "0"),))] == 5
    assert got[("rl_insight_monitor_loss", ())] == 0.5
    k = (("k", 'q"\\'),)
    assert got[("rl_insight_monitor_t_count", k)] == 3
    assert got[("rl_insight_monitor_t_bucket", (("k", 'q"\\'), ("le", "0.005")))] == 1
    assert got[("rl_insight_monitor_t_bucket", (("k", 'q"\\'), ("le", "600.0")))] == 2
    assert got[("rl_insight_monitor_t_bucket", (("k", 'q"\\'), ("le", "+Inf")))] == 3
    assert abs(got[("rl_insight_monitor_t_sum", k)] - 700.203) < 1e-9
    assert run.dropped_kind_conflict == 1


def test_series_limit_drops_and_counts():
    runs = Runs(max_series=3)
    ident = Identity("p", "e")
    runs.apply(ident, [Metric("gauge", "g", i, (("i", str(i)),)) for i in range(5)])
    runs.apply(ident, [Metric("gauge", "g", 9, (("i", "0"),))])  # existing series: kept
    assert runs.stats()["series"] == 3 and runs.dropped == 2 and runs.applied == 4
    (_, text), = runs.take_dirty()
    assert samples(text)[("g", (("i", "0"),))] == 9
    assert runs.take_dirty() == []  # clean until something changes


def test_hub_groups_by_run_parks_unknown_jobs_and_retries_failed_pushes():
    sender = RecordingSender()
    hub = HubCore(sender)
    a, b = Identity("p", "a"), Identity("p", "b")
    hub.ingest(Batch(a, "job1", "h:1", [Metric("gauge", "x", 1, ())]))
    hub.ingest(Batch(b, "job2", "h:2", [Metric("gauge", "x", 2, ())]))
    hub.ingest(Batch(None, "job3", "h:3", [Metric("gauge", "x", 3, ())]))  # unknown job
    hub.ingest(Batch(None, "job1", "h:4", [Metric("gauge", "y", 4, ())]))  # learnt: a
    hub.tick()
    runs = {(p[1]["project"], p[1]["experiment_name"]): samples(p[2])
            for p in sender.pushes if p[0] == "rl_insight"}
    assert runs == {("p", "a"): {("x", ()): 1, ("y", ()): 4}, ("p", "b"): {("x", ()): 2}}
    hub.register_run("job3", Identity("p", "c"))
    sender.ok = False
    hub.tick()  # fails: the run stays dirty
    sender.ok = True
    hub.tick()
    assert any(p[1].get("experiment_name") == "c" for p in sender.pushes)
    assert hub.stats()["push_failures"] >= 1
    hub.ingest(Batch(None, "job9", "h:9", [Metric("gauge", "z", 1, ())]))
    hub.release_parked(time.time() + 31)
    assert ("default", "job9") in {tuple(i) for i in hub.runs.identities()}


def test_lanes_keep_one_state_and_summarise_pooled_lanes():
    sender = RecordingSender()
    lanes = LaneCore(sender, "lane_x", batch_size=1000)
    ident = Identity("p", "e")
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_generate", 1, True)])
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_sleep", 2, True)])
    lanes.ingest(ident, "h:1", [StateChange("traj_1", "tool_call", 2, True),
                                StateChange("traj_2", "tool_call", 2, True),
                                Span("tool_call", 0, 2_000_000_000, "traj_1", ())])
    lanes.push_metrics()
    got = samples(next(p[2] for p in sender.pushes if "project" in p[1]))
    own = samples(next(p[2] for p in sender.pushes if "project" not in p[1]))
    assert own[("rl_insight_lane_spans_received_total", ())] == 1
    st = "rl_insight_monitor_lane_state"
    lane = (("role", "rollout"), ("state_lane_id", "replica_0"))
    # the gauge is the state the lane holds at the push: one at a time; the state it left
    # before any push is in its seconds (the timeline's source)
    assert got[(st, (*lane, ("state_name", "vllm_generate")))] == 0
    assert got[(st, (*lane, ("state_name", "vllm_sleep")))] == 1
    secs = "rl_insight_monitor_lane_state_seconds_total"
    assert got[(secs, (*lane, ("state_name", "vllm_generate")))] == pytest.approx(1e-9)
    assert got[("rl_insight_monitor_lanes_in_state", (("state_name", "tool_call"),))] == 2
    dur = "rl_insight_monitor_state_duration_seconds_sum"
    assert got[(dur, (("state_lane_id", "other"), ("state_name", "tool_call")))] == 2.0
    lanes.send_spans()
    assert len(sender.span_payloads) == 1 and lanes.stats()["spans_sent"] == 1
    lanes.push_metrics()
    again = samples([p[2] for p in sender.pushes if "project" in p[1]][-1])
    assert again[(st, (*lane, ("state_name", "vllm_generate")))] == 0
    assert again[(st, (*lane, ("state_name", "vllm_sleep")))] == 1


def test_a_lane_shows_one_state_per_push_and_its_seconds_in_each():
    """The timeline reads each lane's seconds per state; the gauge, the state it holds at
    each push. A 0.5 s state between two 5 s ticks adds its 0.5 s (it reaches the
    timeline) and never shows beside the next state on the gauge; the state holding the
    lane is counted up to each push; a counter never goes down, even when a state's end
    is heard after a push counted it as still open."""
    sender = RecordingSender()
    lanes = LaneCore(sender, "lane_x")
    ident = Identity("p", "e")
    lane = (("role", "rollout"), ("state_lane_id", "replica_0"))
    gauge, secs = "rl_insight_monitor_lane_state", "rl_insight_monitor_lane_state_seconds_total"

    def pushed() -> dict:
        lanes.push_metrics()
        got = samples([p[2] for p in sender.pushes if "project" in p[1]][-1])
        ones = [k for k, v in got.items() if k[0] == gauge and v == 1]
        assert len(ones) <= 1, ones  # one state per lane at every push
        return {(name, dict(labels)["state_name"]): v for (name, labels), v in got.items()
                if name in (gauge, secs) and labels[:2] == lane}

    s = 1_000_000_000
    t0 = time.time_ns() - 100 * s
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_generate", t0, True, 7),
                                StateChange("replica_0", "vllm_generate", t0 + s // 2, False, 7),
                                StateChange("replica_0", "vllm_sleep", t0 + s, True, 8)])
    before = time.time_ns()
    got = pushed()
    after = time.time_ns()
    assert got[(gauge, "vllm_generate")] == 0 and got[(gauge, "vllm_sleep")] == 1
    assert got[(secs, "vllm_generate")] == pytest.approx(0.5)
    # open: counted up to the push, which read the clock between `before` and `after`
    assert (before - t0 - s) / 1e9 <= got[(secs, "vllm_sleep")] <= (after - t0 - s) / 1e9
    # nested: the inner state suspends the outer; the gauge shows the inner alone
    t1 = time.time_ns()
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_wake_up", t1, True, 9)])
    got = pushed()
    assert got[(gauge, "vllm_wake_up")] == 1 and got[(gauge, "vllm_sleep")] == 0
    slept = (t1 - t0 - s) / 1e9
    assert got[(secs, "vllm_sleep")] == pytest.approx(slept, abs=1e-6)  # stopped at t1
    # the inner state's end heard after a push counted it as open to then: its seconds
    # stay at what was pushed; the outer's run again from the end
    pushed_wake = got[(secs, "vllm_wake_up")]
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_wake_up", t1 + 1, False, 9)])
    got = pushed()
    assert got[(gauge, "vllm_sleep")] == 1 and got[(gauge, "vllm_wake_up")] == 0
    assert got[(secs, "vllm_wake_up")] == pushed_wake > 1e-9
    t2 = time.time_ns() + 10 * s  # ends "later" than any push so far
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_sleep", t2, False, 8)])
    got = pushed()
    assert not any(v for (name, _), v in got.items() if name == gauge)
    assert got[(secs, "vllm_sleep")] == pytest.approx(slept + (t2 - t1 - 1) / 1e9, abs=1e-6)
    # the server busy (503) for the pushes around a short state: its seconds wait
    sender.ok = False
    lanes.ingest(ident, "h:1", [StateChange("replica_0", "vllm_generate", t2, True, 10),
                                StateChange("replica_0", "vllm_generate", t2 + s // 4, False,
                                            10)])
    lanes.push_metrics()  # refused
    sender.ok = True
    assert pushed()[(secs, "vllm_generate")] == pytest.approx(0.75)


def test_lane_spans_wait_in_order_while_the_server_is_down():
    sender = RecordingSender(ok=False)
    lanes = LaneCore(sender, "lane_y", max_pending=5, batch_size=2)
    ident = Identity("p", "e")
    for i in range(7):
        lanes.ingest(ident, "h", [Span("s", i, i + 1, "replica_0", (("seq", i),))])
    lanes.send_spans()
    assert lanes.stats()["spans_dropped"] == 2 and lanes.stats()["spans_pending"] == 5
    assert [s.attributes[0][1] for _, _, s in lanes.pending] == [2, 3, 4, 5, 6]


def test_buffer_drops_oldest_when_full_and_flushes_within_a_deadline():
    got: list = []
    gate = threading.Event()
    entered = threading.Event()

    def export(items, dropped):
        entered.set()
        gate.wait(10)
        got.append((list(items), dropped))

    buf = EventBuffer(export, max_events=5, batch_size=100, interval=60)
    for i in range(8):
        buf.add(i)
    assert list(buf.queue) == [3, 4, 5, 6, 7] and buf.dropped == 3
    stuck = threading.Thread(target=buf.flush, args=(30,), daemon=True)
    stuck.start()  # a flush whose exporter hangs holds the export lock
    assert entered.wait(5)
    threads = threading.active_count()
    t0 = time.monotonic()
    assert buf.flush(0.2) is False  # another flush gives up at its deadline
    # it gave up while the exporter still held the other flush (not when it let go)
    assert stuck.is_alive() and not got
    # at its deadline: measured 2026-12-07, 20 runs beside one busy loop: 0.201-0.212 s;
    # 1.0 s is 0.8 s above them and far below the exporter's 10 s it did not wait for
    assert time.monotonic() - t0 < 1.0
    assert threading.active_count() == threads  # and started no thread to do it
    gate.set()
    stuck.join(5)
    assert got == [([3, 4, 5, 6, 7], 3)]


def test_settings_given_later_reach_the_buffer_and_silly_values_are_refused(home):
    """A later ``init(config=...)`` is resolved anew and the client takes the new
    configuration whole (its buffer too); a silly value is refused with a warning and the
    value the other sources give holds. The configuration the client had is not changed."""
    from rl_insight import config
    from rl_insight.client.configuration import resolve
    from rl_insight.client.core import Client

    first = resolve(server_url="http://127.0.0.1:1")
    c = Client(first)
    before = config.as_dict(first.settings)
    c.reconfigure(resolve(init_config={"flush_interval_s": 30, "client": {
        "batch_size": 64, "buffer_max_events": 100}}))
    assert (c.buffer.interval, c.buffer.batch_size, c.buffer.max_events) == (30, 64, 100)
    assert c.buffer.queue.maxlen == 100
    assert config.as_dict(first.settings) == before  # resolved once, never changed
    assert c.server_url == c.config.server_url == "http://127.0.0.1:1"  # where it sends
    c.reconfigure(resolve(init_config={"batch_size": 0}))  # refused: the default holds
    assert c.buffer.batch_size == config.ClientSettings().batch_size
    with pytest.raises(config.ConfigError, match="client.batch_size: must be at least 1"):
        config.load(environ={"RL_INSIGHT_HOME": str(home), "RL_INSIGHT_CLIENT_BATCH_SIZE": "0"})


def test_buffer_shutdown_joins_its_worker_and_refuses_later_events():
    got: list = []
    buf = EventBuffer(lambda items, dropped: got.extend(items), max_events=10, batch_size=2,
                      interval=0.05)
    for i in range(3):
        buf.add(i)
    worker = buf._thread
    assert buf.shutdown(5) is True
    assert not worker.is_alive() and got == [0, 1, 2]
    buf.add(99)
    assert buf.dropped == 1 and 99 not in buf.queue


def test_two_first_callers_start_one_worker():
    before = {t for t in threading.enumerate() if t.name == "rl-insight-buffer"}
    buf = EventBuffer(lambda items, dropped: None, max_events=10, batch_size=5, interval=60)
    barrier = threading.Barrier(8)

    def first():
        barrier.wait()
        buf._ensure_thread()

    ts = [threading.Thread(target=first) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    new = {t for t in threading.enumerate() if t.name == "rl-insight-buffer"} - before
    assert len(new) == 1
    buf.shutdown(2)


def test_buffer_exporter_errors_are_counted_not_raised():
    def export(items, dropped):
        raise RuntimeError("ray is gone")

    buf = EventBuffer(export, max_events=10, batch_size=2, interval=60)
    buf.add(1)
    buf.add(2)
    assert buf.flush(2.0) is True
    assert buf.dropped == 2


def test_group_path_keeps_any_value():
    path = group_path("rl_insight", {"project": "a/b", "experiment_name": ""})
    from rl_insight.server.ingest.grouping import parse_grouping_key
    assert parse_grouping_key(path[len("/metrics/"):]) == {
        "job": "rl_insight", "project": "a/b", "experiment_name": ""}


def test_runtime_env_hook_adds_variables_and_worker_hook(monkeypatch):
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://10.0.0.5:18080")
    for name in ("RL_INSIGHT_TOKEN", "RL_INSIGHT_PROJECT", "RL_INSIGHT_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)  # a run named earlier in this process
    env = runtime_env_hook({"env_vars": {"A": "1", "VERL_RL_INSIGHT_ENABLE": "0"},
                            "pip": ["x"]})
    assert env["pip"] == ["x"]
    assert env["env_vars"] == {"A": "1", "RL_INSIGHT_SERVER_URL": "http://10.0.0.5:18080",
                               "VERL_RL_INSIGHT_ENABLE": "0",  # the job's own value wins
                               "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert env["worker_process_setup_hook"] == "rl_insight.ray.hooks.worker_setup"
    monkeypatch.delenv("RL_INSIGHT_SERVER_URL")
    assert runtime_env_hook(None) == {}


def test_a_restarted_hub_continues_counters_from_the_server_and_repushes_on_restart():
    server = ('# TYPE rl_insight_monitor_steps_total counter\n'
              'rl_insight_monitor_steps_total{experiment_name="e",instance="",job="rl_insight",'
              'project="p",r="0"} 41\n'
              '# TYPE other_total counter\nother_total{job="elsewhere",project="p"} 5\n')
    sender = RecordingSender(server_text=server)
    hub = HubCore(sender)
    assert hub.recover() == 1
    hub.ingest(Batch(Identity("p", "e"), "j", "h",
                     [Metric("counter", "rl_insight_monitor_steps_total", 1, (("r", "0"),))]))
    hub.tick()
    got = samples(next(p[2] for p in sender.pushes if p[0] == "rl_insight"))
    assert got[("rl_insight_monitor_steps_total", (("r", "0"),))] == 42  # not 1
    sender.pushes.clear()
    hub.tick()
    assert not [p for p in sender.pushes if p[0] == "rl_insight"]  # nothing changed
    for callback in sender.on_server_restart:  # the server came back, maybe older
        callback()
    hub.tick()
    assert [p for p in sender.pushes if p[0] == "rl_insight"]  # so everything again


# -- what lives for weeks forgets what ended --------------------------------------------
def test_the_hub_forgets_a_finished_run_after_its_grace_and_its_jobs_with_it():
    """A hub lives as long as the cluster: finished runs leave it after the grace, so a
    server restart no longer makes it push every run it ever saw again."""
    sender = RecordingSender()
    hub = HubCore(sender)
    done, live = Identity("p", "done"), Identity("p", "live")
    hub.ingest(Batch(done, "job1", "h:1", [Metric("counter", "x", 1, ())], ), 1)
    hub.ingest(Batch(live, "job2", "h:2", [Metric("counter", "x", 1, ())]), 1)
    hub.finish(done)
    assert set(hub.runs.identities()) == {done, live}  # within the grace: still here
    hub.forget_after_s = 0.0
    hub.tick()
    assert hub.runs.identities() == [live]
    assert hub.jobs == {"job2": live}
    for callback in sender.on_server_restart:  # the server restarted: push everything
        callback()
    sender.pushes.clear()
    hub.tick()
    assert {p[1].get("experiment_name") for p in sender.pushes if p[0] == "rl_insight"} == \
        {"live"}


def test_a_finished_run_with_a_failed_last_push_is_kept_until_it_went_out():
    sender = RecordingSender(ok=False)
    hub = HubCore(sender)
    run = Identity("p", "r")
    hub.ingest(Batch(run, "job1", "h:1", [Metric("gauge", "x", 1, ())]))
    hub.forget_after_s = 0.0
    hub.finish(run)  # the push failed: the run is dirty
    hub.tick()
    assert hub.runs.identities() == [run]
    sender.ok = True
    hub.tick()  # pushed, then forgotten
    hub.tick()
    assert hub.runs.identities() == []


def test_a_jobs_lane_events_wait_for_its_run_and_join_it_in_order():
    """A replica's states before its job's run is named (verl's init_workers) are held by
    the lane core and join the run once the hub names it, before what comes after; a job
    that names none within PARK_S goes to project default; more than the limit is counted
    as dropped."""
    core = LaneCore(RecordingSender(), "lane_replica_0")
    run = Identity("p", "named-late")
    core.ingest(None, "replica:1", [StateChange("replica_0", "vllm_wake_up", 1, True),
                                    Span("vllm_wake_up", 1, 5, "replica_0", (),
                                         ends_state=True)], 1, "job-a")
    assert core.unnamed_jobs() == ["job-a"] and not core.lanes  # held, nothing applied
    assert not core.idle()  # a lane actor whose jobs ended stays for them
    core.name_job("job-a", run)
    core.ingest(None, "replica:1", [StateChange("replica_0", "vllm_generate", 6, True)], 2,
                "job-a")  # after the name: straight in
    assert core.unnamed_jobs() == [] and core.lanes == {(run, "replica_0")}
    assert [s.name for _, _, s in core.pending] == ["vllm_wake_up"]
    assert core.stats()["current"] == {"p/named-late/replica_0": "vllm_generate"}

    core.parked.limit = 2
    core.ingest(None, "w:2", [StateChange(f"replica_{i}", "s", i, True) for i in range(3)],
                1, "job-b")
    assert core.spans_dropped == 1  # the third did not fit
    core.parked.seconds = 0.0
    core.tick()  # job-b never named its run
    assert {lane for (ident, lane) in core.lanes if ident == Identity("default", "job-b")} \
        == {"replica_0", "replica_1"}


def test_lane_cores_keep_no_per_trajectory_entry_and_forget_idle_runs():
    """20,000 agent-loop trajectories through one lane core: no entry per trajectory; a
    finished run is forgotten after the grace, and an idle one (no finish heard) after an
    hour unless one of its lanes is in a state."""
    sender = RecordingSender()
    core = LaneCore(sender, "lane_z", max_pending=1000, batch_size=1000)
    run, busy = Identity("p", "agents"), Identity("p", "sleeping")
    for i in range(0, 20_000, 1000):
        core.ingest(run, "h:1", [x for t in range(i, i + 1000) for x in (
            StateChange(f"traj_{t}", "tool_call", t, True),
            Span("tool_call", t, t + 10, f"traj_{t}", (), ends_state=True))])
        core.tick()
    core.ingest(busy, "h:2", [StateChange("replica_0", "vllm_sleep", 1, True)])
    assert core.lanes == {(busy, "replica_0")}
    assert core.in_state == {(run, "tool_call"): 0}
    core.finish(run)
    core.forget_after_s = 0.0
    core.tick()
    assert core.runs.identities() == [busy]  # the finished one goes; the other stays
    assert core.lanes == {(busy, "replica_0")} and core.in_state == {}
    assert core.marks.senders() <= 1


def test_watermarks_forget_silent_senders_once_confirmed():
    from rl_insight.collector.ack import Watermarks

    marks = Watermarks()
    marks.received("rank_1", 5)
    assert marks.forget_idle(0.0) == 0  # received, not confirmed yet: kept
    marks.confirm(marks.snapshot())
    assert marks.forget_idle(3600.0) == 0  # heard from just now
    assert marks.forget_idle(0.0) == 1 and marks.senders() == 0


def test_the_registrar_remembers_only_its_latest_deliveries(monkeypatch):
    from rl_insight.client import registration

    monkeypatch.setattr(registration, "DONE_KEEP", 50)
    reg = registration.Registrar("http://127.0.0.1:1", "")
    reg.sender.post_json = lambda path, body: True
    for i in range(500):  # a registration per trajectory endpoint
        reg.submit({"job_name": "sandbox", "targets": [f"10.0.0.1:{10_000 + i}"]})
    assert reg.wait(10)
    assert len(reg.done) == 50
    assert not reg.submit({"job_name": "sandbox", "targets": ["10.0.0.1:10499"]})


def test_a_lane_core_forgets_an_unfinished_run_only_when_idle_and_out_of_every_state(
        monkeypatch):
    from rl_insight.collector import lanes as lanes_mod

    core = LaneCore(RecordingSender(), "lane_w")
    quiet, busy = Identity("p", "quiet"), Identity("p", "busy")
    core.ingest(quiet, "h:1", [StateChange("replica_0", "vllm_generate", 1, True),
                               StateChange("replica_0", "vllm_generate", 2, False)])
    core.ingest(busy, "h:1", [StateChange("replica_1", "vllm_sleep", 1, True)])
    core.tick()
    assert sorted(core.runs.identities()) == [busy, quiet]  # not idle long enough
    monkeypatch.setattr(lanes_mod, "LANE_IDLE_S", 0.0)
    core.tick()
    assert core.runs.identities() == [busy]


def test_an_idle_lane_actor_sends_nothing_until_something_changes():
    """Hundreds of lane actors tick in a large run: one whose lanes and counters did not
    change since the server took its last push sends no request; a change, a server
    restart, or OWN_REFRESH_S later, it sends again."""
    from rl_insight.collector import push

    sender = RecordingSender()
    core = LaneCore(sender, "lane_i")
    ident = Identity("p", "e")
    now = time.time_ns()
    core.ingest(ident, "h:1", [StateChange("replica_0", "gen", now - 10**9, True)])
    core.push_metrics()
    first = sender.batches
    core.push_metrics()
    assert sender.batches == first + 1  # a lane in a state: its seconds grew
    core.ingest(ident, "h:1", [StateChange("replica_0", "gen", now, False)])
    core.push_metrics()
    settled = sender.batches
    for _ in range(3):
        core.push_metrics()
    assert sender.batches == settled  # nothing changed: no request
    for hook in sender.on_server_restart:  # a restarted server hears everything again
        hook()
    core.push_metrics()
    assert sender.batches == settled + 1
    core.own.sent_at -= push.OWN_REFRESH_S  # and an idle one, now and then
    core.push_metrics()
    assert sender.batches == settled + 2


def test_an_idle_hub_sends_nothing_until_something_changes():
    """The hub's own counters go out when they change (a run's push counts), after a
    server restart, or OWN_REFRESH_S later; an idle hub's tick sends no request."""
    from rl_insight.collector import push

    sender = RecordingSender()
    hub = HubCore(sender)
    ident = Identity("p", "e")
    hub.ingest(Batch(ident, "job1", "h:1", [Metric("gauge", "loss", 0.5, ())]))
    hub.tick()
    sent = len(sender.pushes)
    assert sent == 2  # the run's group and the hub's own
    for _ in range(3):
        hub.tick()
    assert len(sender.pushes) == sent  # idle: nothing
    hub.ingest(Batch(ident, "job1", "h:1", [Metric("gauge", "loss", 0.4, ())]))
    hub.tick()
    assert len(sender.pushes) == sent + 2  # the run, and its push counted in the hub's own
    for hook in sender.on_server_restart:
        hook()
    hub.tick()
    assert len(sender.pushes) == sent + 4  # everything again
    hub.own.sent_at -= push.OWN_REFRESH_S
    hub.tick()
    assert [p[1] for p in sender.pushes[sent + 4:]] == [{"hub": hub.name}]


def test_a_relayed_engine_exposition_is_pushed_as_the_engines_group_and_forgotten():
    """An engine that serves no /metrics (OpenRLHF's in-process vLLM) hands its registry's
    text to its replica's lane actor: pushed as its own group (job ``vllm``, the run and
    the replica as grouping labels, replacing the last), the newest text only, again
    after a failed push, and forgotten with its run (collector/relayed.py)."""
    from rl_insight.client.relay import render
    from rl_insight.wire.events import Exposition

    registry = CollectorRegistry()
    Gauge("vllm:num_requests_running", "running", registry=registry).set(3)
    Gauge("python_other", "not the engine's", registry=registry).set(1)
    text = render(registry, ("vllm:",))
    assert "vllm:num_requests_running 3.0" in text and "python_other" not in text
    sender = RecordingSender()
    core = LaneCore(sender, "lane_replica_1")
    run = Identity("p", "openrlhf")
    item = Exposition("replica_1", "vllm", (("replica", "1"),), text)
    core.ingest(run, "engine:1", [item, item._replace(text=text + "# newest\n")])
    core.tick()
    (job, grouping, pushed), = [p for p in sender.pushes if p[0] == "vllm"]
    assert (job, grouping) == ("vllm", {"project": "p", "experiment_name": "openrlhf",
                                        "replica": "1"})
    assert pushed.endswith("# newest\n")
    sender.pushes.clear()
    core.tick()  # nothing new: nothing sent again
    assert not [p for p in sender.pushes if p[0] == "vllm"]
    sender.ok = False
    core.ingest(run, "engine:1", [item])
    core.tick()
    sender.ok = True
    core.tick()  # the failed push is sent at the next tick
    assert [p[2] for p in sender.pushes if p[0] == "vllm"] == [text]
    core.finish(run)
    core.forget_after_s = 0
    core.forget(time.monotonic() + 1)
    assert len(core.relayed) == 0


def test_an_engine_relays_its_text_at_once_when_asked(configured, monkeypatch):
    """The trainer asks each engine to relay (OpenRLHF's, rl_insight/integrations/
    openrlhf.py): its first text is handed to the client at once, not a tick later (a
    run of a few steps on a busy CI host ended before one engine's first tick)."""
    from rl_insight.client import relay
    from rl_insight.client.runtime import RUNTIME

    configured(RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="60")
    client = RUNTIME.get()
    added: list = []
    monkeypatch.setattr(client, "add", added.append)
    monkeypatch.setattr(relay, "_relays", {})
    registry = CollectorRegistry()
    Gauge("vllm:num_requests_running", "running", registry=registry).set(2)
    assert relay.relay_registry("vllm", "replica_0", {"replica": 0}, ("vllm:",), registry)
    try:
        (item,) = added
        assert (item.lane, item.job, item.labels) == ("replica_0", "vllm", (("replica", "0"),))
        assert "vllm:num_requests_running 2.0" in item.text
        assert relay.relay_registry("vllm", "replica_0", {"replica": 0}, ("vllm:",),
                                    registry)
        assert len(added) == 1  # asked again: the same relay, nothing more at once
    finally:
        relay._relays[("vllm", "replica_0")].stop(5)
