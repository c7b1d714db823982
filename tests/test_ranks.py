"""Which rank a step waited for (rl_insight/anatomy/ranks.py), without a server: phases
whose ranks meet at collectives (each rank's arrivals summarised as its client
summarises torch's Flight Recorder), phases read from their boundaries alone, the row,
the report's lines, and the server's path from an OTLP export to the row and /metrics."""

from __future__ import annotations

import dataclasses
import random

from rl_insight.anatomy import ranks
from rl_insight.anatomy.explain import explain, render
from rl_insight.anatomy.rows import step_row

S = 1_000_000_000


def synced(compute: list[list[float]], late: dict[int, float] | None = None,
           start: float = 0.0) -> tuple[dict[str, ranks.RankPhase], float]:
    """A phase of micro-batches, each ending in an all-reduce all ranks leave together:
    ``compute[i][r]`` rank r's seconds before collective i; ``late``: a rank's data
    wait before its first. Each rank's phase as its client reports it, and the end."""
    late = late or {}
    at, arrivals = start, []
    for i, row in enumerate(compute):
        took = [c + (late.get(r, 0.0) if i == 0 else 0.0) for r, c in enumerate(row)]
        arrivals.append([at + t for t in took])
        at += max(took)
    out = {}
    for r in range(len(compute[0])):
        mine = [a[r] for a in arrivals]
        out[str(r)] = ranks.RankPhase(int(start * S), int(at * S), {
            ranks.COLLECTIVES: len(mine),
            ranks.MEAN_TO_END: sum(at - t for t in mine) / len(mine),
            ranks.FIRST_TO_END: at - mine[0], ranks.NODE: f"n{r // 2}", ranks.GPU: str(r % 2)})
    return out, at


def noisy(n_ranks: int, micro: int, each: float, seed: int,
          slow: dict[int, float] | None = None) -> list[list[float]]:
    rng, slow = random.Random(seed), slow or {}
    return [[each * rng.lognormvariate(0, 0.01) * slow.get(r, 1.0) for r in range(n_ranks)]
            for _ in range(micro)]


def test_a_rank_that_computes_longer_is_named_though_every_rank_ends_together():
    """TraceML's case: every rank's phase ends at the same moment (equal durations); the
    rank that waited least is the culprit, each other waited what it computed more."""
    phase, end = synced(noisy(4, 8, 0.1, seed=1, slow={2: 1.5}))
    assert {p.end for p in phase.values()} == {int(end * S)}  # durations say nothing
    evidence, waits, culprit = ranks.phase_waits(phase)
    assert evidence == ranks.RECORDER
    assert (culprit["rank"], culprit["kind"], culprit["node"], culprit["gpu"]) == \
        ("2", "compute", "n1", "0")
    assert abs(culprit["lead_s"] - 8 * 0.05) < 0.02
    assert waits["2"] == 0.0 and all(abs(waits[r] - 0.4) < 0.02 for r in "013")


def test_a_rank_whose_data_comes_late_is_an_input_straggler():
    phase, _ = synced(noisy(4, 8, 0.1, seed=2), late={1: 0.3})
    _, waits, culprit = ranks.phase_waits(phase)
    assert (culprit["rank"], culprit["kind"]) == ("1", "input")
    assert abs(culprit["lead_s"] - 0.3) < 0.02


def test_a_balanced_phase_names_no_rank_over_many_seeds():
    named = 0
    for seed in range(200):
        phase, _ = synced(noisy(8, 8, 0.1, seed=seed))
        named += bool(ranks.phase_waits(phase)[2])
    assert named == 0


def boundaries(spans: dict[str, tuple[float, float]]) -> dict[str, ranks.RankPhase]:
    return {r: ranks.RankPhase(int(s * S), int(e * S)) for r, (s, e) in spans.items()}


