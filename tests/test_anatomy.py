"""The step anatomy: the interval arithmetic against a brute-force count, staleness in
synchronous and separate-asynchronous steps, the server's store (when a step is final,
what it exports), the client's step marks in verl's logging order, and the route and
report over real OTLP."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import statistics

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight import config
from rl_insight.anatomy.rows import step_row, union
from rl_insight.client.steps import StepClock
from rl_insight.collector.otlp_encode import encode
from rl_insight.export import report
from rl_insight.server.analyses.anatomy import AnatomyStore
from rl_insight.server.app import create_app
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire.events import Identity, Span
from tests.conftest import examples

S = 1_000_000_000  # one second in ns


# -- the arithmetic, against counting every time unit -------------------------------------
interval = st.tuples(st.integers(0, 60), st.integers(0, 60)).map(lambda t: (min(t), max(t)))
states = st.sampled_from(["vllm_generate", "vllm_sleep", "actor_update", "update_weights",
                          "ref_compute_log_prob"])
lanes = st.dictionaries(
    st.sampled_from(["replica_0", "replica_1", "replica_2", "rank_0", "rank_1"]),
    st.lists(st.tuples(states, interval), max_size=6), max_size=5)


def _units(ivs, lo, hi) -> set[int]:
    return {t for s, e in ivs for t in range(max(s, lo), min(e, hi))}


@settings(max_examples=examples(300), deadline=None)
@given(lanes, interval)
def test_every_quantity_equals_a_count_of_time_units(raw, window):
    lo, hi = window
    if hi == lo:
        hi = lo + 1
    data = {lane: [(state, s * S, e * S) for state, (s, e) in ivs] for lane, ivs in raw.items()}
    row = step_row(7, lo * S, hi * S, data)
    gen = {lane[8:]: _units([(s, e) for st_, (s, e) in ivs if st_ == "vllm_generate"], lo, hi)
           for lane, ivs in raw.items() if lane.startswith("replica_")}
    ranks = [(st_, s, e) for lane, ivs in raw.items() if lane.startswith("rank_")
             for st_, (s, e) in ivs]
    busy = _units([(s, e) for _, s, e in ranks], lo, hi)
    any_gen = set().union(*gen.values()) if gen else set()
    assert row.duration_s == hi - lo
    assert row.generate_s == len(any_gen)
    assert row.trainer_busy_s == len(busy)
    assert row.trainer_idle_s == (hi - lo) - len(busy)
    assert row.overlap_s == len(any_gen & busy)
    for state in {st_ for st_, _, _ in ranks}:
        assert row.phases[state] == len(_units([(s, e) for st_, s, e in ranks if st_ == state],
                                               lo, hi))
    assert set(row.replicas) == set(gen)
    latest = max((max(u) + 1 for u in gen.values() if u), default=None)
    for r, units in gen.items():
        assert row.replicas[r].generate_s == len(units)
        assert row.replicas[r].idle_s == (hi - lo) - len(units)
        # wait: from this replica's last generating unit to the slowest's
        expect = latest - (max(units) + 1) if units else 0
        assert row.replicas[r].wait_s == expect
    busy_gen = [len(u) for u in gen.values() if u]
    if busy_gen:
        assert row.straggler_ratio == pytest.approx(max(busy_gen) /
                                                    statistics.median(busy_gen))
        assert len(gen[row.slowest_replica]) == max(busy_gen)
    else:
        assert row.straggler_ratio is None and row.slowest_replica is None


def test_union_merges_touching_and_nested_intervals_and_drops_empty_ones():
    assert union([(5, 9), (0, 2), (2, 4), (6, 7), (3, 3)]) == [(0, 4), (5, 9)]


def _sync_step(t0: int) -> dict:
    """A synchronous step of 10 s: generate, sleep, train, update the weights."""
    return {"replica_0": [("vllm_generate", t0, t0 + 4 * S), ("vllm_sleep", t0 + 4 * S,
                                                              t0 + 8 * S)],
            "replica_1": [("vllm_generate", t0, t0 + 3 * S)],
            "rank_0": [("actor_update", t0 + 5 * S, t0 + 8 * S),
                       ("update_weights", t0 + 8 * S, t0 + 9 * S)]}


def _merge(*steps: dict) -> dict:
    out: dict = {}
    for d in steps:
        for lane, ivs in d.items():
            out.setdefault(lane, []).extend(ivs)
    return out


def test_a_synchronous_step_consumes_a_fresh_batch():
    row = step_row(2, 10 * S, 20 * S, _merge(_sync_step(0), _sync_step(10 * S)))
    assert row.staleness == 0
    assert row.weight_update_s == 1 and row.overlap_s == 0
    assert row.straggler_ratio == pytest.approx(4 / 3.5) and row.slowest_replica == "0"
    assert row.replicas["1"].wait_s == 1  # replica 1 waited for replica 0


def test_separate_async_overlap_and_one_step_of_staleness():
    """The next batch is generated while the ranks train on this one: the batch trained
    in step 2 began before step 1's weight update ended."""
    # replica 0: batch 1 until 4 s, batch 2 from just after (its own busy interval)
    lanes = {"replica_0": [("vllm_generate", 0, 4 * S), ("vllm_generate", 4 * S + 1, 13 * S)],
             "rank_0": [("actor_update", 4 * S, 8 * S), ("update_weights", 8 * S, 9 * S),
                        ("actor_update", 13 * S, 17 * S), ("update_weights", 17 * S, 18 * S)]}
    row = step_row(2, 9 * S, 18 * S, lanes)
    assert row.staleness == 1
    assert row.overlap_s == 0  # in step 2 generation ended before the ranks began
    row1 = step_row(1, 0, 9 * S, lanes)
    assert row1.overlap_s == pytest.approx(5, abs=1e-6)  # 4..9 s: the next batch while
    # the ranks train and update
    assert row1.staleness == 0


