"""Profiled ranks into the run's lanes and steps (rl_insight/profiler/export.py,
importer.py, stages.py) and what the server makes of them (its anatomy: an imported
step's marks widened, a phase told live and from its profile made one): plain data and
the server's own anatomy store, no process."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rl_insight.anatomy import ranks
from rl_insight.config import AnatomySettings
from rl_insight.profiler import export, importer, stages
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, Event, RankTrace
from rl_insight.server.analyses.anatomy import AnatomyStore
from rl_insight.server.ingest import otlp, spanwalk
from rl_insight.wire.frameworks import IMPORT_PROCESS, IMPORT_SCOPE

S = 1_000_000_000
T0 = 1_790_000_000 * S


def at(s: float) -> int:
    return T0 + round(s * S)


def trace(rank: int, step: int | None = 3, lag: float = 0.0, slow: bool = False,
          kernels: bool = False, source: str = "", after: float = 0.0,
          stamped_late: float = 0.0) -> RankTrace:
    """actor_update from 1 s to 3 s + ``lag`` (+ ``after``: the rank's own code and
    scheduling past its last collective), an FSDP range inside, four collectives that end
    together 10 ms after the last rank reached them: the ``slow`` rank (the step's
    straggler, ``lag`` longer computing) reaches each ``lag / 4`` after the others, who
    waited for it there; ``stamped_late``: its last collective's end stamped that late
    (its thread scheduled late)."""
    events = [Event(RANGE, "actor_update", at(1), at(3 + lag + after), "thread 1"),
              Event(RANGE, "FullyShardedDataParallel.forward", at(1.1), at(1.2), "thread 1")]
    for i in range(4):
        start = 1.4 + 0.4 * i + lag * (i + slow) / 4
        met = 1.4 + 0.4 * i + lag * (i + 1) / 4 + 0.01 + (stamped_late if i == 3 else 0.0)
        events.append(Event(COLLECTIVE, "gloo:all_reduce", at(start), at(met), "thread 2"))
    if kernels:
        events.append(Event(KERNEL, "sgemm", at(1.5), at(2.5), "stream 7"))
    return RankTrace(rank=rank, source=source or f"r{rank}.json.gz", step=step,
                     role="actor", world_size=3, node="n-0",
                     device="5" if kernels else "", events=sorted(events, key=lambda e: e[2]))


def straggling(step: int = 3, lag: float = 0.4, after: float = 0.0,
               late: float = 0.0) -> list[RankTrace]:
    """``after``: the straggler's range ends that much past its last collective;
    ``late``: rank 0's last collective's end stamped that much late."""
    return [trace(r, step, lag, slow=r == 2, after=after if r == 2 else 0.0,
                  stamped_late=late if r == 0 else 0.0) for r in range(3)]


def test_a_rank_s_stages_carry_their_collectives_as_the_flight_recorder_s_summary():
    (span,) = export.rank_spans(trace(1), "torch", "p")
    a = dict(span.attributes)
    starts = [at(1.4), at(1.8), at(2.2), at(2.6)]
    assert (span.name, span.lane, span.start_ns, span.end_ns) == \
        ("actor_update", "rank_1", at(1), at(3))
    assert a[ranks.COLLECTIVES] == 4 and a[ranks.ARRIVALS] == "torch"
    # each arrival to where the ranks met there (its collective's end, 10 ms on), not to
    # the range's end (3 s)
    assert a[ranks.MEAN_TO_END] == pytest.approx(0.01)
    assert a[ranks.FIRST_TO_END] == pytest.approx(0.01)
    # torch's c10d:: calls only (they return before the ranks meet): to the range's end
    calls = trace(1)
    calls.events = [e._replace(name="c10d::allreduce_") if e.kind == COLLECTIVE else e
                    for e in calls.events]
    (called,) = export.rank_spans(calls, "torch")
    c = dict(called.attributes)
    assert c[ranks.MEAN_TO_END] == pytest.approx(sum(at(3) - s for s in starts) / 4 / S)
    assert c[ranks.FIRST_TO_END] == pytest.approx(1.6)
    assert (a[ranks.NODE], a["step"], a["process_id"]) == ("n-0", 3, "p")
    assert ranks.GPU not in a and ranks.GPU_BUSY not in a  # no kernels: no GPU figures
    (gpu,) = export.rank_spans(trace(1, kernels=True), "torch")
    g = dict(gpu.attributes)
    assert g[ranks.GPU] == "5" and g[ranks.GPU_BUSY] > 0


def test_a_stage_with_no_collective_says_none_and_other_ranges_stay_out():
    t = trace(0)
    t.events = [e for e in t.events if e.kind != COLLECTIVE]
    (span,) = export.rank_spans(t, "torch")
    assert dict(span.attributes)[ranks.COLLECTIVES] == 0
    assert ranks.ARRIVALS not in dict(span.attributes)


def test_verl_s_own_stage_roles_stay_as_they_are_older_names_map_to_our_phases():
    """Every role verl 0.9.1's workers annotate (read from the installed verl's source,
    not imported) is a stage kept under its own name, as its live lane has it."""
    spec = importlib.util.find_spec("verl")
    root = Path(spec.origin).parent
    roles = set()
    for name in ("engine_workers.py", "engine_workers_tinker.py"):
        text = (root / "workers" / name).read_text()
        roles |= set(re.findall(r'@DistProfiler\.annotate\([^)]*role="([^"]+)"', text))
    assert roles >= {"train_batch", "actor_update", "actor_compute_log_prob",
                     "ref_compute_log_prob"}
    assert {r: stages.phase_of(r) for r in roles} == {r: r for r in roles}
    assert stages.phase_of("update_actor") == "actor_update"
    assert stages.phase_of("compute_ref_log_prob") == "ref_compute_log_prob"
    assert stages.phase_of("FullyShardedDataParallel.forward") is None


def decode(payload: bytes) -> tuple[str, list]:
    req = ExportTraceServiceRequest()
    req.ParseFromString(payload)
    (rs,) = req.resource_spans
    (ss,) = rs.scope_spans
    return ss.scope.name, list(ss.spans)


def test_every_profiler_s_reader_is_found_by_its_name_and_torch_s_takes_uploads():
    from rl_insight.profiler import readers

    for name in ("torch", "nvtx", "mstx"):
        reader = readers.get(name)
        assert callable(reader.files) and callable(reader.read), name
    assert list(readers.uploadable()) == ["torch"]
    with pytest.raises(readers.NoReader, match="known: mstx, nvtx, torch"):
        readers.get("nsys")


def test_exports_carry_the_import_s_scope_and_hold_at_most_their_size():
    spans = [s for r in range(3) for s in export.rank_spans(trace(r), "torch")]
    spans += export.marks(export.steps_of([trace(r) for r in range(3)]))
    got = list(export.exports(spans, "p", "e", "torch", size=2))
    assert [n for _, n in got] == [2, 2]
    scope, first = decode(got[0][0])
    assert scope == IMPORT_SCOPE + "torch"
    _, last = decode(got[-1][0])
    mark = {kv.key: kv.value for kv in last[-1].attributes}
    assert last[-1].name == "train_step" and mark["state_lane_id"].string_value == "trainer"
    assert mark["process_id"].string_value == IMPORT_PROCESS


def store_of(payloads: list[bytes], each: bool = False) -> AnatomyStore:
    """The server's anatomy fed the exports; ``each``: its rows made after every one
    (as the intake does for an import's marks)."""
    store = AnatomyStore(AnatomySettings(), finished=lambda p, e: True)
    for payload in payloads:
        req = otlp.decode(payload, otlp.PROTOBUF)
        store.add(r for s in spanwalk.walk(req).spans if (r := spanwalk.state_row(s)))
        if each:
            store.update(now=T0 / S + 1000)
    store.update(now=T0 / S + 1000)
    return store


def sent(traces: list[RankTrace], marks: bool = True) -> list[bytes]:
    spans = [s for t in traces for s in export.rank_spans(t, "torch", export.process_of(t))]
    if marks:
        spans += export.marks(export.steps_of(traces))
    return [p for p, _ in export.exports(spans, "p", "e", "torch")]


@pytest.mark.parametrize(("after", "late"), [(0.0, 0.0), (0.025, 0.0), (0.0, 0.025)])
def test_the_imported_step_names_the_slow_rank_from_its_collectives(after, late):
    """A loaded host's scheduling (fresh clones of 2026-12-07: 0.33 s and 0.30 s of a
    0.42 s and 0.41 s lead): ``after``, the straggler's range ended 25 ms past its last
    collective; ``late``, rank 0's last collective's end stamped 25 ms late. Held to the
    range's end, or to one meeting point for all collectives, the lead moved four times
    that; held to each collective's own end, not at all, or by the late stamp once (half
    of it: rank 0 is one of the two others whose median the lead is taken against)."""
    (row,) = store_of(sent(straggling(after=after, late=late))).rows("p", "e")
    c = row.culprit
    assert (c["rank"], c["kind"], c["arrivals"], c["phase"]) == \
        ("2", "compute", "torch", "actor_update")
    assert c["lead_s"] == pytest.approx(0.4 + late / 2, abs=1e-5)  # ns rounding
    assert "the torch profiler's collectives" in ranks.why_rank(c)


def test_a_step_s_files_sent_one_at_a_time_widen_its_mark_never_into_the_next_step():
    """Each upload brings one rank and a mark of its own window: the first mark makes the
    row at once (its times are old), the later ones widen it and it is made again with
    every rank; no widening reaches into the next step's window."""
    first, second, late = straggling()
    late.events.append(Event(KERNEL, "tail", at(3.3), at(3.5), "stream 1"))  # past both
    payloads = sent([first]) + sent([second]) + sent([late])
    nxt = trace(0, step=4)
    nxt.events = [e._replace(start_ns=e.start_ns + 3 * S, end_ns=e.end_ns + 3 * S)
                  for e in nxt.events]
    store = store_of(payloads + sent([nxt]), each=True)
    rows = {r.step: r for r in store.rows("p", "e")}
    assert rows[3].end_ns == at(3.5) and rows[3].rank_count == 3
    assert rows[3].culprit["rank"] == "2"
    assert rows[4].start_ns >= rows[3].end_ns
    run = store._runs[("p", "e")]
    run.add_span("trainer", "train_step", at(0), at(9), 4, None, IMPORT_PROCESS)
    assert run.windows[4][0] >= rows[3].end_ns  # widened, within its neighbours


def test_a_live_trainer_s_mark_is_never_widened_by_an_import():
    store = AnatomyStore(AnatomySettings(), finished=lambda p, e: False)
    store.add([("p", "e", "trainer", "train_step", at(0), at(5), "vm:1", 3)])
    store.add([("p", "e", "trainer", "train_step", at(0), at(9), IMPORT_PROCESS, 3)])
    (_, start), = store._runs[("p", "e")].marks.values()
    assert list(store._runs[("p", "e")].marks) == [at(5)] and start == at(0)


def test_a_phase_told_live_and_from_its_profile_is_one_the_summarised_evidence_kept():
    live = [("p", "e", f"rank_{r}", "actor_update", at(0.99), at(3.41), f"vm:{r}", None,
             {ranks.NODE: "n-0"}) for r in range(3)]
    store = AnatomyStore(AnatomySettings(), finished=lambda p, e: True)
    store.add(live)
    store.add([("p", "e", "trainer", "train_step", at(0), at(4), "vm:9", 3)])
    for payload in sent(straggling(), marks=False):
        req = otlp.decode(payload, otlp.PROTOBUF)
        store.add(r for s in spanwalk.walk(req).spans if (r := spanwalk.state_row(s)))
    run = store._runs[("p", "e")]
    kept = [iv for iv in run.lanes["rank_1"] if iv[0] == "actor_update"]
    assert len(kept) == 1 and ranks.unpack(kept[0][3])[ranks.COLLECTIVES] == 4
    store.update(now=T0 / S + 1000)
    (row,) = store.rows("p", "e")
    assert row.culprit["rank"] == "2" and row.culprit["arrivals"] == "torch"
    for fig in row.ranks.values():  # told twice, it would count twice
        assert fig["compute_s"] + fig["wait_s"] <= row.duration_s


def write_trace(path: Path, rank: int, step: int, base: int, damaged: bool = False) -> Path:
    doc = {"distributedInfo": {"rank": rank, "world_size": 3}, "baseTimeNanoseconds": base,
           "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "actor_update",
                            "ts": 1000.0, "dur": 2000.0, "tid": 1},
                           {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce",
                            "ts": 2500.0, "dur": 500.0, "tid": 2}]}
    raw = gzip.compress(json.dumps(doc).encode())
    path.write_bytes(raw[:len(raw) // 2] if damaged else raw)
    return path


def name(step: int, rank: int) -> str:
    return f"actor_train_step{step}_rank{rank}-of-3_pid{10 + rank}_20261207045024068.json.gz"


def test_an_import_reads_a_step_s_files_then_sends_its_mark_and_skips_bad_files(tmp_path):
    for step in (2, 10):  # name order would put step 10 first
        for rank in range(3):
            write_trace(tmp_path / name(step, rank), rank, step, T0 + step * S,
                        damaged=(step, rank) == (10, 1))
    got: list[tuple[str, list]] = []
    job = importer.Import("torch", "p", "e", lambda b: got.append(decode(b)) or True)
    files = importer.inputs(job.reader, [tmp_path])
    assert [importer.readers.get("torch").step_of(f) for f in files] == [2, 2, 2, 10, 10, 10]
    tally = job.run(files)
    order = [(s.name, {kv.key: kv.value for kv in s.attributes}) for _, spans in got
             for s in spans]
    kinds = [n for n, _ in order]
    assert kinds == ["actor_update"] * 3 + ["train_step"] + ["actor_update"] * 2 + \
        ["train_step"]
    assert not any(name(10, 1) in a["process_id"].string_value for _, a in order)
    assert (tally.read, tally.files, sorted(tally.steps), sorted(tally.ranks)) == \
        (5, 6, [2, 10], [0, 1, 2])
    assert "truncated" in tally.bad[str(tmp_path / name(10, 1))]


def test_an_import_stops_when_the_server_takes_no_more(tmp_path):
    for rank in range(2):
        write_trace(tmp_path / name(1, rank), rank, 1, T0)
    job = importer.Import("torch", "p", "e", lambda b: False)
    with pytest.raises(importer.SendFailed):
        job.run(importer.inputs(job.reader, [tmp_path]))
    assert job.tally.read == 0


def test_following_reads_a_file_once_it_settled_and_marks_a_step_once_it_did(tmp_path):
    now = [0.0]
    got: list[str] = []
    job = importer.Import("torch", "p", "e",
                          lambda b: got.extend(s.name for s in decode(b)[1]) or True)
    follow = importer.Follower(job, [str(tmp_path)], settle_s=5, clock=lambda: now[0])
    write_trace(tmp_path / name(1, 0), 0, 1, T0)
    assert follow.poll() == []  # first seen
    now[0] = 6
    assert [p.name for p in follow.poll()] == [name(1, 0)] and got == ["actor_update"]
    write_trace(tmp_path / name(1, 1), 1, 1, T0)
    now[0] = 7
    follow.poll()
    now[0] = 12.5
    follow.poll()  # rank 1 read now; step 1 heard of 0 s ago: not marked yet
    assert got == ["actor_update", "actor_update"]
    now[0] = 18
    follow.poll()
    assert got[-1] == "train_step" and job.tally.steps == {1}
    write_trace(tmp_path / name(1, 2), 2, 1, T0 + S)  # a late file of a marked step
    now[0] = 19
    follow.poll()
    now[0] = 25
    follow.poll()
    assert got[-2:] == ["actor_update", "train_step"]  # its mark again, widened


def test_an_import_puts_each_stage_s_expert_loads_on_one_span_of_its_step(tmp_path):
    """verl's msprobe dumps beside the traces (rl_insight/profiler/experts.py): each
    (step, stage)'s loads, the ranks summed, travel on the first span of that stage and
    step the import sends, once."""
    import numpy

    from rl_insight.commands.profimport import _expert_loads
    from rl_insight.wire.rank_evidence import EXPERT_TOKENS

    for rank in range(3):
        write_trace(tmp_path / name(2, rank), rank, 2, T0 + 2 * S)
        folder = tmp_path / "dumps" / "step_2" / "actor_update" / f"rank{rank}" / \
            "dump_tensor_data"
        folder.mkdir(parents=True)
        numpy.save(folder / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.npy",
                   numpy.array([3, 1, 0, 4 + rank], dtype=numpy.int64))
    (tmp_path / "dumps" / "step_2" / "actor_update" / "rank0" / "dump_tensor_data" /
     "NPU.npu_grouped_matmul.1.forward.kwargs.group_list.npy").write_bytes(b"not numpy")
    bad: dict[str, str] = {}
    loads = _expert_loads([str(tmp_path)], bad)
    assert loads == {(2, "actor_update"): {0: [9, 3, 0, 15]}}
    assert len(bad) == 1 and "group_list.npy" in next(iter(bad))  # named, left out
    got: list[tuple[str, list]] = []
    job = importer.Import("torch", "p", "e", lambda b: got.append(decode(b)) or True,
                          experts=loads)
    tally = job.run(importer.inputs(job.reader, [tmp_path]))
    carrying = [s for _, spans in got for s in spans
                if any(kv.key == EXPERT_TOKENS for kv in s.attributes)]
    assert len(carrying) == 1 and carrying[0].name == "actor_update"
    assert tally.experts == 1
