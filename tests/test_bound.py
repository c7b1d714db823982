"""Which side bounds the run, in plain data: a step's path and its GPU-seconds by role and
cause (rl_insight/anatomy/bound.py) against hand-made steps whose answer is known, the
causes adding up to each role's GPUs times the wall time over random steps, the verdict
(verdict.py) and the what-if (whatif.py) on synchronous, asynchronous, colocated and
timing-key runs. The prediction against the run made again with the change is
tests/test_whatif_e2e.py."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.anatomy import bound as b
from rl_insight.anatomy import boundreport, verdict, whatif
from rl_insight.anatomy.requests import Request
from rl_insight.anatomy.rows import step_row, timing_row
from rl_insight.frameworks.table import Parts
from tests.conftest import examples
from tests.test_anatomy import server  # noqa: F401  (the route, in-process, over real OTLP)

S = 1_000_000_000


def iv(state: str, a: float, z: float, *ev) -> tuple:
    return (state, int(a * S), int(z * S), *ev)


def sync_step(t0: float, slow: float = 4.0, train: float = 1.8, sync: float = 0.5,
              colocated: bool = True) -> dict:
    """A synchronous step of 7 s from t0: replica 1 generates ``slow`` s, replica 0 2 s;
    both sleep (colocated) while two ranks update the actor, then the weight sync."""
    t1 = t0 + 4.2 + train
    reps = {}
    for r, g in (("replica_0", 2.0), ("replica_1", slow)):
        reps[r] = [iv("vllm_generate", t0, t0 + g),
                   iv("vllm_wake_up", t1, t1 + 0.2), iv("vllm_resume_kv_cache", t1 + 0.2, t1 + 0.4)]
        if colocated:
            reps[r].insert(1, iv("vllm_sleep", t0 + 4.0, t0 + 4.1))
    ranks = {f"rank_{k}": [iv("actor_update", t0 + 4.2, t1), iv("update_weights", t1, t1 + sync)]
             for k in range(2)}
    return {**reps, **ranks}


def rows_of(make, n: int = 5, length: float = 7.0, **kw) -> list[dict]:
    return [step_row(i + 1, int((100 + length * i) * S), int((100 + length * (i + 1)) * S),
                     make(100 + length * i, **kw)).as_dict() for i in range(n)]


def test_a_synchronous_colocated_step_is_cut_by_what_it_waited_on():
    row = step_row(1, 100 * S, 107 * S, sync_step(100.0))
    p = row.bound.path
    path = dict(zip(b.PATH, p, strict=True))
    # the rollout ran alone 0-4 s; half the replicas had finished at 2 s: the rest is
    # the tail
    assert path[b.ROLLOUT] == pytest.approx(2.0) and path[b.TAIL] == pytest.approx(2.0)
    assert path[b.TRAINING] == pytest.approx(1.8) and path[b.SYNC] == pytest.approx(0.5)
    assert path[b.OVERLAP] == 0
    assert sum(p) == pytest.approx(7.0)
    rollout, trainer = row.bound.roles["rollout"], row.bound.roles[b.TRAINER]
    got = dict(zip(b.CAUSES, rollout.causes, strict=True))
    assert got[b.BUSY] == pytest.approx(6.0)  # 2 s + 4 s of generation
    assert got[b.SLOWEST] == pytest.approx(2.0)  # replica 0 from 2 s to 4 s
    assert got[b.ASLEEP] == pytest.approx(2 * 2.0)  # from each sleep to its wake-up
    assert got[b.SYNC] == pytest.approx(2 * 0.5)
    t = dict(zip(b.CAUSES, trainer.causes, strict=True))
    assert t[b.SAMPLES] == pytest.approx(2 * 4.0) and t[b.BUSY] == pytest.approx(2 * 1.8)
    assert row.bound.colocated
    assert row.bound.inputs.straggler_gain_s == pytest.approx(2.0)
    assert row.bound.replica("0")[b.SLOWEST] == pytest.approx(2.0)


def test_gpus_not_told_are_assumed_and_said_so_told_ones_count():
    assumed = step_row(1, 100 * S, 107 * S, sync_step(100.0)).bound
    assert not assumed.roles["rollout"].gpus_known and not assumed.roles[b.TRAINER].gpus_known
    assert any("gpus_per_replica" in m for m in assumed.missing)
    told = step_row(1, 100 * S, 107 * S, sync_step(100.0), gpus_per_replica=4,
                    gpus_per_rank=1).bound
    assert told.roles["rollout"].gpus_known and told.roles["rollout"].as_dict()["gpus"] == 8
    assert sum(told.roles["rollout"].causes) == pytest.approx(8 * 7.0)
    # a rank that names its device (CUDA_VISIBLE_DEVICES) counts one, known
    lanes = sync_step(100.0)
    lanes["rank_0"] = [(*x, {"rank.gpu": "0", "rank.node": "n0"}) for x in lanes["rank_0"]]
    assert step_row(1, 100 * S, 107 * S, lanes).bound.roles[b.TRAINER].gpus_known


interval = st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda t: (min(t), max(t)))
state = st.sampled_from(["vllm_generate", "vllm_sleep", "vllm_wake_up", "actor_update",
                         "update_weights", "ref_compute_log_prob", "switch_wait"])
lanes_st = st.dictionaries(
    st.sampled_from(["replica_0", "replica_1", "teacher_replica_0", "rank_0", "rank_1",
                     "rank_2", "driver"]),
    st.lists(st.tuples(state, interval), max_size=6), max_size=6)


@settings(max_examples=examples(300), deadline=None)
@given(lanes_st, interval, st.integers(0, 40), st.sampled_from([0.0, 1.0, 4.0]))
def test_every_role_s_causes_add_up_to_its_gpus_times_the_wall_time(raw, window, first,
                                                                    gpus):
    lo, hi = window
    hi = hi if hi > lo else lo + 1
    data = {lane: [(st_, s * S, e * S) for st_, (s, e) in ivs] for lane, ivs in raw.items()}
    bd = step_row(3, lo * S, hi * S, data, gpus_per_replica=gpus, gpus_per_rank=gpus,
                  first_seen={lane: first * S for lane in data}).bound
    assert sum(bd.path) == pytest.approx(hi - lo, abs=1e-6)
    assert min(bd.path) >= -1e-9
    for role, rb in bd.roles.items():
        want = rb.lanes * rb.gpus_per_lane * (hi - lo)
        assert sum(rb.causes) == pytest.approx(want, rel=0.01, abs=1e-6), role
        assert min(rb.causes) >= -1e-9
    for key in bd.replica_keys:  # each replica's seconds: the window (float32 kept)
        assert sum(bd.replica(key).values()) == pytest.approx(hi - lo, rel=1e-3, abs=1e-3)


def test_a_rank_waiting_at_collectives_is_waiting_for_the_slowest_not_busy():
    # three ranks meet at the phase's end (the Flight Recorder: rank 2 arrives last at
    # its 4 collectives, 0.5 s after the others on average)
    ev = lambda mean: {"rank.collectives": 4, "rank.mean_to_end_s": mean,  # noqa: E731
                       "rank.first_to_end_s": mean + 0.1}
    lanes = {"replica_0": [iv("vllm_generate", 0, 2)],
             "rank_0": [iv("actor_update", 2, 4, ev(0.6))],
             "rank_1": [iv("actor_update", 2, 4, ev(0.6))],
             "rank_2": [iv("actor_update", 2, 4, ev(0.1))]}
    bd = step_row(1, 0, 5 * S, lanes).bound
    t = dict(zip(b.CAUSES, bd.roles[b.TRAINER].causes, strict=True))
    # ranks 0 and 1 waited 4 x 0.5 s = 2 s each: their whole phase (capped at it)
    assert t[b.SLOWEST] == pytest.approx(4.0)
    assert t[b.BUSY] == pytest.approx(2.0)
    assert t[b.SAMPLES] == pytest.approx(3 * 2.0)


def test_the_verdict_names_the_side_the_run_waited_on():
    rollout = verdict.decide(verdict.account(rows_of(sync_step, slow=2.5)))
    assert rollout["verdict"] == verdict.ROLLOUT_BOUND
    assert "waited for samples" in rollout["why"]
    tail = verdict.decide(verdict.account(rows_of(sync_step, slow=6.0, train=0.3)))
    assert tail["verdict"] == verdict.TAIL_BOUND
    training = verdict.decide(verdict.account(rows_of(sync_step, length=12.0, slow=2.0,
                                                      train=6.0)))
    assert training["verdict"] == verdict.TRAINING_BOUND
    sync = verdict.decide(verdict.account(rows_of(sync_step, length=12.0, slow=2.0,
                                                  train=1.0, sync=5.0)))
    assert sync["verdict"] == verdict.SYNC_BOUND
    both = verdict.decide(verdict.account(rows_of(sync_step, length=12.0, slow=3.5,
                                                  train=3.5)))
    assert both["verdict"] == verdict.BALANCED


def async_step(t0: float, gen: float = 3.0, train: float = 1.0) -> dict:
    """Separate-asynchronous, 4 s from t0: the next batch generates from t0 while the
    ranks train on this one; the weight sync waits for both (switch_wait)."""
    end = max(gen, train) + 0.5
    return {f"replica_{r}": [iv("vllm_generate", t0, t0 + gen - 0.1 * r),
                             iv("switch_wait", t0 + end - 0.5, t0 + end)] for r in range(2)} | \
        {f"rank_{k}": [iv("actor_update", t0, t0 + train),
                       iv("update_weights", t0 + end - 0.5, t0 + end)] for k in range(2)}


def test_an_async_rollout_bound_run_gains_nothing_from_a_faster_trainer():
    rows = rows_of(async_step, length=3.5)
    acc = verdict.account(rows)
    assert verdict.decide(acc)["verdict"] in (verdict.ROLLOUT_BOUND, verdict.TAIL_BOUND)
    assert whatif.overlaps(rows)
    got = {w["kind"] + str(w.get("replicas", "")): w for w in whatif.predict(rows)}
    assert got["trainer"]["saving_s"] == pytest.approx(0.0, abs=1e-6)
    # one replica more: generation 3 s -> 2 s, and the trainer waited 2 s for samples
    assert got["replicas1"]["saving_s"] == pytest.approx(1.0, abs=0.01)
    assert got["weight_sync"]["saving_s"] == pytest.approx(0.5)
    # one fewer: generation 3 -> 6 s; nothing to hide in (training never ran alone)
    assert got["replicas-1"]["saving_s"] == pytest.approx(-3.0, abs=0.01)


def test_an_async_training_bound_run_hides_a_slower_rollout_in_its_wait():
    rows = rows_of(async_step, length=3.5, gen=1.0, train=3.0)
    assert verdict.decide(verdict.account(rows))["verdict"] == verdict.TRAINING_BOUND
    got = {w["kind"] + str(w.get("replicas", "")): w for w in whatif.predict(rows)}
    assert got["replicas1"]["saving_s"] == pytest.approx(0.0, abs=1e-6)
    # 1 s of generation becomes 2 s: hidden in the 2 s it waited for the trainer
    assert got["replicas-1"]["saving_s"] == pytest.approx(0.0, abs=0.01)
    assert got["trainer"]["saving_s"] == pytest.approx(1.5)  # 3 s -> 1.5 s, all alone


def req(replica: str, start: float, end: float, tokens: int, queue: float = 0.0) -> Request:
    e2e = end - start
    return Request(f"r{replica}-{start}-{tokens}", "ab" * 16, "rollout", replica,
                   int(start * S), int(end * S), e2e, queue, None, 0.0, e2e - queue,
                   100, tokens)


def test_cutting_the_longest_response_frees_its_slot_for_the_rest():
    # replica 0: two slots; one 6-s answer of 30,000 tokens holds one of them while 7
    # requests of 0.5 s go one after the other through the other: 6 s in all. Cut at
    # the longest of the rest (300 tokens), the 8 share two slots: 2 s
    reqs = [req("0", 0.0, 6.0, 30_000)] + [req("0", 0.5 * i, 0.5 * (i + 1), 300)
                                           for i in range(7)]
    lanes = {"replica_0": [iv("vllm_generate", 0, 6)], "replica_1": [iv("vllm_generate", 0, 1)],
             "rank_0": [iv("actor_update", 6, 8)]}
    bd = step_row(1, 0, 9 * S, lanes, requests=reqs).bound
    assert bd.inputs.samples == 8 and bd.inputs.tokens == 30_000 + 7 * 300
    assert bd.inputs.longest_s == pytest.approx(6.0)
    # its bound was the 6-s answer; after the cut, 7 x 0.5 + 6 x 0.01 over 2 slots
    cut_to = (7 * 0.5 + 6.0 * 300 / 30_000) / 2
    assert bd.inputs.tail_cut_s == pytest.approx(6.0 - 6.0 * cut_to / 6.0, rel=0.01)


def test_a_run_told_by_timing_keys_alone_is_bound_as_far_as_they_go():
    parts = Parts(generate_s=5.0, weight_update_s=1.0,
                  phases={"actor_update": 2.0, "update_weights": 1.0},
                  waits={"timing/wait": 0.5}, step_s=9.0)
    row = timing_row(4, 100 * S, parts, "skyrl", wait_causes={"timing/wait": b.SAMPLES})
    path = dict(zip(b.PATH, row.bound.path, strict=True))
    assert path[b.ROLLOUT] == pytest.approx(5.5) and path[b.TRAINING] == pytest.approx(2.0)
    assert path[b.SYNC] == pytest.approx(1.0)
    assert sum(row.bound.path) == pytest.approx(9.0)
    assert row.bound.source == "timing_keys" and row.bound.missing
    rep = boundreport.report([row.as_dict()] * 3)
    assert rep["verdict"] == verdict.ROLLOUT_BOUND
    kinds = {w["kind"]: w for w in rep["what_if"]}
    assert kinds["trainer"]["known"] and not kinds["tail"]["known"]
    assert "timing keys" in kinds["tail"]["why"]


def test_the_report_says_where_the_run_changed_sides():
    early = rows_of(sync_step, n=20, slow=2.5)
    late = [step_row(21 + i, int((300 + 12 * i) * S), int((312 + 12 * i) * S),
                     sync_step(300 + 12 * i, slow=2.0, train=6.0)).as_dict()
            for i in range(20)]
    rep = boundreport.report(early + late, last=10)
    assert rep["verdict"] == verdict.TRAINING_BOUND and rep["steps"] == 10
    assert [s["verdict"] for s in rep["stretches"]] == [verdict.ROLLOUT_BOUND,
                                                        verdict.TRAINING_BOUND]
    assert rep["stretches"][1]["first_step"] == 21
    text = boundreport.render(rep, "p", "e")
    assert "training-bound" in text and "steps 21-40 training-bound" in text
    assert "the trainer 2x as fast" in text
    assert not math.isnan(rep["what_if"][0]["step_s"])


# -- the route, the CLI's text and the series, over real OTLP -------------------------------
def test_the_route_answers_the_verdict_the_what_if_and_exports_the_series(server):  # noqa: F811
    server, _ = server
    from rl_insight.collector.otlp_encode import encode
    from rl_insight.wire.events import Identity, Span

    ident, t0 = Identity("p", "bound"), int(time.time()) - 60  # /metrics: the recent
    spans = []
    for i in range(6):
        for lane, ivs in sync_step(t0 + 7 * i, slow=5.0).items():
            spans += [(ident, "host:1", Span(st_, s, e, lane, (), ends_state=True))
                      for st_, s, e in ivs]
        spans.append((ident, "host:1", Span("train_step", (t0 + 7 * i) * S,
                                            (t0 + 7 * (i + 1)) * S, "trainer",
                                            (("step", i + 1),))))
    assert server.post("/v1/traces", content=encode(spans),
                       headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    assert server.post("/api/v1/experiments/finish",
                       json={"project": "p", "experiment_name": "bound"}).status_code == 200
    got = server.get("/api/v1/anatomy/bound",
                     params={"project": "p", "experiment_name": "bound"}).json()
    assert got["steps"] == 6 and got["verdict"] == verdict.TAIL_BOUND
    assert got["roles"]["rollout"]["total_gpu_seconds"] == \
        pytest.approx(got["roles"]["rollout"]["expected_gpu_seconds"])
    changes = {w["kind"]: w for w in got["what_if"] if w.get("replicas", 1) == 1}
    assert changes["straggler"]["step_s"] == pytest.approx(7.0 - 3.0)  # 5 s -> 2 s
    assert set(got["what_if"][0]) >= {"change", "step_s", "samples_per_s"}
    last = server.get("/api/v1/anatomy/bound", params={
        "project": "p", "experiment_name": "bound", "last": 2, "add_replicas": 3,
        "trainer_speedup": 4}).json()
    assert last["steps"] == 2 and last["run"]["steps"] == 6
    assert any(w.get("replicas") == 3 for w in last["what_if"])
    assert any("4x as fast" in w["change"] for w in last["what_if"])
    bad = server.get("/api/v1/anatomy/bound", params={
        "project": "p", "experiment_name": "bound", "trainer_speedup": 0.5})
    assert bad.status_code == 400 and "trainer_speedup" in bad.text
    missing = server.get("/api/v1/anatomy/bound", params={"project": "p",
                                                         "experiment_name": "nope"})
    assert missing.status_code == 404 and "p/bound" in missing.json()["error"]
    metrics = server.get("/metrics").text
    assert 'rl_insight_step_verdict{experiment_name="bound",project="p",' \
           'verdict="tail-bound"} 1.0' in metrics
    assert 'rl_insight_step_path_seconds{experiment_name="bound",part="tail",project="p"}' \
        in metrics
    assert 'cause="waiting_for_samples"' in metrics and "rl_insight_step_whatif_step_seconds" \
        in metrics
    server.post("/api/v1/experiments/start", json={"project": "p", "experiment_name": "bound"})
    page = server.get("/").text  # the status page: the verdict of a run's newest steps
    assert "<b title=" in page and "tail-bound</b>" in page
    assert "the slowest replica as fast as the median" in page


def test_a_synchronous_separate_run_s_replicas_wait_for_the_trainer_awake():
    # the rollout on GPUs of its own (no sleep): while the ranks train, the replicas
    # are idle and awake, waiting for the trainer; nothing is colocated
    row = step_row(1, 100 * S, 107 * S, sync_step(100.0, colocated=False))
    got = dict(zip(b.CAUSES, row.bound.roles["rollout"].causes, strict=True))
    assert not row.bound.colocated and got[b.ASLEEP] == 0
    # each replica from 4.0 s (the last one done) to the weight sync at 6.0 s: the ranks
    # trained from 4.2 s; the 0.2 s between is the driver's
    assert got[b.TRAINER_WAIT] == pytest.approx(2 * 1.8)
    assert got[b.OTHER] == pytest.approx(2 * (0.2 + 0.5))
    rep = verdict.decide(verdict.account(rows_of(sync_step, colocated=False)))
    assert "colocated" not in rep["why"]


def fully_async_step(t0: float) -> dict:
    """Fully asynchronous (verl's fully_async, AReaL): the rollouter generates without a
    break, pausing only for the weight sync at the end; the trainer trains 2.5 s of the
    4-s step and waits for its next batch the rest."""
    return {f"replica_{r}": [iv("vllm_generate", t0, t0 + 3.8),
                             iv("vllm_wake_up", t0 + 3.8, t0 + 4.0)] for r in range(4)} | \
        {f"rank_{k}": [iv("actor_update", t0 + 0.3, t0 + 2.8),
                       iv("update_weights", t0 + 3.8, t0 + 4.0)] for k in range(2)}


def test_a_fully_async_run_accounts_the_trainer_s_wait_for_its_next_batch():
    rows = rows_of(fully_async_step, length=4.0)
    acc = verdict.account(rows)
    t = acc["roles"][b.TRAINER]["gpu_seconds"]
    # per step and rank: 2.5 s busy, 0.3 + 1.0 s waiting for samples, 0.2 s in the sync
    assert t[b.BUSY] == pytest.approx(5 * 2 * 2.5)
    assert t[b.SAMPLES] == pytest.approx(5 * 2 * 1.3)
    assert t[b.SYNC] == pytest.approx(5 * 2 * 0.2)
    assert verdict.decide(acc)["verdict"] == verdict.ROLLOUT_BOUND
    assert whatif.overlaps(rows)
    got = {w["kind"] + str(w.get("replicas", "")): w for w in whatif.predict(rows)}
    # the rollout alone is 1.3 s a step: a faster trainer buys nothing, a free sync 0.2 s
    assert got["trainer"]["saving_s"] == pytest.approx(0.0, abs=1e-6)
    assert got["weight_sync"]["saving_s"] == pytest.approx(0.2)


def test_a_framework_s_named_waits_go_where_its_table_says_they_waited():
    """NeMo-RL's async GRPO (grpo.py at 7ea279ab): the buffer's starvation is the trainer
    waiting for samples, the refit bubble (beyond the weight sync it holds) the sync's."""
    from rl_insight.frameworks import nemo_rl
    from rl_insight.frameworks.table import parts, wait_causes

    fw = nemo_rl.TABLE
    values = {"timing/train/total_step_time": 10.0, "timing/train/policy_training": 3.0,
              "timing/train/weight_sync": 1.0, "timing/train/idle/refit_bubble": 1.5,
              "timing/train/idle/buffer_starvation": 4.0,
              "timing/train/idle/something_new": 0.5}
    got = parts(fw, values)
    causes = wait_causes(fw, got.waits)
    assert causes == {"timing/train/idle/buffer_starvation": b.SAMPLES,
                      "timing/train/idle/refit_bubble": b.SYNC}
    row = timing_row(7, 100 * S, got, fw.name, wait_causes=causes)
    path = dict(zip(b.PATH, row.bound.path, strict=True))
    assert path[b.ROLLOUT] == pytest.approx(4.0)  # starved, waiting for trajectories
    assert path[b.SYNC] == pytest.approx(1.0 + 0.5)  # the sync, and the bubble beyond it
    assert path[b.TRAINING] == pytest.approx(3.0)
    assert sum(row.bound.path) == pytest.approx(10.0)
    assert verdict.decide(verdict.account([row.as_dict()]))["verdict"] == \
        verdict.ROLLOUT_BOUND


def test_a_change_that_moves_the_run_to_the_other_side_names_the_new_verdict():
    """A trainer that slows down from step 30 (its phase from 1 s to 7 s): what changed
    finds it, and says the run is training-bound since, where it was rollout-bound."""
    import random

    from rl_insight.anatomy import changes as what_changed
    from rl_insight.config import ChangesSettings
    from rl_insight.server.analyses.changes import ChangeStore

    rng = random.Random(3)
    rows, t = [], 100.0
    for step in range(1, 51):
        train = (1.0 if step < 30 else 7.0) * rng.lognormvariate(0, 0.01)
        gen = 2.2 * rng.lognormvariate(0, 0.01)  # replica 0 2 s: no tail to speak of
        length = 4.2 + train + 0.5 + 0.5
        lanes = sync_step(t, slow=gen, train=train)
        rows.append(step_row(step, int(t * S), int((t + length) * S), lanes))
        t += length
    store = ChangeStore(ChangesSettings(), lambda p, e: rows, prom=None)
    for r in rows:
        store.observe(("p", "e"), [r])
    got = store.report("p", "e")
    [c] = [c for c in got["changes"] if c["signal"] == "step_time"]
    assert 28 <= c["onset_step"] <= 31
    assert c["verdict"] == {"before": verdict.ROLLOUT_BOUND, "after": verdict.TRAINING_BOUND,
                            "why": c["verdict"]["why"], "changed": True}
    text = what_changed.render(got)
    assert "the run is training-bound since (it was rollout-bound)" in text


def test_a_phase_inside_another_is_no_second_cause_of_a_slow_step():
    """verl's DistProfiler marks `train_batch` inside `actor_update` on every rank: a
    slower train_batch is the step's cause once, its actor_update counted for the rest."""
    from rl_insight.anatomy import explain

    def step(i: int, batch: float) -> dict:
        t0 = 100.0 + 10 * i
        lanes = {f"rank_{k}": [iv("actor_update", t0, t0 + batch + 0.5),
                               iv("train_batch", t0 + 0.2, t0 + 0.2 + batch)]
                 for k in range(2)}
        return step_row(i + 1, int(t0 * S), int((t0 + 10) * S), lanes).as_dict()
    rows = [step(i, 1.0) for i in range(5)] + [step(5, 3.0)]
    assert rows[-1]["enclosed"] == {"train_batch": "actor_update"}
    got = explain.explain(rows, 6)["contributions"]
    assert got[0]["part"] == "phase:train_batch" and got[0]["over_s"] == pytest.approx(2.0)
    outer = next(c for c in got if c["part"] == "phase:actor_update")
    assert outer["seconds"] == pytest.approx(0.5) and outer["over_s"] == pytest.approx(0.0)
