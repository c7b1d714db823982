"""A slow rank outside Ray: trainer ranks as plain ``torch.distributed`` processes (the way
``torchrun`` or ``torch.multiprocessing.spawn`` starts them), one process group over gloo
(CPU) with torch's Flight Recorder on (``TORCH_FR_BUFFER_SIZE``), each phase annotated as
verl's ``DistProfiler`` annotates it (``trace_state(phase, state_lane_id="rank_<r>")``).

Every rank names the run itself (no hub outside Ray), and rank 0 logs the step number
when its step is done, while the other ranks go on into the next step and wait for it at
their first all-reduce, as a torchrun trainer does. From ``--slow-from`` one rank
busy-loops in ``slow_backward`` before each all-reduce of ``actor_update`` (a compute
straggler). Then::

    rl-insight report --project demo --experiment-name spawned --step 4
    rl-insight profile --project demo --experiment-name spawned --rank 2

name the rank and show its code: outside Ray the rank's own process takes the profile
(docs/anatomy.md, "The culprit rank").

    RL_INSIGHT_SERVER_URL=http://127.0.0.1:18080 VERL_RL_INSIGHT_ENABLE=1 \\
        TORCH_FR_BUFFER_SIZE=2000 python examples/straggler_ranks_spawn.py

With ``--stop-file`` it runs (at most ``--steps``) until that file exists: a test asks for
profiles while the straggler is slow and then lets it end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import rl_insight

MICROBATCHES = 4
PHASES = ("actor_compute_log_prob", "actor_update")  # then update_weights


def slow_backward(seconds: float) -> None:
    """The straggler's own code: a busy loop."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def rank_main(rank: int, world: int, port: int, args: dict) -> None:
    import torch
    import torch.distributed as dist

    if rank == args["self_sampled"]:  # this rank samples its own stacks when profiled
        os.environ["RL_INSIGHT_CLIENT_PROFILE_METHOD"] = "self"
    rl_insight.init(project=args["project"], experiment_name=args["experiment_name"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    grad, weights = torch.ones(1024), torch.zeros(1024)
    lane = f"rank_{rank}"
    stop = Path(args["stop_file"]) if args["stop_file"] else None
    # the ground truth: the seconds this rank spent in each phase's collectives, and in
    # the phase, by its own clock (a loaded host stretches a rank's sleeps and busy
    # loops: what it waited is what happened)
    truth = open(f"{args['truth_file']}.{rank}", "w") if args["truth_file"] else None

    def stamp(step: int, phase: str, waited: float, began: float,
              arrived: list[float]) -> None:
        # to_end_s: from each collective's call to the phase's end, summed, what the
        # Flight Recorder's arrivals give the anatomy; wait_s: what the calls lasted
        end = time.perf_counter()
        if truth:
            truth.write(json.dumps({"step": step, "phase": phase, "rank": rank,
                                    "wait_s": waited, "seconds": end - began,
                                    "to_end_s": sum(end - t for t in arrived)}) + "\n")
            truth.flush()

    for step in range(1, args["steps"] + 1):
        for phase in PHASES:
            waited, began, arrived = 0.0, time.perf_counter(), []
            with rl_insight.trace_state(phase, state_lane_id=lane):
                for _ in range(MICROBATCHES):
                    time.sleep(args["micro_s"])  # a micro-batch's forward and backward
                    if phase == "actor_update" and rank == args["slow_rank"] and \
                            step >= args["slow_from"]:
                        slow_backward(args["extra_s"])
                    arrived.append(t0 := time.perf_counter())
                    dist.all_reduce(grad)
                    waited += time.perf_counter() - t0
            stamp(step, phase, waited, began, arrived)
        began = time.perf_counter()
        with rl_insight.trace_state("update_weights", state_lane_id=lane):
            time.sleep(args["micro_s"] / 2)
            # rank 0's weights to all; their first element also says whether to stop
            weights[0] = float(rank == 0 and stop is not None and stop.exists())
            t0 = time.perf_counter()
            dist.broadcast(weights, 0)
            waited = time.perf_counter() - t0
        stamp(step, "update_weights", waited, began, [t0])
        if rank == 0:  # its logging, while the others go on into the next step
            time.sleep(args["log_s"])
            rl_insight.metric_gauge("training_global_step", float(step))
        if weights[0] > 0:
            break
    if truth:
        truth.close()
    rl_insight.finish()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default="demo")
    ap.add_argument("--experiment-name", default="spawned")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--slow-from", type=int, default=4)
    ap.add_argument("--micro-s", type=float, default=0.075)
    ap.add_argument("--extra-s", type=float, default=0.0625,
                    help="the straggler's busy loop before each all-reduce")
    ap.add_argument("--log-s", type=float, default=0.01, help="rank 0's logging each step")
    ap.add_argument("--self-sampled", type=int, default=-1,
                    help="a rank that samples itself when profiled (client.profile_method)")
    ap.add_argument("--stop-file", default="")
    ap.add_argument("--truth-file", default="",
                    help="each rank writes its collectives' waits per phase to FILE.<rank>")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(args.ranks, port, vars(args)), nprocs=args.ranks, join=True)
    print("SPAWNED " + json.dumps({"project": args.project,
                                   "experiment_name": args.experiment_name}))


if __name__ == "__main__":
    main()