# -- the server's store -------------------------------------------------------------------
def _rows(project, exp, lanes: dict, marks: list[tuple[int, int, int]]) -> list[tuple]:
    out = [(project, exp, lane, state, s, e, "p:1", None)
           for lane, ivs in lanes.items() for state, s, e in ivs]
    out += [(project, exp, "trainer", "train_step", s, e, "p:1", step) for step, s, e in marks]
    return out


def _store(**over) -> tuple[AnatomyStore, set]:
    s = config.AnatomySettings(**{"settle_s": 2, "max_wait_s": 60, **over})
    ended: set = set()
    return AnatomyStore(s, finished=lambda p, e: (p, e) in ended), ended


def test_a_step_is_final_once_every_active_lane_reported_past_it():
    store, _ = _store()
    store.add(_rows("p", "e", _sync_step(0), [(1, 0, 10 * S)]))
    assert store.update(now=11) == 0  # settle_s not over yet
    assert store.update(now=13) == 0  # replica_0 last ended at 8 s: it may still report
    store.add(_rows("p", "e", {"replica_0": [("vllm_generate", 10 * S, 11 * S)],
                               "replica_1": [("vllm_generate", 10 * S, 11 * S)],
                               "rank_0": [("actor_update", 10 * S, 12 * S)]}, []))
    assert store.update(now=13) == 1
    [row] = store.rows("p", "e")
    assert row.step == 1 and row.duration_s == 10 and row.generate_s == 4


def test_a_finished_run_or_max_wait_finalizes_without_the_lanes():
    store, ended = _store()
    store.add(_rows("p", "a", _sync_step(0), [(1, 0, 10 * S)]))
    store.add(_rows("p", "b", _sync_step(0), [(1, 0, 10 * S)]))
    ended.add(("p", "a"))
    assert store.update(now=13) == 1
    assert [r.step for r in store.rows("p", "a")] == [1] and store.rows("p", "b") == []
    assert store.update(now=71) == 1  # max_wait_s after the end


