"""verl's Nsight Systems reports as `nsys export --type jsonlines` writes them, read into
rank traces (rl_insight/profiler/nvtx.py). The files are made here from the documented
format, each field's source beside it:

- the layout: NVIDIA Nsight Systems Analysis Guide, "JSON Lines": one object per line,
  each a row of the SQLite export, ``table`` naming its table;
- the tables and columns: Nsight Systems' SQLite schema reference (StringIds,
  TARGET_INFO_SESSION_START_TIME.utcEpochNs, TARGET_INFO_SYSTEM_ENV, NVTX_EVENTS with
  eventType 59/60 ranges and 75 domain names, CUPTI_ACTIVITY_KIND_KERNEL with
  shortName as a string id, CUPTI_ACTIVITY_KIND_MEMCPY), globalTid's packing ("Serialized
  process and thread identifiers": the pid in bits 24-47);
- the rank: META_DATA_CAPTURE's ``PROCESS_<n>:ENVIRONMENT_VARIABLE`` row ``RANK="0"``
  (upstream RL-Insight's sample worker_process_70000.1.jsonl), which verl's worker group
  sets (verl/single_controller/ray/base.py: RANK, WORLD_SIZE);
- the file names: verl's nvtx_profile.py (Ray's ``worker_process_<pid>.<rid>``,
  relocated as ``<prefix>_<hostname>_worker_process_...``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rl_insight.profiler import nvtx
from rl_insight.profiler.model import COLLECTIVE, KERNEL, BadFile

SESSION = 1_780_000_000_000_000_000  # unix ns at the session's start
PID = 70000


def tid(pid: int, thread: int) -> int:
    return (pid << 24) | thread  # globalTid: the pid in bits 24-47, the thread below


def report(rank: int | None = 0, session: int | None = SESSION, slow: float = 0.0,
           extra: list[dict] | None = None) -> list[dict]:
    """One worker's export: an actor_update range of 1 s (+ slow) holding two compute
    kernels, an NCCL all-reduce overlapping the second, and a copy; NCCL's own API range
    in its domain."""
    rows: list[dict] = [
        {"table": "StringIds", "id": 1, "value": "actor_update"},  # verl's role as the range
        {"table": "StringIds", "id": 2, "value": "sm90_xmma_gemm_bf16"},
        {"table": "StringIds", "id": 3, "value": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"},
        {"table": "StringIds", "id": 4, "value": "NCCL"},
        {"table": "StringIds", "id": 5, "value": "ncclAllReduce"},
        {"table": "TARGET_INFO_SYSTEM_ENV", "name": "Hostname", "value": "gpu-node-3"},
        {"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE",
         "value": 'CUDA_VISIBLE_DEVICES="5,6"'},
        {"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE",
         "value": 'WORLD_SIZE="4"'},
        {"table": "NVTX_EVENTS", "eventType": 75, "domainId": 7, "textId": 4,
         "globalTid": tid(PID, 1), "start": 0},  # NCCL's domain
        {"table": "NVTX_EVENTS", "eventType": 60, "start": 100_000_000,
         "end": int((1.1 + slow) * 1e9), "textId": 1, "globalTid": tid(PID, 1),
         "domainId": 0, "rangeId": 1, "color": 255},
        {"table": "NVTX_EVENTS", "eventType": 59, "start": 500_000_000, "end": 510_000_000,
         "textId": 5, "globalTid": tid(PID, 1), "domainId": 7},  # NCCL's API range
        {"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 200_000_000, "end": 400_000_000,
         "shortName": 2, "demangledName": 2, "streamId": 7, "deviceId": 0,
         "globalPid": tid(PID, 0)},
        {"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 500_000_000,
         "end": int((0.9 + slow) * 1e9), "shortName": 2, "streamId": 7, "deviceId": 0},
        {"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 600_000_000, "end": 1_000_000_000,
         "shortName": 3, "streamId": 13, "deviceId": 0},
        {"table": "CUPTI_ACTIVITY_KIND_MEMCPY", "start": 1_000_000_000,
         "end": 1_050_000_000, "streamId": 7, "copyKind": 1, "bytes": 4096},
        {"table": "OSRT_API", "start": 1, "end": 2, "globalTid": tid(PID, 1)},  # not read
    ]
    if rank is not None:
        rows.append({"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE",
                     "value": f'RANK="{rank}"'})
    if session is not None:
        rows.append({"table": "TARGET_INFO_SESSION_START_TIME", "utcEpochNs": session,
                     "utcTime": "2026-05-28T00:00:00Z"})
    return rows + (extra or [])


def write(path: Path, rows: list[dict], packed: bool = False) -> Path:
    text = "\n".join(json.dumps(r, separators=(",", ":"), sort_keys=True) for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()) if packed else text.encode())
    return path


def test_a_worker_s_report_is_its_rank_s_ranges_kernels_and_collectives_in_wall_time(tmp_path):
    f = write(tmp_path / "actor_gpu-node-3_worker_process_70000.1.jsonl", report(rank=2))
    [t] = nvtx.read(f)
    assert (t.rank, t.world_size, t.role, t.node, t.device, t.step) == \
        (2, 4, "actor", "gpu-node-3", "5", None)
    [r] = t.ranges()  # NCCL's own API range (its domain) is left out
    assert (r.name, r.start_ns, r.end_ns) == ("actor_update", SESSION + 100_000_000,
                                             SESSION + 1_100_000_000)
    kinds = sorted((e.kind, e.name, e.lane) for e in t.device_work())
    assert kinds == [(COLLECTIVE, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "stream 13"),
                     (KERNEL, "memcpy", "stream 7"),
                     (KERNEL, "sm90_xmma_gemm_bf16", "stream 7"),
                     (KERNEL, "sm90_xmma_gemm_bf16", "stream 7")]
    assert min(e.start_ns for e in t.events) == SESSION + 100_000_000


def test_a_gzipped_export_and_rows_in_any_order_read_the_same(tmp_path):
    rows = report(rank=1)
    plain = nvtx.read(write(tmp_path / "worker_process_1.1.jsonl", rows))
    packed = nvtx.read(write(tmp_path / "worker_process_2.1.jsonl.gz", rows[::-1], True))
    [a], [b] = plain, packed
    assert sorted(a.events) == sorted(b.events) and a.rank == b.rank == 1


def test_a_report_without_a_rank_is_named_and_skipped_unless_the_user_gives_it(tmp_path):
    f = write(tmp_path / "gpu-node-3_worker_process_70000.2.jsonl", report(rank=None))
    with pytest.raises(nvtx.UnknownRank, match=r"no rank.*70000 on gpu-node-3.*--rank-from"):
        list(nvtx.read(f))
    [t] = nvtx.read(f, ranks={"gpu-node-3:70000": 6})
    assert t.rank == 6
    [t] = nvtx.read(f, ranks={f.name: 7})
    assert t.rank == 7


@pytest.mark.parametrize("rows, why", [
    (report(session=None), "no session start"),
    ([{"table": "StringIds", "id": 1, "value": "x"},
      {"table": "TARGET_INFO_SESSION_START_TIME", "utcEpochNs": SESSION}],
     "no NVTX range and no CUDA kernel"),
    (report(extra=[{"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 5}]),
     "line .*CUPTI_ACTIVITY_KIND_KERNEL row the schema does not allow"),
])
def test_a_damaged_or_unplaceable_report_says_why(tmp_path, rows, why):
    with pytest.raises(BadFile, match=why):
        list(nvtx.read(write(tmp_path / "worker_process_9.1.jsonl", rows)))


def test_a_cut_export_is_named_with_its_line_among_good_ones(tmp_path):
    good = [write(tmp_path / f"worker_process_{p}.1.jsonl", report(rank=r))
            for r, p in ((0, 10), (1, 11))]
    cut = tmp_path / "worker_process_12.1.jsonl"
    cut.write_text("\n".join(json.dumps(r) for r in report(rank=2))[:-25])
    (tmp_path / "notes.txt").write_text("not a report")
    found = list(nvtx.files(tmp_path))
    assert found == sorted([*good, cut])  # the reports only, in name order
    ranks, bad = [], []
    for f in found:
        try:
            ranks += [t.rank for t in nvtx.read(f)]
        except BadFile as e:
            bad.append(str(e))
    assert ranks == [0, 1]
    last = len(report(rank=2))  # the line the cut fell in
    assert len(bad) == 1 and str(cut) in bad[0] and f"line {last} is no JSON" in bad[0]
