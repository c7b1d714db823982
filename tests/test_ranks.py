"""Which rank a step waited for (rl_insight/anatomy/ranks.py), without a server: phases
whose ranks meet at collectives (each rank's arrivals summarised as its client
summarises torch's Flight Recorder), phases read from their boundaries alone, the row,
the report's lines, and the server's path from an OTLP export to the row and /metrics."""

from __future__ import annotations

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
    from rl_insight.events import Identity, Span
    from rl_insight.server.analyses.anatomy import AnatomyStore
    from rl_insight.server.ingest import otlp, spanwalk

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
    store.settings.expose_s = 1e12
    fams = {f.name: f for f in store.collect()}
    culprit = fams["rl_insight_step_culprit_rank"].samples
    assert [s.labels["rank"] for s in culprit] == ["1"]
    waits = {s.labels["rank"]: s.value for s in fams["rl_insight_step_rank_wait_seconds"].samples}
    assert set(waits) >= {"0", "1", "2", "3", "median"} and waits["1"] == 0.0


def test_the_client_adds_node_gpu_to_rank_phases_only(monkeypatch):
    from rl_insight.client import rank_evidence
    from rl_insight.events import Span

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.delenv(rank_evidence.FR_ENV, raising=False)
    rank_evidence._reset()
    rank = Span("actor_update", 1, 2, "rank_3", (), ends_state=True)
    replica = Span("vllm_generate", 1, 2, "replica_0", (), ends_state=True)
    out = rank_evidence.enrich([rank, replica])
    assert dict(out[0].attributes)[ranks.GPU] == "5" and ranks.NODE in dict(out[0].attributes)
    assert out[1] is replica
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
