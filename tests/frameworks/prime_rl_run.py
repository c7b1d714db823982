"""prime-rl's two processes, replayed through RL-Insight's prime-rl adapter
(rl_insight/integrations/prime_rl.py). Run by tests/test_framework_prime_rl.py as a user
runs prime-rl with it: ``python -m rl_insight.integrations.prime_rl <this launcher>``,
FAKE ``prime_rl`` modules on PYTHONPATH (tests/frameworks/stand_ins/prime_rl/: its
monitors package and metrics server at 559b4477). prime-rl needs Python 3.12, GPUs and
vLLM, and is not on PyPI, so its loops are replayed, not run, in its process structure
and call order at PrimeIntellect-ai/prime-rl 559b4477:

- the launcher (entrypoints/rl.py ``rl``/``rl_local``): ``$PRL_RUN_ID`` and
  ``$PRL_RUN_NAME`` set (l.618-620), the orchestrator and the trainer started as
  processes of their own with its environment (l.288-356), their exit awaited;
- the orchestrator (orchestrator/orchestrator.py): ``monitors.setup`` (l.220-228), the
  startup sync to the trainer's v0 (l.332-364), then per batch the dispatcher's gate at
  most ``TARGET_LAG`` ahead of the policy (l.970-993), every arriving episode to the
  monitors (l.592), ``finalize_train_batch`` (l.619-757: the sink-to-sink time/step, the
  hold for policy v{step-2}, the effective episodes, packing, the rollout file for the
  trainer, the step's dict), ``monitors.finalize()`` (l.506). Its inference server is a
  FAKE vLLM engine serving real /metrics (examples/fake_engines.py) in this process;
- the trainer (trainer/rl/train.py): ``monitors.setup`` (l.86-90), its metrics server
  (l.98-105), then per step the startup broadcast (first step, l.275-277), the wait for
  the batch's file (l.279-284, filesystem transport), loading (l.286-291),
  forward/backward (l.298-573), the broadcast (l.579-600: ``broadcasts/step_N/STABLE``),
  a checkpoint every interval (l.602-616), five ``monitors.log`` calls (l.651-693) and
  the metrics server's update (l.696-707); it never finalizes its monitors.

Sleeps stand for the work; the waits poll the files as prime-rl's transports do. Batch
``--slow-batch`` is generated ``--slow`` seconds slower: the trainer waits for it. The
ground truth is prime-rl's own file monitor (``<run dir>/metrics.jsonl``, both
processes' lines), copied to ``--out`` with what the launcher knew.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from prime_rl.configs.monitors import MonitorsConfig
from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
TARGET_LAG = 1  # orchestrator.py l.104
EPISODES = 4  # per batch, arriving one at a time
GEN, LOAD, FWD, BCAST, PACK, CKPT = 0.25, 0.02, 0.3, 0.05, 0.01, 0.08
CKPT_INTERVAL = 3
POLL = 0.01


# FAKE configs: the fields the replay and the adapter read (configs/trainer.py,
# configs/orchestrator.py, configs/shared.py at 559b4477), pydantic models as prime-rl's
class MetricsServerConfig(BaseModel):
    port: int = 8000
    host: str = "0.0.0.0"


class ClientConfig(BaseModel):
    base_url: str = "http://localhost:8000/v1"
    admin_base_url: list[str] | None = None


class ModelConfig(BaseModel):
    name: str = "Qwen/Qwen3-0.6B"
    client: ClientConfig = ClientConfig()


class TrainerConfig(BaseModel):
    output_dir: Path
    max_steps: int
    metrics_server: MetricsServerConfig | None = None
    model: ModelConfig = ModelConfig()
    monitors: MonitorsConfig = MonitorsConfig()


class OrchestratorConfig(BaseModel):
    output_dir: Path
    max_steps: int
    batch_size: int = 8
    seq_len: int = 2048
    model: ModelConfig = ModelConfig()
    monitors: MonitorsConfig = MonitorsConfig()


def wait_path(path: Path) -> None:
    while not path.exists():  # prime-rl's sync_wait_for_path polls the same way
        time.sleep(POLL)


def version(run_dir: Path) -> int:
    """The newest policy the trainer published (its STABLE files), -1 before any."""
    found = [int(p.parent.name.split("_")[1]) for p in
             (run_dir / "broadcasts").glob("step_*/STABLE")]
    return max(found, default=-1)


def broadcast(run_dir: Path, step: int) -> None:
    path = run_dir / "broadcasts" / f"step_{step}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "STABLE").touch()


async def orchestrator(a, run_dir: Path) -> None:
    from prime_rl import monitors

    sys.path.insert(0, str(REPO / "examples"))
    import fake_engines

    engine = fake_engines.FakeEngine("vllm", seed=2)
    config = OrchestratorConfig(
        output_dir=run_dir, max_steps=a.steps,
        model=ModelConfig(client=ClientConfig(base_url=f"http://127.0.0.1:{engine.port}/v1")))
    await monitors.setup(wandb=None, prime=None, file=config.monitors.file,
                         output_dir=run_dir, run_config=config,
                         train_env_names=["reverse-text"], eval_env_names=[])
    while version(run_dir) < 0:  # the startup sync to the trainer's v0
        await asyncio.sleep(POLL)
    last_batch_at = time.perf_counter()
    wait_for_policy = 0.0
    loaded = [0]

    def watch() -> int:
        """The weight watcher: each new policy loaded by the inference server (its
        update_weights, orchestrator.py l.350 and watcher.py), which the FAKE engine
        counts as vLLM's weight-update operation."""
        v = version(run_dir)
        if v > loaded[0]:
            loaded[0] = v
            engine.operation("rl_weight_update", "update", 0.005)
        return v
    for step in range(1, a.steps + 1):
        closed = time.perf_counter()  # the dispatcher's gate, while collecting this batch
        while (step - 1) - watch() > TARGET_LAG:
            await asyncio.sleep(POLL)
        wait_for_policy += time.perf_counter() - closed
        slow = a.slow if step == a.slow_batch else 0.0
        for i in range(EPISODES):
            engine.submit(2)
            await asyncio.sleep((GEN + slow) / EPISODES)  # generating and scoring
            await monitors.log([{"episode": i}], step, "train", "all")
            watch()
        now = time.perf_counter()
        step_time, last_batch_at = now - last_batch_at, now
        hold = time.perf_counter()
        while watch() < step - 1 - TARGET_LAG:
            await asyncio.sleep(POLL)
        wait_for_policy += time.perf_counter() - hold
        await monitors.log([{"episode": i} for i in range(EPISODES)], step, "train",
                           "effective")
        t = time.perf_counter()
        await asyncio.sleep(PACK)
        pack_time = time.perf_counter() - t
        out = run_dir / "rollouts" / f"step_{step}"
        out.mkdir(parents=True, exist_ok=True)
        (out / "rank_0.bin.tmp").write_bytes(b"micro batches")
        (out / "rank_0.bin.tmp").rename(out / "rank_0.bin")
        save_ckpt_time = 0.0
        if step % CKPT_INTERVAL == 0 and step < a.steps:
            t = time.perf_counter()
            await asyncio.sleep(CKPT / 4)
            save_ckpt_time = time.perf_counter() - t
        metrics = {f"train/agg/{subset}/num_output_tokens/mean": 180.0 + step
                   for subset in ("all", "effective")}
        metrics.update({
            "train/agg/effective/reverse-text/reward/mean": 0.2 + 0.05 * step,
            "progress/tokens": 4096.0 + step, "progress/rollouts": float(EPISODES),
            "progress/total_tokens": 4096.0 * (step - 1),
            "time/step": step_time, "time/pack": pack_time, "time/save_ckpt": save_ckpt_time,
            "time/wait_for_policy": wait_for_policy, "step": step,
            "off_policy/mean": 0.5, "off_policy/max": 1.0, "off_policy/dropped": 0.0,
            "batch/reverse-text": 1.0})
        await monitors.log(metrics, step=step)
        wait_for_policy = 0.0
    await monitors.finalize()
    # the inference server outlives the loop, serving: until it loaded the trainer's last
    # policy and Prometheus read it twice since (its panels' rates), --linger s at most
    read, deadline = engine.scrapes.count + 2, time.monotonic() + a.linger
    while not (watch() >= a.steps and engine.scrapes.count >= read) and \
            time.monotonic() < deadline:
        engine.submit(1)
        await asyncio.sleep(0.2)


