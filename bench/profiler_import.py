"""What importing verl's torch-profiler traces costs (issue 58, point 4): 1,000 ranks'
files of one step, in verl's names and torch's layout, through ``rl-insight import``'s
importer (rl_insight/profiler/importer.py) into a real server, time and peak memory;
and one rank's file at the size a large model's step writes, read alone, against the
bytes it holds.

The files are made as torch writes them (rl_insight/profiler/torch.py's docstring: the
header, ``baseTimeNanoseconds``, ``ph: X`` events in torch's spacing); per kernel the
events a CUDA trace holds per launched kernel (the ``cpu_op`` that launched it, its
``cudaLaunchKernel``, the kernel, the two flow events tying them), NCCL's all-reduce
kernels per micro-batch, rank 7 computing longer in ``actor_update``. One step's events
are compressed once and each rank's file is its own header (its rank) followed by
them, as a second gzip member (Python's gzip reads both as one stream: the reading cost
is a torch file's; the making cost is not the bench's).

    .venv/bin/python -m bench.profiler_import [--quick] [--ranks N] [--kernels K]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import save

S = 1_000_000_000
BASE_NS = 1_790_857_026_000_000_000
SLOW_RANK = 7
MICRO = 4


def _ev(fields: dict) -> str:
    """An event in torch's own spacing (a comma on the line after a value)."""
    inner = ',\n    '.join(f'"{k}": {json.dumps(v)}' for k, v in fields.items())
    return "  {\n    " + inner + "\n  }"


