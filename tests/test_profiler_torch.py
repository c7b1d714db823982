"""torch.profiler's Chrome traces as verl writes them, read into rank traces
(rl_insight/profiler/torch.py). The files are made here in the layout measured on torch
2.13's own output (tests/test_profiler_import_e2e.py reads verl's real files):

- the header: ``schemaVersion``, ``deviceProperties``, ``distributedInfo`` (``backend``,
  ``rank``, ``world_size``), ``host_name``, ``displayTimeUnit``, ``baseTimeNanoseconds``
  before ``traceEvents``, ``traceName`` after it; torch's own spacing (a comma on the
  line after a value);
- events: ``ph: X`` with ``cat`` ``user_annotation`` (``record_function``, gloo's
  ``gloo:all_reduce`` on its own thread), ``cpu_op`` (``c10d::allreduce_``), ``kernel``
  and ``gpu_memcpy`` with ``args.device``/``args.stream``; ``ts`` µs from
  ``baseTimeNanoseconds``;
- names: verl 0.9.1's ``build_trace_basename`` (verl/utils/profiler/torch_profile.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_insight.profiler import torch as reader
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, BadFile
from tests.conftest import examples

BASE_NS = 1_790_857_026_000_000_000  # torch's baseTimeNanoseconds (a second boundary)
T0_US = 5_761_257_916_409.179  # a ts as torch wrote it, µs from the base
NAME = "actor_train_step3_rank2-of-3_pid4545_20261207043803915.json.gz"


def x(name: str, cat: str, at_ms: float, dur_ms: float, tid: int = 10, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 4545, "tid": tid,
            "ts": round(T0_US + at_ms * 1000, 3), "dur": dur_ms * 1000, "args": args}


def header(rank: int | None = 2, world: int = 3, base: int | None = BASE_NS) -> dict:
    out: dict = {"schemaVersion": 1, "deviceProperties": []}
    if rank is not None:
        out["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world,
                                  "pg_count": 1}
    out["host_name"] = "n-0"
    out["displayTimeUnit"] = "ms"
    if base is not None:
        out["baseTimeNanoseconds"] = base
    return out


def torch_text(head: dict, events: list, after: dict | None = None) -> str:
    """The document with torch's own spacing: each event a block, a value's comma on the
    next line."""
    def block(ev: dict) -> str:
        inner = ',\n    '.join(f'"{k}": {json.dumps(v)}' for k, v in ev.items())
        return "  {\n    " + inner + "\n  }"
    lines = ["{"] + [f'  "{k}": {json.dumps(v)},' for k, v in head.items()]
    lines.append('  "traceEvents": [\n' + ",\n".join(block(e) for e in events) + "\n  ]"
                 + ("," if after else ""))
    lines.append(",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in (after or {}).items()))
    return "\n".join(lines) + "\n}"


def write(tmp: Path, text: str, name: str = NAME, gz: bool = True) -> Path:
    path = tmp / (name if gz else name.removesuffix(".gz"))
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def one(path: Path, **kw):
    (trace,) = list(reader.read(path, **kw))
    return trace


def ns(at_ms: float) -> int:
    return BASE_NS + round((T0_US + at_ms * 1000) * 1000)


STAGE = [x("ProfilerStep#0", "user_annotation", 0, 500),
         x("actor_update", "user_annotation", 10, 400),
         x("FullyShardedDataParallel.forward", "user_annotation", 20, 50),
         x("aten::mm", "cpu_op", 21, 5),
         x("c10d::allreduce_", "cpu_op", 100, 0.1),
         x("gloo:all_reduce", "user_annotation", 100.2, 30, tid=11),
         x("record_param_comms", "cpu_op", 100.05, 0.05),
         x("cudaLaunchKernel", "cuda_runtime", 22, 0.01)]
DEVICE = [x("ampere_sgemm_128x64_tn", "kernel", 30, 8, tid=7, device=5, stream=7),
          x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 101, 25, tid=20,
            device=5, stream=20),
          x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 12, 1, tid=7, device=5,
            stream=7)]


def test_verl_names_say_role_step_rank_world_and_pid():
    p = reader.parse_name
    assert p(NAME) == reader.FileName("actor", "train", 3, 2, 3, "4545")
    assert p("actor_train_step12_rank7-of-64_tp1-pp0-dp3_pid9_20261207043804354_part1"
             ".json.gz") == reader.FileName("actor", "train", 12, 7, 64, "9")
    # discrete mode: the stage is the role (sanitised: '_' became '-'), a window of
    # mini-batches as its suffix
    assert p("actor_actor-update_step4_rank0-of-3_pid31109_20261207045024068_mb0-3.json.gz"
             ) == reader.FileName("actor", "actor-update", 4, 0, 3, "31109")
    assert p("ref_step2_rank5_pid1_20261207045024068.json.gz").prefix == "ref"
    assert p("train_step1_rank0_pid1_20261207045024068.json").role == "train"
    bare = p("rank3-of-4_pid8_20261207045024068.json.gz")
    assert (bare.rank, bare.world, bare.step, bare.prefix, bare.role) == (3, 4, None, "", "")
    assert p("stamps_rank0.json").pid == "" and p("config.json") == reader.FileName()


def test_a_directory_holds_verl_s_files_and_torch_s_own_handler_s_not_other_json(tmp_path):
    for name in (NAME, "worker0.1733.pt.trace.json.gz", "stamps_rank0.json", "config.json",
                 "actor_train_step1_rank0-of-3_pid1_20261207045024068.json"):
        (tmp_path / name).write_text("{}")
    assert [f.name for f in reader.files(tmp_path)] == [
        "actor_train_step1_rank0-of-3_pid1_20261207045024068.json", NAME,
        "worker0.1733.pt.trace.json.gz"]
    assert list(reader.files(tmp_path / "config.json")) == [tmp_path / "config.json"]
    assert reader.step_of(tmp_path / NAME) == 3


def test_a_trace_in_wall_time_its_stages_kernels_and_collectives(tmp_path):
    t = one(write(tmp_path, torch_text(header(), STAGE + DEVICE, {"traceName": "/tmp/x"})))
    assert (t.rank, t.world_size, t.step, t.role, t.node, t.device) == \
        (2, 3, 3, "actor", "n-0", "5")
    assert [(e.name, e.start_ns) for e in t.ranges()] == [
        ("actor_update", ns(10)), ("FullyShardedDataParallel.forward", ns(20))]
    assert t.ranges()[0].end_ns == ns(410) and t.ranges()[0].lane == "thread 10"
    work = {(e.kind, e.name, e.lane) for e in t.device_work()}
    # NCCL's kernel is the collective: the CPU side's calls of it count no second time
    assert work == {(KERNEL, "ampere_sgemm_128x64_tn", "stream 7"),
                    (KERNEL, "Memcpy HtoD (Pageable -> Device)", "stream 7"),
                    (COLLECTIVE, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "stream 20")}
    assert [e.start_ns for e in t.events] == sorted(e.start_ns for e in t.events)


@pytest.mark.parametrize("drop, kept", [((), "gloo:all_reduce"),
                                        (("gloo:all_reduce",), "c10d::allreduce_"),
                                        (("gloo:all_reduce", "c10d::allreduce_"),
                                         "record_param_comms")])
def test_without_device_collectives_one_cpu_family_counts(tmp_path, drop, kept):
    t = one(write(tmp_path, torch_text(header(), [e for e in STAGE if e["name"] not in drop])))
    assert [e.name for e in t.events if e.kind == COLLECTIVE] == [kept]


def test_the_header_after_the_events_and_plain_json_read_alike(tmp_path):
    head = header()
    first = one(write(tmp_path, torch_text(head, STAGE + DEVICE)))
    text = torch_text({"schemaVersion": 1}, STAGE + DEVICE,
                      {k: v for k, v in head.items() if k != "schemaVersion"})
    late = one(write(tmp_path, text, gz=False))
    assert late.events == first.events and (late.rank, late.node) == (2, "n-0")


def test_times_that_cannot_be_placed_are_refused_unix_times_kept(tmp_path):
    with pytest.raises(BadFile, match="baseTimeNanoseconds"):
        one(write(tmp_path, torch_text(header(base=None), STAGE)))
    unix = [dict(e, ts=1_790_000_000_000_000 + i) for i, e in enumerate(STAGE)]
    t = one(write(tmp_path, torch_text(header(base=None), unix)))
    assert t.ranges()[0].start_ns == 1_790_000_000_000_001_000


def test_the_rank_from_the_name_when_torch_wrote_none_never_in_an_upload(tmp_path):
    path = write(tmp_path, torch_text(header(rank=None), STAGE))
    assert one(path).rank == 2 and one(path).world_size == 3
    with pytest.raises(BadFile, match="distributedInfo.rank"):
        one(path, strict=True)
    anonymous = write(tmp_path, torch_text(header(rank=None), STAGE), name="trace.json.gz")
    with pytest.raises(BadFile, match="no rank"):
        one(anonymous)


def test_an_upload_names_its_step_where_its_name_tells_none(tmp_path):
    path = write(tmp_path, torch_text(header(), STAGE), name="upload.json.gz")
    assert one(path, step=7, strict=True).step == 7
    assert one(path, name=NAME, step=7, strict=True).step == 3  # the name's own


@pytest.mark.parametrize("damage, why", [
    (lambda b: gzip.compress(b)[:-40], "truncated or damaged gzip"),
    (lambda b: b"this is no trace", "not a whole JSON document"),
    (lambda b: b'{"traceEvents": {"a": 1}, "distributedInfo": {"rank": 0}}', "not an array"),
    (lambda b: b'{"traceEvents": [1, 2]}', "not events"),
    (lambda b: b'{"distributedInfo": {"rank": -1}, "traceEvents": []}', "no integer"),
    (lambda b: b'{"distributedInfo": {"rank": true}, "traceEvents": []}', "no integer"),
    (lambda b: b'{"baseTimeNanoseconds": 1.5, "traceEvents": []}', "no integer"),
    (lambda b: b'[{"ph": "X"}]', "baseTimeNanoseconds"),
])
def test_a_damaged_file_is_refused_saying_why(tmp_path, damage, why):
    path = tmp_path / NAME
    path.write_bytes(damage(torch_text(header(), STAGE).encode()))
    with pytest.raises(BadFile, match=why):
        one(path)


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=False), st.text(max_size=5))
EVENTS = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "M", "i", "B"]),
     "cat": st.sampled_from(["user_annotation", "cpu_op", "kernel", "gpu_memcpy", "Trace"]),
     "name": st.one_of(st.sampled_from(["actor_update", "gloo:all_reduce", "c10d::x",
                                        "nccl_k", "ProfilerStep#1"]), VALUES),
     "ts": st.one_of(st.floats(0, 1e13), VALUES), "dur": st.one_of(st.floats(0, 1e9), VALUES),
     "tid": VALUES, "args": st.one_of(st.dictionaries(st.sampled_from(["device", "stream"]),
                                                      VALUES), VALUES)})


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(EVENTS, max_size=12))
def test_any_events_are_read_or_the_file_refused_never_an_error(tmp_path, events):
    """Whatever torch-like events hold, a file is read (the readable ones kept, each in
    wall time, ordered) or refused as a BadFile; the reader never fails otherwise."""
    path = tmp_path / NAME
    path.write_text(json.dumps({**header(), "traceEvents": events}))
    try:
        t = one(path)
    except BadFile:
        return
    readable = [e for e in events if e["ph"] == "X" and isinstance(e["name"], str)
                and e["cat"] != "Trace"
                and not (e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#"))
                and all(isinstance(e[k], (int, float)) and not isinstance(e[k], bool)
                        and 0 <= e[k] < reader.MAX_US for k in ("ts", "dur"))
                and (e["cat"] != "cpu_op" or e["name"].startswith("c10d::"))]
    stages = [e for e in readable if e["cat"] == "user_annotation"
              and not e["name"].startswith(reader.BACKENDS)]
    assert len(t.events) <= len(readable)
    assert len(t.ranges()) == len(stages)
    assert all(BASE_NS <= e.start_ns <= e.end_ns for e in t.events)
    assert [e.start_ns for e in t.events] == sorted(e.start_ns for e in t.events)
    assert {e.kind for e in t.events} <= {RANGE, KERNEL, COLLECTIVE}