def trainer(a, run_dir: Path) -> None:
    from prime_rl import monitors
    from prime_rl.utils.metrics_server import MetricsServer

    config = TrainerConfig(output_dir=run_dir, max_steps=a.steps,
                           metrics_server=MetricsServerConfig(port=a.metrics_port))
    asyncio.run(monitors.setup(wandb=None, file=config.monitors.file, output_dir=run_dir,
                               run_config=config))
    metrics_server = MetricsServer(config.metrics_server)
    sys.path.insert(0, str(REPO / "examples"))
    import fake_engines

    scrapes = fake_engines.Scrapes()  # its isolated registry's reads: its scrapes
    metrics_server._registry.register(scrapes)
    metrics_server.start()
    step = start_step = 1
    while True:
        is_last_step = step == config.max_steps
        step_start = time.perf_counter()
        if step == start_step:
            broadcast(run_dir, step - 1)  # the startup policy, untimed
        t = time.perf_counter()
        wait_path(run_dir / "rollouts" / f"step_{step}" / "rank_0.bin")
        wait_for_batch = time.perf_counter() - t
        t = time.perf_counter()
        (run_dir / "rollouts" / f"step_{step}" / "rank_0.bin").read_bytes()
        time.sleep(LOAD)
        load_data = time.perf_counter() - t
        t = time.perf_counter()
        time.sleep(FWD)  # forward, backward, clipping, the optimizer's step
        forward_backward = time.perf_counter() - t
        t = time.perf_counter()
        time.sleep(BCAST)
        broadcast(run_dir, step)
        broadcast_weights = time.perf_counter() - t
        save_ckpt = 0
        if step % CKPT_INTERVAL == 0 and not is_last_step:
            t = time.perf_counter()
            time.sleep(CKPT)
            save_ckpt = time.perf_counter() - t
        step_time = time.perf_counter() - step_start
        loss = 0.5 / step
        for d in ({"perf/throughput": 9000.0 + step, "perf/throughput_per_gpu": 9000.0,
                   "perf/mfu": 31.5, "perf/peak_memory": 12.0},
                  {"optim/lr": 1e-6, "optim/grad_norm": 0.2 + 0.01 * step},
                  {"loss/mean": loss, "entropy/all/mean": 0.9, "entropy/all/std": 0.1,
                   "mismatch_kl/all/mean": 0.001, "mismatch_kl/all/max": 0.01,
                   "kl_ent_ratio/mean": 0.0011},
                  {"time/step": step_time, "time/wait_for_batch": wait_for_batch,
                   "time/load_data": load_data, "time/broadcast_weights": broadcast_weights,
                   "time/save_ckpt": save_ckpt, "time/forward_backward": forward_backward},
                  {"system/ckpt_disk_free_gib": 100.0, "system/ckpt_disk_used_gib": 50.0,
                   "system/ckpt_disk_total_gib": 150.0, "system/ckpt_disk_free_ratio": 0.66}):
            asyncio.run(monitors.log({**d, "step": step}, step=step))
        metrics_server.update(step=step, loss=loss, throughput=9000.0 + step)
        if is_last_step:
            break
        step += 1
    # its server, scraped while the run goes on: up until Prometheus read its last step
    fake_engines.until_scraped([scrapes], a.linger)
    metrics_server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(a) -> None:
    """entrypoints/rl.py: the run's identity in the environment, both processes started
    with it, their exit awaited; then the truth (its file monitor's lines) written."""
    os.environ.setdefault("PRL_RUN_ID", uuid.uuid4().hex)
    os.environ["PRL_RUN_NAME"] = a.run_name
    run_dir = Path.cwd() / "outputs" / a.run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    common = ["--steps", str(a.steps), "--slow-batch", str(a.slow_batch), "--slow",
              str(a.slow), "--linger", str(a.linger), "--run-dir", str(run_dir),
              "--metrics-port", str(port)]
    started = time.time()
    procs = {role: subprocess.Popen(
        [sys.executable, __file__, "--role", role, *common],
        env={**os.environ, "WANDB_SHARED_LABEL": role,
             **({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"} if role == "trainer"
                else {})})
        for role in ("orchestrator", "trainer")}
    codes = {role: p.wait(120) for role, p in procs.items()}
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    truth = {"codes": codes, "run_name": a.run_name, "metrics_port": port,
             "t_start": started, "lines": lines,
             "sitehook": os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]}
    Path(a.out).write_text(json.dumps(truth))
    if any(codes.values()):
        sys.exit(f"a process failed: {codes}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=("launcher", "orchestrator", "trainer"),
                   default="launcher")
    p.add_argument("--out", default="truth.json")
    p.add_argument("--run-name", default="reverse-text--qwen3--0001")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-batch", type=int, default=4)
    p.add_argument("--slow", type=float, default=1.0)
    p.add_argument("--linger", type=float, default=0.0)
    p.add_argument("--run-dir", default="")
    p.add_argument("--metrics-port", type=int, default=0)
    a = p.parse_args()
    if a.role == "launcher":
        launch(a)
    elif a.role == "orchestrator":
        asyncio.run(orchestrator(a, Path(a.run_dir)))
    else:
        trainer(a, Path(a.run_dir))


if __name__ == "__main__":
    main()