def step_events(kernels: int, slow: bool, lag_ms: float = 25.0) -> list[str]:
    """One step's events: three stages, ``kernels`` kernels spread over them, each with
    its op, launch and flow events; an NCCL all-reduce after each micro-batch of the
    update, which the straggler (``slow``) reaches ``lag_ms`` later and the others wait
    in for as long: every rank's update ends together."""
    out: list[str] = []
    t = 1000.0  # µs from the base
    ext = 0
    stages = (("ref_compute_log_prob", 0.2), ("actor_compute_log_prob", 0.2),
              ("actor_update", 0.6))
    for stage, share in stages:
        n = int(kernels * share)
        start = t
        micro = MICRO if stage == "actor_update" else 1
        for m in range(micro):
            for _ in range(n // micro):
                ext += 1
                out.append(_ev({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                                "tid": 1, "ts": round(t, 3), "dur": 12.5, "args": {
                                    "External id": ext, "Record function id": 0,
                                    "Sequence number": ext, "Fwd thread id": 0,
                                    "Ev Idx": ext}}))
                out.append(_ev({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                "pid": 1, "tid": 1, "ts": round(t + 2, 3), "dur": 4.1,
                                "args": {"External id": ext, "cbid": 211, "correlation": ext}}))
                out.append(_ev({"ph": "s", "id": ext, "pid": 1, "tid": 1,
                                "ts": round(t + 2, 3), "cat": "ac2g", "name": "ac2g"}))
                out.append(_ev({"ph": "X", "cat": "kernel",
                                "name": "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_"
                                        "64x3_tn", "pid": 0, "tid": 7, "ts": round(t + 8, 3),
                                "dur": 30.0, "args": {
                                    "queued": 0, "device": 0, "context": 1, "stream": 7,
                                    "correlation": ext, "registers per thread": 232,
                                    "shared memory": 98304, "blocks per SM": 1.2,
                                    "warps per SM": 4.8, "grid": [108, 4, 1],
                                    "block": [128, 1, 1],
                                    "est. achieved occupancy %": 6}}))
                out.append(_ev({"ph": "f", "id": ext, "pid": 0, "tid": 7,
                                "ts": round(t + 8, 3), "cat": "ac2g", "name": "ac2g", "bp": "e"}))
                t += 40.0
            if stage == "actor_update":
                t += lag_ms * 1000 if slow else 0.0
                dur = 500.0 + (0.0 if slow else lag_ms * 1000)
                out.append(_ev({"ph": "X", "cat": "kernel",
                                "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0,
                                "tid": 20, "ts": round(t, 3), "dur": dur, "args": {
                                    "device": 0, "stream": 20, "correlation": -m}}))
                t += dur
        out.append(_ev({"ph": "X", "cat": "user_annotation", "name": stage, "pid": 1,
                        "tid": 1, "ts": round(start, 3), "dur": round(t - start, 3),
                        "args": {"External id": 0}}))
    return out


def header(rank: int, world: int) -> str:
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "host_name": f"node-{rank // 8}", "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS}
    return "{\n" + "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in head.items()) + \
        '  "traceEvents": [\n'


def make(out: Path, ranks: int, kernels: int) -> int:
    """``ranks`` files of step 3; their bytes as the importer reads them (uncompressed)."""
    out.mkdir(parents=True, exist_ok=True)
    bodies = {}
    raw = 0
    for slow in (False, True):
        text = ",\n".join(step_events(kernels, slow)) + \
            '\n  ],\n  "traceName": "/tmp/x.json"\n}\n'
        bodies[slow] = gzip.compress(text.encode(), 1)
        raw = max(raw, len(text))
    total = 0
    for r in range(ranks):
        name = f"actor_train_step3_rank{r}-of-{ranks}_pid{1000 + r}_20261207045024068.json.gz"
        h = header(r, ranks).encode()
        (out / name).write_bytes(gzip.compress(h, 1) + bodies[r == SLOW_RANK])
        total += len(h) + raw
    return total


class Peak:
    """The process's resident memory, sampled every 20 ms (ru_maxrss is the life-long
    peak: the reading's own peak is taken against its start)."""

    def __init__(self) -> None:
        self.peak = self.start = _rss()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def done(self) -> float:
        self.stop.set()
        self.thread.join()
        return max(self.peak, _rss()) / 2**20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_file(tmp: Path, kernels: int) -> dict:
    """One rank's file of a large step, read alone: time, MB/s and peak memory."""
    from rl_insight.profiler import torch as reader

    folder = tmp / "one"
    raw = make(folder, 1, kernels)
    (path,) = folder.iterdir()
    peak = Peak()
    t0 = time.perf_counter()
    (trace,) = list(reader.read(path))
    took = time.perf_counter() - t0
    mb = peak.done()
    out = {"kernels": kernels, "events_kept": len(trace.events), "json_mb": raw / 1e6,
           "gzip_mb": path.stat().st_size / 1e6, "read_s": took,
           "mb_per_s": raw / 1e6 / took, "peak_rss_mb": mb, "rss_before_mb": peak.start / 2**20}
    shutil.rmtree(folder)
    return out


def server(home: Path) -> tuple[str, list[str]]:
    """A real server on loopback (its own home and ports)."""
    from rl_insight.common import netaddr

    keys = ["server.port", "prometheus.port", "tempo.port", "tempo.grpc_port",
            "tempo.otlp_grpc_port", "tempo.otlp_http_port", "grafana.port",
            "alertmanager.port"]
    ports = netaddr.free_ports(len(keys))
    sets = ["--set", "host=127.0.0.1"]
    for k, p in zip(keys, ports, strict=True):
        sets += ["--set", f"{k}={p}"]
    env = {**os.environ, "RL_INSIGHT_HOME": str(home)}
    cli = [sys.executable, "-m", "rl_insight"]
    subprocess.run([*cli, "server", "start", "--detach", *sets], env=env, check=True,
                   capture_output=True, timeout=300)
    return f"http://127.0.0.1:{ports[0]}", [*cli, "server", "stop", *sets]


def many(tmp: Path, ranks: int, kernels: int) -> dict:
    """Every rank's file of one step through the importer into a real server."""
    import requests

    from rl_insight.profiler import importer

    folder = tmp / "ranks"
    t0 = time.perf_counter()
    raw = make(folder, ranks, kernels)
    made_s = time.perf_counter() - t0
    home = tmp / "home"
    url, stop = server(home)
    session = requests.Session()

    def send(payload: bytes) -> bool:
        r = session.post(url + "/v1/traces", data=payload, timeout=60,
                         headers={"Content-Type": "application/x-protobuf"})
        return r.ok

    runs = {}
    try:
        for jobs in (1, 2):
            experiment = f"profiled-{jobs}"
            peak = Peak()
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            job = importer.Import("torch", "bench", experiment, send)
            tally = job.run(importer.inputs(job.reader, [folder]), jobs=jobs)
            runs[jobs] = {"import_s": time.perf_counter() - t0,
                          "import_cpu_s_this_process": time.process_time() - cpu0,
                          "peak_rss_mb_this_process": peak.done(),
                          "rss_before_mb": peak.start / 2**20, "files_read": tally.read,
                          "spans_sent": tally.spans}
            session.post(url + "/api/v1/experiments/finish", timeout=10,
                         json={"project": "bench", "experiment_name": experiment})
        row = None
        for _ in range(100):
            got = session.get(url + "/api/v1/anatomy", timeout=10, params={
                "project": "bench", "experiment_name": "profiled-1"}).json().get("steps")
            if got:
                row = got[0]
                break
            time.sleep(0.2)
    finally:
        subprocess.run(stop, env={**os.environ, "RL_INSIGHT_HOME": str(home)},
                       capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
    culprit = (row or {}).get("culprit") or {}
    return {"ranks": ranks, "kernels_per_rank": kernels, "json_gb": raw / 1e9,
            "make_s": made_s, "jobs_1": runs.get(1), "jobs_2": runs.get(2),
            "mb_per_s_jobs_1": raw / 1e6 / runs[1]["import_s"],
            "mb_per_s_jobs_2": raw / 1e6 / runs[2]["import_s"],
            "culprit": culprit.get("rank"), "culprit_lead_s": culprit.get("lead_s"),
            "rank_count": (row or {}).get("rank_count")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 ranks, a smaller big file")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--kernels", type=int, default=5000, help="kernels per rank's file")
    ap.add_argument("--big-kernels", type=int, default=250_000,
                    help="kernels of the one large file read alone")
    args = ap.parse_args()
    if args.quick:
        args.ranks, args.kernels, args.big_kernels = 100, 2000, 20_000
    tmp = Path(tempfile.mkdtemp(prefix="rl-insight-bench-"))
    try:
        big = one_file(tmp, args.big_kernels)
        print(json.dumps(big, indent=2), flush=True)
        ranks = many(tmp, args.ranks, args.kernels)
        print(json.dumps(ranks, indent=2), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = save("profiler_import" + ("_quick" if args.quick else ""),
                {"one_file": big, "ranks": ranks,
                 "peak_rss_mb_life": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    print(f"saved {path}")


if __name__ == "__main__":
    main()
