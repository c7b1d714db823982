"""A slime run replayed on Ray, in slime's own order and process structure (THUDM/slime
624b824a: train.py's synchronous loop; slime/ray/rollout.py RolloutManager;
slime/backends/megatron_utils/actor.py MegatronTrainRayActor), with RL-Insight turned on
the one way slime allows without changing it: ``rl_insight.integrations.slime.attach(args)``
in the entry script.

slime does not install here: its modules the adapter touches come from FAKE stand-ins
(tests/frameworks/stand_ins/slime: ``logging_utils.log``, ``Timer``, ``load_function``,
as slime has them); everything else is this replay's. Processes, as slime's:

- the driver (this script): parses its args, attaches, creates the rollout manager and
  the training ranks, runs the loop: generate, train on every rank, update weights;
- the rollout manager (a Ray actor): FAKE SGLang engines serving real /metrics through
  prometheus_client's negotiating app, behind a FAKE router answering ``GET /workers``;
  each rollout ends in slime's ``log_rollout_data``: the custom rollout-log hook (ours),
  then ``logging_utils.log(args, D1, "rollout/step")``;
- training ranks (Ray actors): ``init`` runs the custom Megatron-init hook (ours), then
  slime's ``train_wait`` timer starts; ``train`` runs slime's timers (data_preprocess,
  then under inverse_timer(train_wait) and timer(train): ref_log_probs, log_probs, the
  train-side rollout dict, actor_train with one train/* dict per optimizer step), then
  ``log_perf_data`` (perf/<timer>_time, perf/step_time, reset); ``update_weights`` is
  ``@timer``-ed. Only the main rank (rank 0) logs, as slime's.

Prints ``RUN {json}`` (the run's names and times) and, with --truth, writes each step's
phases as measured here (wall clock, each inside slime's timer).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from argparse import Namespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import ray

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STAND_INS = HERE / "stand_ins"
sys.path[:0] = [str(STAND_INS), str(REPO / "examples")]

import fake_engines  # noqa: E402

ray.cloudpickle.register_pickle_by_value(fake_engines)


def serve_router(workers: list[str]) -> ThreadingHTTPServer:
    """FAKE sglang_router: ``GET /workers`` lists the engines, as slime's engines
    registered themselves with ``POST /workers`` (sglang_engine.py)."""
    body = json.dumps({"workers": [{"url": u, "id": str(i)} for i, u in enumerate(workers)]})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            ok = self.path.rstrip("/") == "/workers"
            data = body.encode() if ok else b"{}"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@ray.remote(num_cpus=0)
class RolloutManager:
    def __init__(self, args: Namespace, engines: int) -> None:
        self.args = args
        self.engines = [fake_engines.FakeEngine("sglang", seed=i) for i in range(engines)]
        self.router = serve_router([f"http://127.0.0.1:{e.port}" for e in self.engines])
        # slime's _start_router writes the router's address into this process's args
        args.sglang_router_ip, args.sglang_router_port = "127.0.0.1", \
            self.router.server_address[1]

    def generate(self, rollout_id: int, seconds: float, requests: int) -> dict:
        from slime.observability import logging_utils
        from slime.utils.misc import load_function

        t0 = time.time()
        samples = []
        for engine in self.engines:
            engine.submit(requests)
        rng = random.Random(rollout_id)
        time.sleep(seconds)  # the engines generate (the truth: t0 to t1, as it took)
        t1 = time.time()
        n = requests * len(self.engines)
        for i in range(n):  # the first request starts the rollout, the last ends it
            s = t0 + (rng.uniform(0, 0.05) if i else 0.0)
            e = t1 - (rng.uniform(0, 0.05) if i < n - 1 else 0.0)
            sample = Namespace(index=i, trace={"events": [
                {"type": "span_start", "name": "sglang_generate", "ts": s},
                {"type": "span_end", "name": "sglang_generate", "ts": e}]})
            samples.append(sample)
        rollout_time = time.time() - t0
        truth = {"start": t0, "end": t1}
        # slime/observability/rollout_metrics.py log_rollout_data
        hook = load_function(self.args.custom_rollout_log_function_path)
        if not hook(rollout_id, self.args, samples, None, rollout_time):
            d1 = {"rollout/response_len/mean": 480.0 + 40 * rng.random(),
                  "rollout/response_len/median": 470.0, "rollout/response_len/max": 2048.0,
                  "rollout/response_len/min": 12.0, "rollout/truncated_ratio": 0.02,
                  "rollout/repetition_frac": 0.0, "rollout/prefix_cache_hit_rate": 0.31,
                  "perf/rollout_time": rollout_time,
                  "perf/tokens_per_gpu_per_sec": 1650.0 + 100 * rng.random(),
                  "perf/request/e2e_latency/mean": seconds * 0.8,
                  "rollout/step": rollout_id}
            logging_utils.log(self.args, d1, step_key="rollout/step")
        return truth

    def until_scraped(self, most_s: float) -> bool:
        return fake_engines.until_scraped(
            [e.scrapes for e in self.engines], most_s, times=3,
            meanwhile=lambda: [e.submit(1) for e in self.engines])

    def stop(self) -> None:
        for e in self.engines:
            e.server.shutdown()
            e.server.server_close()
        self.router.shutdown()


@ray.remote(num_cpus=0)
class TrainRank:
    def __init__(self, args: Namespace, rank: int) -> None:
        self.args, self.rank = args, rank

    def init(self) -> None:
        """MegatronTrainRayActor.init: the custom Megatron-init hook inside it (slime's
        initialize.py), then @with_defer starts the train_wait timer."""
        from slime.observability.timer import Timer
        from slime.utils.misc import load_function

        os.environ["RANK"] = str(self.rank)
        load_function(self.args.custom_megatron_init_path)(self.args)
        Timer().start("train_wait")

    def train(self, rollout_id: int, plan: dict) -> dict:
        from slime.observability import logging_utils
        from slime.observability.timer import Timer, inverse_timer, timer

        main = self.rank == 0  # DP 0, TP 0, last PP stage
        truth = {}

        def timed(name: str) -> tuple[float, float]:
            """The phase as slime's Timer measured it: the start it recorded, and that
            start plus what the phase added to its sum (the perf/*_time it logs)."""
            return Timer().start_time[name], Timer().timers.get(name, 0.0)

        def measured(name: str, before: tuple[float, float]) -> None:
            start, total = before
            truth[name] = (start, start + Timer().timers[name] - total)

        def phase(name: str, seconds: float) -> None:
            with timer(name):
                before = timed(name)
                time.sleep(seconds)
            measured(name, before)

        phase("data_preprocess", 0.02)
        with inverse_timer("train_wait"), timer("train"):
            phase("ref_log_probs", plan["ref"])
            phase("log_probs", plan["logp"])
            if main:  # train_metric_utils.log_rollout_data (D3)
                logging_utils.log(self.args, {
                    "rollout/rewards": 0.3 + 0.05 * rollout_id, "rollout/raw_reward": 0.4,
                    "rollout/response_lengths": 480.0, "rollout/log_probs": -0.35,
                    "rollout/step": rollout_id}, step_key="rollout/step")
            with timer("actor_train"):
                before = timed("actor_train")
                for k in range(2):  # model.py: one train/* dict per optimizer step
                    time.sleep(plan["train"] / 2)
                    if main:
                        logging_utils.log(self.args, {
                            "train/loss": 0.01 - 0.001 * rollout_id, "train/pg_loss": 0.01,
                            "train/entropy_loss": 0.48, "train/pg_clipfrac": 0.003,
                            "train/ppo_kl": 1e-4, "train/grad_norm": 0.21,
                            "train/lr-pg_0": 1e-6, "train/step": rollout_id * 2 + k},
                            step_key="train/step")
            measured("actor_train", before)
        # train_metric_utils.log_perf_data: every rank reads and resets its timers
        raw = dict(Timer().log_dict())
        Timer().reset()
        if main:
            d5 = {f"perf/{k}_time": v for k, v in raw.items()}
            if "perf/train_wait_time" in d5 and "perf/train_time" in d5:
                d5["perf/step_time"] = d5["perf/train_wait_time"] + d5["perf/train_time"]
                d5["perf/wait_time_ratio"] = d5["perf/train_wait_time"] / d5["perf/step_time"]
            d5["rollout/step"] = rollout_id
            logging_utils.log(self.args, d5, step_key="rollout/step")
        return truth

    def update_weights(self, seconds: float) -> tuple[float, float]:
        from slime.observability.timer import Timer, timer

        with timer("update_weights"):
            start, total = Timer().start_time["update_weights"], \
                Timer().timers.get("update_weights", 0.0)
            time.sleep(seconds)
        return start, start + Timer().timers["update_weights"] - total

    def flush(self) -> None:
        import rl_insight

        rl_insight.flush(10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="slime-replay")
    ap.add_argument("--experiment-name", default="slime-run")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--slow-step", type=int, default=0, help="this rollout's actor train "
                    "takes four times as long")
    ap.add_argument("--truth", metavar="FILE")
    ap.add_argument("--linger", type=float, default=0.0)
    a = ap.parse_args(argv)
    os.environ.setdefault("RL_INSIGHT_PROJECT", a.project)
    os.environ.setdefault("RL_INSIGHT_EXPERIMENT_NAME", a.experiment_name)
    import rl_insight.integrations.slime as rl_slime

    # slime's args as parse_args leaves them (only what this replay reads)
    args = Namespace(hf_checkpoint="/models/Qwen3-4B", wandb_project=None, wandb_group=None,
                     use_wandb=False, use_tensorboard=False,
                     custom_megatron_init_path=None, custom_rollout_log_function_path=None,
                     sglang_router_ip=None, sglang_router_port=None)
    rl_slime.attach(args)  # the one line a slime entry script adds
    from rl_insight.ray.attach import runtime_env

    # the job's runtime env as `rl-insight ray-env` writes it (the server's address and
    # VERL_RL_INSIGHT_ENABLE for every worker), with the stand-ins on the path
    ray.init(runtime_env=runtime_env({"env_vars": {
        "PYTHONPATH": os.pathsep.join([str(STAND_INS), str(REPO)]),
        "RL_INSIGHT_PROJECT": a.project, "RL_INSIGHT_EXPERIMENT_NAME": a.experiment_name}}),
        log_to_driver=False)
    t_start = time.time()
    rollout = RolloutManager.remote(args, a.engines)
    ranks = [TrainRank.remote(args, r) for r in range(a.ranks)]
    ray.get([r.init.remote() for r in ranks])
    steps = []
    ray.get([r.update_weights.remote(0.1) for r in ranks])  # train.py: the initial push
    for k in range(a.steps):
        plan = {"gen": 0.6, "ref": 0.12, "logp": 0.12, "train": 0.3, "sync": 0.15}
        if k == a.slow_step:
            plan["train"] *= 4
        gen = ray.get(rollout.generate.remote(k, plan["gen"], 4))
        trained = ray.get([r.train.remote(k, plan) for r in ranks])
        synced = ray.get([r.update_weights.remote(plan["sync"]) for r in ranks])
        # every rank's own measure: a step's phase is its wall time over the ranks
        steps.append({"step": k, "plan": plan, "generate": gen, "ranks": trained,
                      "update_weights": synced})
    t_end = time.time()
    ray.get([r.flush.remote() for r in ranks])
    # its engines registered after the first rollout: they serve on (a request each 0.1 s:
    # their latency panels are rates of finished requests) until Prometheus has found
    # them and read them three times since the run's end, --linger s at most
    ray.get(rollout.until_scraped.remote(a.linger))
    ray.get(rollout.stop.remote())
    if a.truth:
        Path(a.truth).write_text(json.dumps(steps))
    print("RUN " + json.dumps({"framework": "slime", "project": a.project,
                               "experiment_name": a.experiment_name, "t_start": t_start,
                               "t_end": t_end, "steps": a.steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
