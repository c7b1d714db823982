"""verl's torch profiler on trainer ranks, as verl drives it: three gloo ranks (processes
started as ``torch.multiprocessing`` starts them), each holding a worker with verl
0.9.1's own ``DistProfiler`` (``global_profiler.tool=torch``) in ``self.profiler`` and its
stages decorated with ``DistProfiler.annotate`` and the roles verl's engine workers give
them (``verl/workers/engine_workers.py``: ``ref_compute_log_prob``,
``actor_compute_log_prob``, ``actor_update`` holding ``train_batch``); the trainer's loop
starts the profiler with ``start(role="train", profile_step=N)`` and stops it after the
step, as verl's trainer does (``verl/trainer/ppo/ray_trainer.py``). verl's classes write
the files: ``actor_train_step<N>_rank<R>-of-3_pid.._<time>.json.gz``, and with
``--discrete-last`` the last step in discrete mode, a file per stage.

From ``--slow-from`` one rank busy-loops in ``slow_backward`` before each all-reduce of
``actor_update`` (a compute straggler). Then::

    rl-insight import OUT --profiler torch --project demo --experiment-name profiled
    rl-insight report --project demo --experiment-name profiled --step 3

name the rank. With ``RL_INSIGHT_SERVER_URL`` and ``VERL_RL_INSIGHT_ENABLE=1`` the ranks
are monitored live too (``DistProfiler.annotate`` puts each stage on lane ``rank_<r>``;
rank 0 logs the step), so the import joins the live run. Each rank also writes
``stamps_rank<R>.json``: the wall clock read around each stage (what the imported
ranges must fall within).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

MICROBATCHES = 4


def slow_backward(seconds: float) -> None:
    """The straggler's own code: a busy loop."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _worker_class():
    """A worker as verl's engine workers are: its profiler in ``self.profiler``, its
    stages annotated with verl's roles."""
    import torch
    import torch.distributed as dist
    from verl.utils.profiler.profile import DistProfiler

    class Worker:
        def __init__(self, rank: int, args: dict, config, tool_config) -> None:
            self.rank, self.args = rank, args
            self.profiler = DistProfiler(rank=rank, config=config, tool_config=tool_config,
                                         save_file_prefix="actor")
            self.grad = torch.ones(1024)
            self.waited = 0.0  # seconds in the collectives, by this rank's own clock

        def _micro(self, slow: bool) -> None:
            time.sleep(self.args["micro_s"])  # a micro-batch's forward and backward
            if slow:
                slow_backward(self.args["extra_s"])
            t0 = time.perf_counter()
            dist.all_reduce(self.grad)
            self.waited += time.perf_counter() - t0

        @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
        def compute_ref_log_prob(self) -> None:
            self._micro(False)

        @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
        def compute_log_prob(self) -> None:
            self._micro(False)

        def _train(self, slow: bool) -> None:
            for _ in range(MICROBATCHES):
                self._micro(slow)

        @DistProfiler.annotate(color="red", role="train_batch")
        def train_batch(self, slow: bool) -> None:
            self._train(slow)

        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self, step: int) -> None:
            slow = self.rank == self.args["slow_rank"] and step >= self.args["slow_from"]
            if self.profiler.is_discrete_mode():  # a profiler per stage: none nested
                self._train(slow)
            else:  # verl nests train_batch in actor_update on one rank
                self.train_batch(slow)

    return Worker


def rank_main(rank: int, world: int, port: int, args: dict) -> None:
    import torch.distributed as dist
    from verl.utils.profiler import ProfilerConfig
    from verl.utils.profiler.config import TorchProfilerToolConfig

    live = bool(os.environ.get("RL_INSIGHT_SERVER_URL"))
    if live:  # outside Ray every rank names its run itself
        import rl_insight

        rl_insight.init(project=args["project"], experiment_name=args["experiment_name"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    worker_class = _worker_class()
    out = args["out"]
    workers = {}
    for discrete in (False, True):
        tool = TorchProfilerToolConfig(contents=["cpu"], discrete=discrete)
        config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=out,
                                tool_config=tool)
        workers[discrete] = worker_class(rank, args, config, tool)
    stamps = []
    for step in range(1, args["steps"] + 1):
        w = workers[args["discrete_last"] and step == args["steps"]]
        w.profiler.start(role="train", profile_step=step)
        for stage, call in (("ref_compute_log_prob", w.compute_ref_log_prob),
                            ("actor_compute_log_prob", w.compute_log_prob),
                            ("actor_update", lambda s=step, w=w: w.update_actor(s))):
            before, w.waited = time.time_ns(), 0.0
            call()
            # wait_s, the ground truth of the ranks' leads: what it waited in the stage's
            # collectives (a loaded host stretches the sleeps and busy loops)
            stamps.append({"step": step, "stage": stage, "before_ns": before,
                           "after_ns": time.time_ns(), "wait_s": w.waited})
        w.profiler.stop(run_command=step == args["steps"])
        dist.barrier()  # verl's driver gathers every rank's stop_profile, then logs the step
        if live and rank == 0:
            import rl_insight

            rl_insight.metric_gauge("training_global_step", float(step))
    Path(out, f"stamps_rank{rank}.json").write_text(json.dumps(stamps))
    if live:
        import rl_insight

        rl_insight.finish()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="verl's profiler save_path")
    ap.add_argument("--project", default="demo")
    ap.add_argument("--experiment-name", default="profiled")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--slow-from", type=int, default=2)
    ap.add_argument("--micro-s", type=float, default=0.03)
    ap.add_argument("--extra-s", type=float, default=0.1,
                    help="the straggler's busy loop before each all-reduce")
    ap.add_argument("--discrete-last", action="store_true",
                    help="the last step in discrete mode (a file per stage)")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    _worker_class()  # verl and torch imported once here; each rank forks with them
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(rank_main, args=(args.ranks, port, vars(args)), nprocs=args.ranks,
                       join=True, start_method="fork")
    print("PROFILED " + json.dumps({"out": args.out, "project": args.project,
                                    "experiment_name": args.experiment_name}))


if __name__ == "__main__":
    main()