def test_export_carries_the_step_end_as_timestamp_and_stall_gauges_only_while_active():
    store, ended = _store()
    store.add(_rows("p", "e", _merge(_sync_step(0), _sync_step(10 * S)),
                    [(1, 0, 10 * S), (2, 10 * S, 20 * S)]))
    ended.add(("p", "e"))
    store.update(now=23)
    assert [r.step for r in store.rows("p", "e")] == [1, 2]
    # the test's clock is 1970: keep the rows exposed
    store.settings = dataclasses.replace(store.settings, expose_s=1e12)
    fams = {f.name: f for f in store.collect()}
    dur = fams["rl_insight_step_duration_seconds"].samples
    assert [(s.value, s.timestamp) for s in dur] == [(10.0, 20.0)]  # the newest row only
    reps = {s.labels["replica"]: s.value
            for s in fams["rl_insight_step_replica_generate_seconds"].samples}
    assert reps == {"0": 4.0, "1": 3.0}
    phases = {s.labels["phase"] for s in fams["rl_insight_step_trainer_phase_seconds"].samples}
    assert phases == {"actor_update", "update_weights"}
    assert "rl_insight_step_last_end_timestamp_seconds" not in fams  # finished
    ended.clear()
    fams = {f.name: f for f in store.collect()}
    assert fams["rl_insight_step_last_end_timestamp_seconds"].samples[0].value == 20
    assert fams["rl_insight_step_median_duration_seconds"].samples[0].value == 10


def test_late_spans_are_counted_and_runs_are_bounded():
    store, ended = _store(max_runs=2)
    store.add(_rows("p", "e", _sync_step(0), [(1, 0, 10 * S)]))
    ended.add(("p", "e"))
    store.update(now=13)
    store.add(_rows("p", "e", {"replica_0": [("vllm_generate", 1 * S, 2 * S)]}, []))
    assert store.runs()[0]["late_spans"] == 1
    store.add(_rows("p", "f", _sync_step(0), []))
    store.add(_rows("p", "g", _sync_step(0), []))
    assert [r["experiment_name"] for r in store.runs()] == ["f", "g"]


# -- the client's step marks, in verl's order ---------------------------------------------
def test_verl_logging_order_makes_contiguous_step_spans(recorded):
    """verl's RLInsightLogger: metric_gauge per key, training_global_step before
    timing_s_step in the same dict (ray_trainer.py 0.9.1)."""
    import rl_insight

    _client, got = recorded
    for step in (1, 2, 3):
        for key, value in (("actor/pg_loss", 0.1), ("training/global_step", step),
                           ("training/epoch", 0), ("timing_s/step", 2.5)):
            rl_insight.metric_gauge(str(key).replace("/", "_"), float(value))
    rl_insight.flush(2)
    spans = [s for s in got if type(s) is Span and s.lane == "trainer"]
    assert [dict(s.attributes)["step"] for s in spans] == [1, 2, 3]
    assert spans[0].end_ns - spans[0].start_ns == int(2.5 * S)  # the first: timing_s/step
    assert spans[1].start_ns == spans[0].end_ns and spans[2].start_ns == spans[1].end_ns


class _Clock:
    """A clock the test moves: the step marks' times without sleeping."""

    def __init__(self) -> None:
        self.ns = 1_000 * S

    def __call__(self) -> int:
        return self.ns


def _log(clock, steps, order) -> list:
    """Steps of the given lengths (s), each dict logged 1 ms after the step ends, its
    keys 0.1 ms apart, after a 1.5 s pause (the verl test's TransferQueue wait)."""
    got: list = []
    marks = StepClock(got.append, clock)
    for number, seconds in enumerate(steps, start=1):
        clock.ns += int(seconds * S)
        keys = {"step": ("rl_insight_monitor_training_global_step", number),
                "time": ("rl_insight_monitor_timing_s_step", seconds - 0.001)}
        for key in order:
            marks.observe(*keys[key])
            clock.ns += S // 10_000
        clock.ns += int(1.5 * S)
    marks.flush()
    return [(dict(s.attributes)["step"], s.start_ns, s.end_ns) for s in got]


