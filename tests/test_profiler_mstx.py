"""Ascend PyTorch Profiler output of verl's NPU workers read into rank traces
(rl_insight/profiler/mstx.py). The directories are made here from the documented
layout, each field's source beside it:

- ``*_ascend_pt/profiler_info_<rank>.json``: rank_id, start_info.start_monotonic,
  end_info.collectionTimeEnd / MonotonicTimeEnd (upstream RL-Insight's sample data,
  data/mstx_data/.../profiler_info_0.json, and docs/data/data_specification.md);
- ``profiler_metadata.json``: parallel_group_info's default_group (upstream's sample,
  data/recipe/memory_data/.../profiler_metadata.json), ``role`` (upstream's mstx_parser);
- ``ASCEND_PROFILER_OUTPUT/trace_view.json``: a Chrome-trace array, processes named by
  ``process_name`` metadata, ts unix µs as a decimal string, dur µs (the CANN profiling
  guide's trace_view.json; upstream's sample); the layers as msprof's timeline names them
  (Ascend/msprof trace_view_header_constant.py: MsprofTx, Ascend Hardware, Overlap
  Analysis; the guide's HCCL layer with its "Group * Communication" threads);
- the directory name ``<hostname>_<pid>_<timestamp>_ascend_pt`` (torch_npu's
  tensorboard_trace_handler) under verl's ``<save_path>/[<step>/]<role>/``
  (verl/utils/profiler/mstx_profile.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_insight.profiler import mstx
from rl_insight.profiler.model import COLLECTIVE, KERNEL, BadFile

T0_US = 1_780_000_000_000_000  # unix µs of the collection's start


def us(offset_s: float, base: int = T0_US) -> str:
    """A trace_view timestamp: unix µs as a string with three decimals."""
    return f"{base + round(offset_s * 1e6)}.250"


def meta(pid: int, tid: int, kind: str, **args) -> dict:
    return {"name": kind, "pid": pid, "tid": tid, "ph": "M", "args": args}


BASE = [T0_US]  # the clock trace_view() stamps with (a test sets another)


def x(pid: int, tid: int, name: str, at: float, dur_s: float, **args) -> dict:
    return {"name": name, "pid": pid, "tid": tid, "ts": us(at, BASE[0]), "dur": dur_s * 1e6,
            "ph": "X", "args": args}


def shifted(base_us: int) -> list:
    """trace_view() stamped on another clock (µs)."""
    BASE[0] = base_us
    try:
        return trace_view()
    finally:
        BASE[0] = T0_US


def trace_view(ranges: bool = True, hccl: bool = True, names_first: bool = True) -> list:
    """An actor_update of 1 s: two AI-core tasks on stream 2, an all-reduce the HCCL
    layer names (and its device task on stream 5), the profiler's overlap layer."""
    hw, comm, tx, ov, py = 100, 200, 300, 400, 500
    names = [meta(hw, 0, "process_name", name="Ascend Hardware"),
             meta(hw, 0, "process_labels", labels="NPU 3"),
             meta(hw, 2, "thread_name", name="Stream 2"),
             meta(comm, 0, "process_name", name="HCCL"),
             meta(comm, 1, "thread_name", name="Group 1234 Communication"),
             meta(comm, 2, "thread_name", name="Plane 0"),
             meta(tx, 0, "process_name", name="MsprofTx"),
             meta(ov, 0, "process_name", name="Overlap Analysis"),
             meta(py, 0, "process_name", name="Python")]
    events = [x(hw, 2, "MatMulV2", 0.1, 0.3, **{"Task Type": "AI_CORE"}),
              x(hw, 2, "Add", 0.5, 0.1), x(hw, 5, "hcom_allReduce__360_0_1", 0.45, 0.35),
              x(ov, 0, "Computing", 0.1, 0.5), x(py, 1, "aten::mm", 0.1, 0.01)]
    if hccl:
        events += [x(comm, 1, "hcom_allReduce__360_0_1", 0.45, 0.35),
                   x(comm, 2, "Memcpy", 0.46, 0.01)]
    if ranges:
        events.append(x(tx, 1, "actor_update", 0.05, 1.0, Category="0", Payload_type="0"))
    return names + events if names_first else events + names


