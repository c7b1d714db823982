"""What the culprit rank costs (issue 49, point 6), each figure against a reference in the
same run:

- the server's CPU per step for the attribution at 1,000 ranks (4 phases, each rank's
  phases carrying their Flight Recorder summary), against the rest of that step's row;
- a training step with torch's Flight Recorder on and off (a gloo world of one, a phase of
  32 all-reduces in a ``trace_state`` block, as a rank's ``update_actor``): the caller's
  time per step, and the buffer thread's reading of the recorder per phase span;
- what a capture costs the profiled rank: a process doing fixed work, its rate while
  ``py-spy record --nonblocking`` samples it (the lane actor's capture) against its rate
  alone.

    .venv/bin/python -m bench.culprit [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import textwrap
import time

from bench.common import save
from rl_insight.anatomy import ranks as attribution
from rl_insight.anatomy.rows import step_row

S = 1_000_000_000
PHASES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update",
          "update_weights")


def lanes_at(n_ranks: int, collectives: int, seed: int = 0) -> dict[str, list[tuple]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple]] = {}
    at = 0.0
    for phase in PHASES:
        end = at + 10.0
        for r in range(n_ranks):
            ev = {attribution.COLLECTIVES: collectives,
                  attribution.MEAN_TO_END: 5.0 * rng.lognormvariate(0, 0.01),
                  attribution.FIRST_TO_END: 9.5 * rng.lognormvariate(0, 0.01),
                  attribution.NODE: f"node-{r // 8}", attribution.GPU: str(r % 8)}
            out.setdefault(f"rank_{r}", []).append((phase, int(at * S), int(end * S), ev))
        at = end + 1.0
    return out


def attribution_cost(n_ranks: int = 1000, rounds: int = 5) -> dict:
    lanes = lanes_at(n_ranks, 32)
    plain = {lane: [iv[:3] for iv in ivs] for lane, ivs in lanes.items()}
    window = (0, int(50 * S))
    with_, without = [], []
    for _ in range(rounds):
        t0 = time.process_time()
        row = step_row(1, *window, lanes)
        with_.append(time.process_time() - t0)
        t0 = time.process_time()
        got = attribution.attribute(attribution.from_lanes(plain, *window))
        without.append(time.process_time() - t0)
    t0 = time.process_time()
    for _ in range(rounds):
        attribution.attribute(attribution.from_lanes(lanes, *window))
    alone = (time.process_time() - t0) / rounds
    row_s = statistics.median(with_)
    return {"ranks": n_ranks, "phases": len(PHASES), "row_cpu_ms": row_s * 1e3,
            "attribution_cpu_ms": alone * 1e3,
            "attribution_share_of_row": alone / row_s if row_s else None,
            "boundaries_only_cpu_ms": statistics.median(without) * 1e3,
            "culprit": row.culprit, "ranks_kept": len(row.ranks), "evidence": got.evidence}


RANK_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    import torch, torch.distributed as dist
    import rl_insight
    from rl_insight.client import rank_evidence
    from rl_insight.wire.events import Span
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    dist.init_process_group("gloo", rank=0, world_size=1)
    steps, out = int(sys.argv[2]), {}
    t = torch.ones(1024)
    for _ in range(3):  # warm
        dist.all_reduce(t)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            for _ in range(32):
                dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    out["step_s"] = sorted(times)[len(times) // 2]
    now = time.time_ns()
    span = Span("actor_update", now - 10 * 10**9, now, "rank_0", (), ends_state=True)
    enr = []
    for _ in range(20):
        rank_evidence._evidence = None  # a fresh dump each time: the buffer's worst case
        t0 = time.perf_counter()
        got = rank_evidence.enrich([span])
        enr.append(time.perf_counter() - t0)
    out["enrich_s"] = sorted(enr)[len(enr) // 2]
    out["attributes"] = dict(got[0].attributes)
    print(json.dumps(out), flush=True)
    dist.destroy_process_group()
''')


def recorder_cost(steps: int = 200, rounds: int = 3) -> dict:
    """A rank's step with the recorder on (2,000 entries) and off, in processes of their
    own (torch reads TORCH_FR_BUFFER_SIZE when the group starts), alternated ``rounds``
    times; the medians."""
    runs = [_recorder_once(steps) for _ in range(rounds)]
    return {k: statistics.median(r[k] for r in runs) if isinstance(runs[0][k], float)
            else runs[0][k] for k in runs[0]} | {"rounds": rounds}


def _recorder_once(steps: int) -> dict:
    out = {}
    for name, size in (("off", "0"), ("on", "2000")):
        env = {**os.environ, "TORCH_FR_BUFFER_SIZE": size}
        env.pop("RL_INSIGHT_SERVER_URL", None)
        with socket.socket() as sock:  # a free port for the group's store
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
        got = subprocess.run([sys.executable, "-c", RANK_SCRIPT, port, str(steps)], env=env,
                             capture_output=True, text=True, timeout=600)
        if got.returncode != 0:
            raise RuntimeError(got.stderr[-2000:])
        out[name] = json.loads(got.stdout.strip().splitlines()[-1])
    on, off = out["on"], out["off"]
    return {"step_ms_recorder_off": off["step_s"] * 1e3, "step_ms_recorder_on":
            on["step_s"] * 1e3, "step_on_over_off": on["step_s"] / off["step_s"],
            "buffer_thread_ms_per_phase_span_recorder_on": on["enrich_s"] * 1e3,
            "buffer_thread_ms_per_phase_span_recorder_off": off["enrich_s"] * 1e3,
            "collectives_seen": on["attributes"].get(attribution.COLLECTIVES)}


WORK_SCRIPT = textwrap.dedent('''
    import sys, time
    def slow_backward(n):
        x = 0
        for i in range(n):
            x += i * i
        return x
    end, done = time.perf_counter() + float(sys.argv[1]), 0
    print("ready", flush=True)
    while time.perf_counter() < end:
        slow_backward(20000)
        done += 1
    print(done, flush=True)
''')


def capture_cost(seconds: float = 6.0, rounds: int = 3) -> dict:
    """Units of work a second of a busy process alone, and while py-spy samples it."""
    from rl_insight.collector import profiling

    exe = profiling.py_spy()
    alone, sampled, top = [], [], None
    for _ in range(rounds):
        for kind in ("alone", "sampled"):
            p = subprocess.Popen([sys.executable, "-c", WORK_SCRIPT, str(seconds)],
                                 stdout=subprocess.PIPE, text=True)
            p.stdout.readline()
            if kind == "sampled":
                data = profiling.record(p.pid, seconds - 1.0)
                top = profiling.top_frames(data)[:3]
            done = int(p.stdout.readline())
            p.wait()
            (alone if kind == "alone" else sampled).append(done / seconds)
    a, s = statistics.median(alone), statistics.median(sampled)
    return {"py_spy": exe, "work_per_s_alone": a, "work_per_s_sampled": s,
            "sampled_over_alone": s / a, "cost_share": 1 - s / a, "top_frames": top}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller, not saved")
    args = ap.parse_args()
    out = {"attribution": attribution_cost(100 if args.quick else 1000),
           "recorder": recorder_cost(20 if args.quick else 200),
           "capture": capture_cost(3.0 if args.quick else 6.0, 1 if args.quick else 3)}
    print(json.dumps(out, indent=2))
    if not args.quick:
        print(save("culprit", out))


if __name__ == "__main__":
    main()