def test_without_the_recorder_the_phases_boundaries_tell_what_they_can():
    # no collective: each rank ends on its own, the slowest is named from its own time
    evidence, waits, c = ranks.phase_waits(boundaries(
        {"0": (0, 1.0), "1": (0, 1.01), "2": (0, 1.6), "3": (0, 0.99)}))
    assert (evidence, c["rank"], c["kind"]) == (ranks.BOUNDARIES, "2", "compute")
    assert abs(waits["0"] - 0.6) < 1e-9
    # they met at the end, one started late: its data (or dispatch) kept them waiting
    evidence, _, c = ranks.phase_waits(boundaries(
        {"0": (0, 2.0), "1": (0.5, 2.0), "2": (0, 2.0), "3": (0.01, 2.0)}))
    assert (evidence, c["rank"], c["kind"]) == (ranks.BOUNDARIES, "1", "input")
    # they met and started together: a compute straggler is invisible, and said so
    evidence, _, c = ranks.phase_waits(boundaries(
        {"0": (0, 2.0), "1": (0, 2.0), "2": (0.001, 2.0)}))
    assert (evidence, c) == (ranks.HIDDEN, {})


def lanes_of(phase: dict[str, ranks.RankPhase], state: str) -> dict[str, list[tuple]]:
    return {f"rank_{r}": [(state, p.start, p.end, p.evidence)] for r, p in phase.items()}


