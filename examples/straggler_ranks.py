"""A slow rank, found and traced to its code: trainer ranks as Ray actors, the way verl's
workers are, in one torch.distributed process group over gloo (CPU) with torch's Flight
Recorder on; each rank's ``update_actor`` is annotated as verl's ``DistProfiler``
annotates it (``trace_state("actor_update", state_lane_id="rank_<r>")``) and ends each
micro-batch in an all-reduce, so every rank's phase ends at the same moment.

From chosen steps one rank busy-loops in ``slow_backward`` (a compute straggler) and
another's data preparation stalls (an input straggler). With ``--profile-at STEP`` the
driver asks for the compute straggler's profile as an engineer would (``rl-insight
profile``), and goes on once the rank's node lane actor took it. Then::

    rl-insight report --project demo --experiment-name stragglers --step 6

names the rank, why, and its top frames (docs/anatomy.md, "The culprit rank").

    RL_INSIGHT_SERVER_URL=http://127.0.0.1:18080 VERL_RL_INSIGHT_ENABLE=1 \\
        python examples/straggler_ranks.py --compute 2:5:9 --input 1:9:12 --profile-at 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

import ray
import requests

import rl_insight

MICROBATCHES = 4


def slow_backward(seconds: float) -> None:
    """The compute straggler's own code: a busy loop."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def plan(text: str | None) -> tuple[int, range]:
    """RANK:FIRST:END (END not included) -> (rank, steps); none: (-1, empty)."""
    if not text:
        return -1, range(0)
    rank, first, end = (int(x) for x in text.split(":"))
    return rank, range(first, end)


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, rank: int, world: int, port: int, args: dict) -> None:
        import torch
        import torch.distributed as dist

        rl_insight.init()  # as verl's workers: no arguments, the run's identity inherited
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        self.rank, self.grad, self.args = rank, torch.ones(1024), args
        self.compute, self.input = plan(args["compute"]), plan(args["input"])

    def ready(self) -> bool:
        return True

    def prepare_batch(self, step: int) -> None:
        if self.rank == self.input[0] and step in self.input[1]:
            time.sleep(self.args["late_s"])  # its data loading stalls

    def update_actor(self, step: int) -> int:
        import torch.distributed as dist

        with rl_insight.trace_state("actor_update", state_lane_id=f"rank_{self.rank}"):
            self.prepare_batch(step)
            for _ in range(MICROBATCHES):
                time.sleep(self.args["micro_s"])  # a micro-batch's forward and backward
                if self.rank == self.compute[0] and step in self.compute[1]:
                    slow_backward(self.args["extra_s"])
                dist.all_reduce(self.grad)
        return self.rank


def ask_profile(project: str, experiment: str, rank: int, seconds: float) -> dict:
    """POST /api/v1/profiles as `rl-insight profile` does; back once a lane actor took it
    (a rank's lane reaches the server with its node actor's next tick: asked again until
    then)."""
    url = os.environ["RL_INSIGHT_SERVER_URL"].rstrip("/") + "/api/v1/profiles"
    token = os.environ.get("RL_INSIGHT_TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    end = time.monotonic() + 60
    while True:
        r = requests.post(url, json={"project": project, "experiment_name": experiment,
                                     "rank": str(rank), "seconds": seconds},
                          headers=headers, timeout=10)
        if r.status_code != 404 or time.monotonic() > end:
            break
        time.sleep(0.2)
    if r.status_code != 202:
        raise SystemExit(f"the profile was refused: {r.status_code} {r.text}")
    p = r.json()
    while p["status"] == "pending" and time.monotonic() < end:
        time.sleep(0.2)
        p = requests.get(f"{url}/{p['id']}", headers=headers, timeout=10).json()
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default="demo")
    ap.add_argument("--experiment-name", default="stragglers")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=13)
    ap.add_argument("--compute", default="2:5:9", help="RANK:FIRST:END busy-loops")
    ap.add_argument("--input", default="1:9:12", help="RANK:FIRST:END: its data is late")
    ap.add_argument("--micro-s", type=float, default=0.1)
    ap.add_argument("--extra-s", type=float, default=0.12, help="the busy loop a micro-batch")
    ap.add_argument("--late-s", type=float, default=0.5)
    ap.add_argument("--profile-at", type=int, default=0,
                    help="ask for the compute straggler's profile before this step")
    ap.add_argument("--profile-s", type=float, default=2.0)
    args = ap.parse_args()
    ray.init()
    rl_insight.init(project=args.project, experiment_name=args.experiment_name)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"TORCH_FR_BUFFER_SIZE": "2000",  # torch's Flight Recorder on every rank
           "RL_INSIGHT_CLIENT_PROFILE_POLL_S": os.environ.get(
               "RL_INSIGHT_CLIENT_PROFILE_POLL_S", "1")}
    settings = {k: getattr(args, k) for k in ("compute", "input", "micro_s", "extra_s",
                                              "late_s")}
    workers = [Worker.options(runtime_env={"env_vars": env}).remote(
        r, args.ranks, port, settings) for r in range(args.ranks)]
    ray.get([w.ready.remote() for w in workers], timeout=240)
    profile = None
    for step in range(1, args.steps + 1):
        if step == args.profile_at:
            profile = ask_profile(args.project, args.experiment_name,
                                  plan(args.compute)[0], args.profile_s)
        ray.get([w.update_actor.remote(step) for w in workers], timeout=60)
        time.sleep(0.2)  # the driver's own work: reward, advantages, logging
        rl_insight.metric_gauge("training_global_step", float(step))
    rl_insight.finish()
    for w in workers:
        ray.kill(w)
    print("STRAGGLERS " + json.dumps({"project": args.project,
                                      "experiment_name": args.experiment_name,
                                      "profile": profile and profile["id"]}))


if __name__ == "__main__":
    main()