@pytest.mark.parametrize("order", [("step", "time"), ("time", "step")])
def test_the_first_step_has_its_own_duration_in_either_order(order):
    """Steps shorter than 5 s, the duration logged before or after the step number: the
    first step's window is its own duration, never the next step's (a dict that puts
    timing_s/step first gave step 1 the second step's length and cut off its rollout)."""
    clock = _Clock()
    t0 = clock.ns
    spans = _log(clock, [4.0, 2.0, 2.5], order)
    assert [n for n, _, _ in spans] == [1, 2, 3]
    first_end = spans[0][2]
    assert abs(spans[0][1] - (first_end - int(3.999 * S))) < S // 1000, spans[0]
    assert spans[0][1] >= t0  # not before the step began
    assert spans[1][1] == spans[0][2] and spans[2][1] == spans[1][2]  # contiguous


def test_tracking_step_and_global_step_make_one_mark_and_bad_values_none(recorded):
    import rl_insight

    _client, got = recorded
    t = rl_insight.Tracking()
    t.log({"training/global_step": 4, "timing_s/step": 1.0}, step=4)
    rl_insight.metric_gauge("training_global_step", float("nan"))
    t.log({"training/global_step": 5}, step=5)
    rl_insight.flush(2)
    spans = [s for s in got if type(s) is Span and s.lane == "trainer"]
    assert [dict(s.attributes)["step"] for s in spans] == [4, 5]


# -- the route and the report, over real OTLP ---------------------------------------------
@pytest.fixture
def server(tmp_path):
    s = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)},
                    overrides=["anatomy.settle_s=0"])
    state = ServerState(s, Supervisor(s.supervisor, s.logs_dir))
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            yield c, state
    finally:
        state.close()


def _otlp(ident: Identity, lanes: dict, marks) -> bytes:
    spans = [(ident, "host:1", Span(state, s, e, lane, (), ends_state=True))
             for lane, ivs in lanes.items() for state, s, e in ivs]
    spans += [(ident, "host:1", Span("train_step", s, e, "trainer", (("step", step),)))
              for step, s, e in marks]
    return encode(spans)


def test_route_and_report_over_otlp(server):
    c, state = server
    t0 = 1_700_000_000 * S
    body = _otlp(Identity("p", "e"), _merge(_sync_step(t0), _sync_step(t0 + 10 * S)),
                 [(1, t0, t0 + 10 * S), (2, t0 + 10 * S, t0 + 20 * S)])
    assert c.post("/v1/traces", content=body,
                  headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    assert c.post("/api/v1/experiments/finish",
                  json={"project": "p", "experiment_name": "e"}).status_code == 200
    got = c.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "e"}).json()
    assert [r["step"] for r in got["steps"]] == [1, 2]
    assert got["steps"][1]["replicas"]["1"]["generate_s"] == 3
    r = c.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "nope"})
    assert r.status_code == 404 and "p/e" in r.json()["error"]
    assert c.get("/api/v1/anatomy", params={"project": "p", "experiment_name": "e",
                                            "last": -1}).status_code == 400
    text = report.table(got["steps"])
    assert text.splitlines()[0].split()[:2] == ["STEP", "TIME"]
    assert "actor_update" in text
    rows = list(csv.DictReader(io.StringIO(report.to_csv(got["steps"]))))
    assert [float(r["duration_s"]) for r in rows] == [10.0, 10.0]
    assert float(rows[0]["replica_0_generate_s"]) == 4.0
    assert float(rows[0]["phase_update_weights_s"]) == 1.0
    assert json.loads(report.render(got["steps"], "json"))[0]["step"] == 1