def test_the_row_and_the_report_name_the_rank_and_say_why():
    rows = []
    for step in range(1, 6):
        at = step * 10.0
        slow = {3: 2.0} if step == 5 else {}
        phase, end = synced(noisy(4, 4, 0.25, seed=step, slow=slow), start=at)
        lanes = lanes_of(phase, "actor_update")
        # verl annotates train_batch inside actor_update on each rank: counted once (its
        # client summarises the same collectives for it)
        for r, p in phase.items():
            lanes[f"rank_{r}"].append(("train_batch", p.start + S // 100, p.end, p.evidence))
        rows.append(step_row(step, int((at - 1) * S), int((at + 9) * S), lanes).as_dict())
    last = rows[-1]
    assert last["culprit"]["rank"] == "3" and last["culprit"]["phase"] == "actor_update"
    assert last["culprit"]["role"] == "actor"
    assert all(r["culprit"] is None for r in rows[:-1])
    busy = last["ranks"]["0"]["compute_s"] + last["ranks"]["0"]["wait_s"]
    assert abs(busy - last["phases"]["actor_update"]) < 1e-6  # train_batch not added
    text = render(explain(rows, 5))
    assert "the step waited for rank 3 (actor, node n1, GPU 1)" in text
    lead = last["culprit"]["lead_s"]
    assert abs(lead - 1.0) < 0.03  # 4 micro-batches, each 0.25 s longer
    assert f"it computed {lead:.2f} s longer in actor_update while the other 3 ranks " \
        f"waited {last['culprit']['waited_s']:.2f} s for it" in text
    assert "torch's Flight Recorder" in text
    assert "balanced (4 ranks" in render(explain(rows, 4))


def test_a_hidden_straggler_tells_the_user_how_to_see_it():
    lanes = {f"rank_{r}": [("actor_update", 0, 2 * S)] for r in range(4)}
    rows = [step_row(1, 0, 3 * S, lanes).as_dict()]
    assert rows[0]["rank_evidence"] == {"actor_update": ranks.HIDDEN}
    assert "TORCH_FR_BUFFER_SIZE" in render(explain(rows, 1))


def test_a_rank_phase_reaches_the_row_and_metrics_through_the_server():
    """The client's span attributes, encoded as the lane actor encodes them, decoded by
    the server's intake reader, held by the anatomy and exposed on /metrics."""
    from rl_insight.collector.otlp_encode import encode
    from rl_insight.config import AnatomySettings
    from rl_insight.server.analyses.anatomy import AnatomyStore
    from rl_insight.server.ingest import otlp, spanwalk
    from rl_insight.wire.events import Identity, Span

    ident = Identity("p", "e")
    spans = []
    base = 1_700_000_000.0
    phase, end = synced(noisy(4, 4, 0.25, seed=3, slow={1: 1.8}), start=base + 11)
    for r, p in phase.items():
        attrs = tuple(p.evidence.items()) + (("monitor.trace_segment", "state_interval"),)
        spans.append(Span("actor_update", p.start, p.end, f"rank_{r}", attrs,
                          ends_state=True))
    for step, (s, e) in enumerate(((base, base + 10), (base + 10, base + 20)), 1):
        spans.append(Span("train_step", int(s * S), int(e * S), "trainer",
                          (("step", step),), ends_state=True))
    req = otlp.decode(encode((ident, "1234", s) for s in spans), otlp.PROTOBUF)
    store = AnatomyStore(AnatomySettings(), finished=lambda p, e: True)
    store.add(r for s in spanwalk.walk(req).spans if (r := spanwalk.state_row(s)))
    store.update(now=base + 100)
    (row,) = [r for r in store.rows("p", "e") if r.step == 2]  # the newest: on /metrics
    assert row.culprit["rank"] == "1" and row.culprit["node"] == "n0"
    store.settings = dataclasses.replace(store.settings, expose_s=1e12)
    fams = {f.name: f for f in store.collect()}
    culprit = fams["rl_insight_step_culprit_rank"].samples
    assert [s.labels["rank"] for s in culprit] == ["1"]
    waits = {s.labels["rank"]: s.value for s in fams["rl_insight_step_rank_wait_seconds"].samples}
    assert set(waits) >= {"0", "1", "2", "3", "median"} and waits["1"] == 0.0


def test_the_client_adds_node_gpu_to_rank_phases_only(monkeypatch):
    from rl_insight.client import rank_evidence
    from rl_insight.wire.events import Span

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.delenv(rank_evidence.FR_ENV, raising=False)
    rank_evidence._reset()
    rank = Span("actor_update", 1, 2, "rank_3", (), ends_state=True)
    replica = Span("vllm_generate", 1, 2, "replica_0", (), ends_state=True)
    out = rank_evidence.enrich([rank, replica])
    assert dict(out[0].attributes)[ranks.GPU] == "5" and ranks.NODE in dict(out[0].attributes)
    assert out[1] is replica
    rank_evidence._reset()


def test_the_recorders_ring_is_read_once_per_process(monkeypatch):
    """TORCH_FR_BUFFER_SIZE is read when the process's evidence is made, not at every
    rank span of every batch (torch itself reads it once, when a group starts)."""
    from rl_insight.client import rank_evidence
    from rl_insight.wire.events import Span

    reads = []
    monkeypatch.setattr(rank_evidence, "_ring_size", lambda: reads.append(1) or 16)
    rank_evidence._reset()
    for _ in range(3):  # three batches of four ranks
        rank_evidence.enrich([Span("actor_update", 1, 2, f"rank_{r}", (), ends_state=True)
                              for r in range(4)])
    assert len(reads) == 1
    rank_evidence._reset()


def test_a_frameworks_ranks_name_their_culprit_from_their_own_spans(tmp_path):
    """ROLL's worker spans (from the real OpenTelemetry SDK, as ROLL's tracer makes them:
    scope `worker`, the rank in service.instance.id) mapped by its table to rank lanes:
    rank 2's train_step ends half a second after the others' (they do not meet there),
    and the step names it from its own time."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    from rl_insight import config
    from rl_insight.server.ingest import intake
    from rl_insight.server.services.supervisor import Supervisor
    from rl_insight.server.state import ServerState

    def tracer(service: str, scope: str, **attrs):
        p = TracerProvider(resource=Resource.create({"service.name": service,
                                                     "project": "p",
                                                     "experiment_name": "roll", **attrs}))
        p.add_span_processor(SimpleSpanProcessor(out))
        return p.get_tracer(scope)

    out = InMemorySpanExporter()
    driver = tracer("driver", "driver")
    workers = [tracer("actor_train", "worker", **{"service.instance.id": f"actor_train-{r}-G1"})
               for r in range(4)]
    t0 = 1_700_000_000 * S
    for step in (1, 2):
        base = t0 + (step - 1) * 10 * S
        mark = driver.start_span("pipeline_step", start_time=base,
                                 attributes={"global_step": step})
        for r, tr in enumerate(workers):
            took = (2.5 if (r == 2 and step == 2) else 2.0) + 0.001 * r
            tr.start_span("worker.train_step", start_time=base + S).end(
                end_time=base + S + int(took * S))
        mark.end(end_time=base + 9 * S)
    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})
    state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    state.open()
    try:
        state.relay.stop()
        intake.accept_spans(state, encode_spans(out.get_finished_spans()).SerializeToString(),
                            "application/x-protobuf", "")
        state.anatomy.update(now=t0 / S + 1000)
        rows = {r.step: r for r in state.anatomy.rows("p", "roll")}
    finally:
        state.close()
    assert rows[1].culprit is None and rows[1].rank_count == 4
    c = rows[2].culprit
    assert (c["rank"], c["kind"], c["evidence"], c["phase"]) == \
        ("2", "compute", ranks.BOUNDARIES, "actor_update"), c
    assert abs(c["lead_s"] - 0.5) < 0.01


# -- ranks outside Ray (issue 56, 0(a)): rank 0 logs the step while the others go on ------
MICRO = 4


def _trainer_steps(steps: int, slow: dict[int, float], log_s: float = 0.02
                   ) -> tuple[dict[str, list[tuple]], list[int]]:
    """Three ranks outside Ray, each step three phases of all-reduces (update_weights one
    broadcast); rank 0 logs the step (the mark) ``log_s`` after the last, while ranks 1
    and 2 enter the next step's first phase at once and wait for rank 0 at its first
    collective. ``slow``: step -> rank 2's extra seconds before each all-reduce of
    actor_update. Rank lanes as the server holds them, and the marks."""
    lanes: dict[str, list[tuple]] = {f"rank_{r}": [] for r in range(3)}
    marks, at = [0], 0.0
    for step in range(1, steps + 1):
        late = {0: log_s} if step > 1 else {}
        for phase, micro, each in (("actor_compute_log_prob", MICRO, 0.075),
                                   ("actor_update", MICRO, 0.075), ("update_weights", 1, 0.05)):
            extra = slow.get(step, 0.0) if phase == "actor_update" else 0.0
            compute = [[each, each, each + extra] for _ in range(micro)]
            got, end = synced(compute, late if phase == "actor_compute_log_prob" else None,
                              start=at)
            for r, p in got.items():
                start = p.start + (int(late[0] * S) if r == "0" and late and
                                   phase == "actor_compute_log_prob" else 0)
                lanes[f"rank_{r}"].append((phase, start, p.end, ranks.pack(p.evidence)))
            at = end
        marks.append(int((at + log_s) * S))
    return lanes, marks


def test_ranks_that_enter_the_next_step_before_its_mark_are_read_in_the_step_they_end_in():
    """Outside Ray rank 0 marks the step while ranks 1 and 2 already started the next
    one's first phase (they wait for rank 0 at its first all-reduce). Cut at the mark,
    that phase was counted in both steps with all its collectives, and joined in the
    earlier one with that step's own interval of it: ranks 1 and 2 computed 0 s, and
    rank 0 was named for a lead it never had."""
    lanes, marks = _trainer_steps(3, slow={3: 0.0625})
    rows = [step_row(k, marks[k - 1], marks[k], lanes).as_dict() for k in (1, 2, 3)]
    for row in rows[:2]:  # balanced: each rank computed its 0.3 + 0.3 + 0.05 s
        assert row["culprit"] is None, row["culprit"]
        assert set(row["rank_evidence"].values()) == {ranks.RECORDER}, row["rank_evidence"]
        for r, fig in row["ranks"].items():
            assert abs(fig["compute_s"] - 0.65) < 0.03, (row["step"], r, fig)
    c = rows[2]["culprit"]
    assert (c["rank"], c["kind"], c["phase"]) == ("2", "compute", "actor_update"), c
    assert abs(c["lead_s"] - 0.25) < 0.02, c
    assert abs(rows[2]["ranks"]["2"]["compute_s"] - 0.9) < 0.03, rows[2]["ranks"]
    # cut to the window (what the step's time went to), the piece of the next step's
    # phase keeps no summary: it was measured against an end beyond the window
    cut = ranks.from_lanes(lanes, marks[1], marks[2])["actor_compute_log_prob"]
    assert ranks.COLLECTIVES in cut["0"].evidence
    assert ranks.COLLECTIVES not in cut["1"].evidence


def test_a_phase_entered_twice_in_a_step_holds_only_its_own_time():
    """verl's old log-prob pass and another after the update are one phase twice in a
    step: joined from the first start to the last end, the update between them looked
    nested in it and its waits went uncounted."""
    a1, _ = synced(noisy(3, 4, 0.1, seed=7))
    update, end = synced(noisy(3, 4, 0.1, seed=8, slow={1: 2.0}), start=0.4)
    a2, _ = synced(noisy(3, 4, 0.1, seed=9), start=end)
    lanes = {f"rank_{r}": [("actor_compute_log_prob", a1[r].start, a1[r].end, a1[r].evidence),
                           ("actor_update", update[r].start, update[r].end,
                            update[r].evidence),
                           ("actor_compute_log_prob", a2[r].start, a2[r].end, a2[r].evidence)]
             for r in a1}
    joined = ranks.from_lanes(lanes, 0, 10 * S)["actor_compute_log_prob"]["0"]
    assert abs(joined.duration - (a1["0"].duration + a2["0"].duration)) < 1e-9
    assert joined.evidence[ranks.COLLECTIVES] == 8
    row = step_row(1, 0, 10 * S, lanes)
    assert row.culprit["rank"] == "1" and row.culprit["phase"] == "actor_update"
    # the others waited what rank 1 computed more in the update: 4 x 0.1 s
    assert all(abs(row.ranks[r]["wait_s"] - 0.4) < 0.03 for r in "02"), row.ranks
    busy = {r: f["compute_s"] + f["wait_s"] for r, f in row.ranks.items()}
    assert all(abs(b - 1.6) < 0.03 for b in busy.values()), busy  # 0.4 + 0.8 + 0.4


def test_a_phase_whose_evidence_disagrees_names_no_rank_and_says_why():
    """The recorder says rank 2 arrived last at every all-reduce (it computed longer),
    the boundaries that rank 0 started half a second late (its data came late): both
    cannot be right, and naming either would send the user after the wrong rank."""
    phase, end = synced(noisy(3, 4, 0.25, seed=4, slow={2: 1.25}), start=10.0)
    phase["0"].start += S // 2  # its span began late, its arrivals were not
    evidence, _, culprit = ranks.phase_waits(phase)
    assert (evidence, culprit) == (ranks.UNCLEAR, {})
    lanes = lanes_of(phase, "update_weights")
    rows = [step_row(1, 9 * S, int((end + 1) * S), lanes).as_dict()]
    row = rows[0]
    assert row["culprit"] is None and row["rank_evidence"] == {"update_weights": ranks.UNCLEAR}
    said = row["rank_unclear"]["update_weights"]
    assert (said[ranks.RECORDER]["rank"], said[ranks.RECORDER]["kind"]) == ("2", "compute")
    assert (said[ranks.BOUNDARIES]["rank"], said[ranks.BOUNDARIES]["kind"]) == ("0", "input")
    text = render(explain(rows, 1))
    assert "ranks in update_weights: unclear, no rank named: torch's Flight Recorder " \
        "points at rank 2 (it computed" in text, text
    assert "the phase's boundaries at rank 0 (its data came 0.50 s late)" in text, text
    # where they agree (the late rank also arrived late), the rank is named
    agree, _ = synced(noisy(3, 4, 0.25, seed=4), late={0: 0.5}, start=10.0)
    agree["0"].start += S // 2
    evidence, _, culprit = ranks.phase_waits(agree)
    assert (evidence, culprit["rank"], culprit["kind"]) == (ranks.RECORDER, "0", "input")


def test_a_late_start_outrun_by_a_compute_straggler_is_no_disagreement():
    """A rank whose call came 0.08 s late (a driver's dispatch on a loaded machine) while
    another computed 0.2 s longer: the boundaries see only the late start, the recorder
    sees it arrive late and the straggler later still. Both are right; the others
    waited for the straggler."""
    phase, _ = synced(noisy(4, 4, 0.1, seed=5, slow={2: 1.5}), late={1: 0.08})
    phase["1"].start += int(0.08 * S)
    bare = {r: ranks.RankPhase(p.start, p.end) for r, p in phase.items()}
    assert ranks.phase_waits(bare)[2]["rank"] == "1"  # what the boundaries alone say
    evidence, _, culprit = ranks.phase_waits(phase)
    assert (evidence, culprit["rank"], culprit["kind"]) == (ranks.RECORDER, "2", "compute")