def profile(root: Path, rank: int = 2, *, role: str = "actor_update", step: str = "step_3",
            events: list | None = None, info: dict | None = None) -> Path:
    folder = root / step / role / f"gpu-node-3_{4242 + rank}_20260528000000{rank:03d}_ascend_pt"
    (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    mono_start = 5_000_000_000_000  # the monotonic clock at the start, ns
    (folder / f"profiler_info_{rank}.json").write_text(json.dumps(info or {
        "config": {"experimental_config": {"_msprof_tx": True, "_export_type": ["text"]}},
        "start_info": {"syscnt_enable": True, "freq": 100, "start_monotonic": mono_start},
        "end_info": {"collectionTimeEnd": T0_US * 1000 + 2_000_000_000,
                     "MonotonicTimeEnd": mono_start + 2_000_000_000},
        "rank_id": str(rank)}))
    (folder / "profiler_metadata.json").write_text(json.dumps({
        "parallel_group_info": {"group_name_0": {"group_name": "default_group",
                                                 "group_rank": rank,
                                                 "global_ranks": list(range(8))}}}))
    (folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text(
        json.dumps(trace_view() if events is None else events, indent=1))
    return folder


def test_a_profile_is_its_rank_s_mstx_ranges_tasks_and_hccl_operators_in_wall_time(tmp_path):
    [t] = mstx.read(profile(tmp_path))
    assert (t.rank, t.world_size, t.role, t.step, t.node, t.device) == \
        (2, 8, "actor_update", 3, "gpu-node-3", "3")
    assert mstx.step_of(t.source) == 3 and mstx.step_of(profile(tmp_path, step="x")) is None
    [r] = t.ranges()
    assert (r.name, r.start_ns, r.end_ns) == ("actor_update", T0_US * 1000 + 50_000_250,
                                             T0_US * 1000 + 1_050_000_250)
    got = sorted((e.kind, e.name, e.lane) for e in t.device_work())
    assert got == [(COLLECTIVE, "hcom_allReduce__360_0_1", "Group 1234 Communication"),
                   (KERNEL, "Add", "Stream 2"), (KERNEL, "MatMulV2", "Stream 2")]


def test_the_same_profile_with_its_names_last_and_without_hccl_layer_reads_alike(tmp_path):
    [late] = mstx.read(profile(tmp_path / "a", events=trace_view(names_first=False)))
    [plain] = mstx.read(profile(tmp_path / "b"))
    assert sorted(late.events) == sorted(plain.events)
    [bare] = mstx.read(profile(tmp_path / "c", events=trace_view(hccl=False)))
    assert [(e.kind, e.name) for e in bare.events if e.kind == COLLECTIVE] == \
        [(COLLECTIVE, "hcom_allReduce__360_0_1")]  # the device's own task, then


def test_without_mstx_ranges_the_role_spans_the_device_work(tmp_path):
    [t] = mstx.read(profile(tmp_path, role="ref_compute_log_prob",
                            events=trace_view(ranges=False)))
    [r] = t.ranges()
    assert (r.name, r.start_ns, r.end_ns) == ("ref_compute_log_prob",
                                             T0_US * 1000 + 100_000_250,
                                             T0_US * 1000 + 800_000_250)


def test_times_on_the_monotonic_clock_are_moved_onto_the_wall_clock(tmp_path):
    wall = trace_view()
    mono = shifted(5_000_000_000)  # the monotonic clock's 5e12 ns at the start, in µs
    assert mono != wall
    [a] = mstx.read(profile(tmp_path / "a", events=wall))
    [b] = mstx.read(profile(tmp_path / "b", events=mono))
    assert sorted(a.events) == sorted(b.events)


def test_damaged_profiles_among_good_ones_are_named_with_why(tmp_path):
    good = profile(tmp_path, rank=0)
    cut = profile(tmp_path, rank=1)
    tv = cut / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    tv.write_text(tv.read_text()[:-200])
    unparsed = profile(tmp_path, rank=2)
    (unparsed / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    elsewhere = profile(tmp_path, rank=3, events=shifted(T0_US - 86_400_000_000))  # a day off
    norank = profile(tmp_path, rank=4, info={"rank_id": "-1"})
    found = list(mstx.files(tmp_path))
    assert found == sorted([good, cut, unparsed, elsewhere, norank])
    read, why = [], {}
    for folder in found:
        try:
            read += [t.rank for t in mstx.read(folder)]
        except BadFile as e:
            why[folder] = str(e)
    assert read == [0]
    assert "no JSON value" in why[cut] and str(cut) in why[cut]
    assert "was not parsed" in why[unparsed] and "analyse(" in why[unparsed]
    assert "outside its collection's window" in why[elsewhere]
    assert "no rank" in why[norank]


def test_a_trace_view_json_path_reads_its_profile(tmp_path):
    folder = profile(tmp_path)
    [t] = mstx.read(folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert t.rank == 2 and t.source == str(folder)
    with pytest.raises(BadFile, match="no profiler_info"):
        list(mstx.read(tmp_path / "nothing_1_2_ascend_pt"))