def test_a_batch_sent_again_is_counted_once(server):
    """A sender that timed out on a request the server had taken keeps the batch and sends
    it again, the same span ids in it (rl_insight/collector/lanes.py send_spans): a rank's
    phase counted twice was 0.56 s of a 0.29-s step in a CI run's joined import."""
    c, _ = server
    t0, ident = 1_700_000_000 * S, Identity("p", "again")
    spans = [(ident, "host:1", Span(state, t0 + a * S, t0 + b * S, f"rank_{r}", (),
                                    span_id=100 * r + i + 1, ends_state=True))
             for r in range(2) for i, (state, a, b) in enumerate(
                 [("ref_compute_log_prob", 0, 1), ("actor_update", 1, 4)])]
    mark = [(ident, "host:1", Span("train_step", t0, t0 + 5 * S, "trainer", (("step", 1),),
                                   span_id=999))]
    for body in (encode(spans), encode(spans[:2] + mark), encode(spans[1:])):
        assert c.post("/v1/traces", content=body,
                      headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    run = {"project": "p", "experiment_name": "again"}
    assert c.post("/api/v1/experiments/finish", json=run).status_code == 200
    rows = c.get("/api/v1/anatomy", params=run).json()["steps"]
    assert [r["step"] for r in rows] == [1]
    for rank in ("0", "1"):
        figures = rows[0]["ranks"][rank]
        assert figures["compute_s"] + figures["wait_s"] == pytest.approx(4.0), rows[0]
    recent = c.get("/api/v1/traces/recent", params=run).json()["spans"]
    assert len(recent) == len(spans) + 1, recent
    lanes = {x["lane"]: x["spans"] for x in c.get("/api/v1/lanes", params=run).json()["lanes"]}
    assert lanes == {"rank_0": 2, "rank_1": 2, "trainer": 1}, lanes


def test_a_run_without_step_marks_holds_a_bounded_number_of_spans():
    """Nothing is finalized without marks, so nothing is pruned: the per-lane bound is
    what keeps thousands of busy lanes from growing the server."""
    from rl_insight.server.analyses.anatomy import MAX_SPANS_PER_LANE

    store, _ = _store()
    for k in range(MAX_SPANS_PER_LANE + 50):
        store.add(_rows("p", "e", {f"rank_{i}": [("actor_update", k * S, k * S + 1)]
                                   for i in range(20)}, []))
    run = store._runs[("p", "e")]
    assert all(len(q) == MAX_SPANS_PER_LANE for q in run.lanes.values())
    assert len(run.lanes) == 20


def test_a_span_that_arrives_after_its_step_was_final_redoes_the_row():
    """A restarted lane actor resends what it had not delivered after newer spans, so a
    replica can report past a step's end before its generation in that step arrives."""
    store, _ = _store()
    lanes = _sync_step(0)
    late = lanes.pop("replica_1")  # its generation, 0..3 s, comes last
    store.add(_rows("p", "e", lanes, [(1, 0, 10 * S)]))
    store.add(_rows("p", "e", {"replica_0": [("vllm_generate", 10 * S, 11 * S)],
                               "replica_1": [("vllm_generate", 10 * S, 11 * S)],
                               "rank_0": [("actor_update", 10 * S, 12 * S)]}, []))
    assert store.update(now=13) == 1
    assert store.rows("p", "e")[0].replicas["1"].generate_s == 0  # not in yet
    store.add(_rows("p", "e", {"replica_1": late}, []))
    assert store.update(now=14) == 1
    [row] = store.rows("p", "e")
    assert row.replicas["1"].generate_s == 3 and row.straggler_ratio == pytest.approx(4 / 3.5)
    assert store.runs()[0]["late_spans"] == 1


def test_a_lane_whose_spans_all_come_after_the_runs_rows_were_final_is_in_them():
    """A lane actor that started late on a loaded machine delivers a replica's spans of
    every step after the run finished and its rows were made: each row is made again
    with that replica (until max_wait_s after it was final: the spans it needs are kept
    that long). Before, only the last two rows could be redone."""
    store, ended = _store(max_wait_s=60)
    steps = [_sync_step(k * 10 * S) for k in range(4)]
    late = _merge(*[{"replica_1": st.pop("replica_1")} for st in steps])
    store.add(_rows("p", "e", _merge(*steps),
                    [(k + 1, k * 10 * S, (k + 1) * 10 * S) for k in range(4)]))
    ended.add(("p", "e"))
    assert store.update(now=43) == 4
    assert all("1" not in r.replicas for r in store.rows("p", "e"))
    store.add(_rows("p", "e", late, []))
    assert store.update(now=60) == 4  # within max_wait_s of the rows: all redone
    assert [r.replicas["1"].generate_s for r in store.rows("p", "e")] == [3] * 4
    store.update(now=43 + 61)  # then what those redos needed goes
    run = store._runs[("p", "e")]
    assert all(e >= 20 * S for q in run.lanes.values() for _, _, e, *_ in q), run.lanes
