"""OpenRLHF's own entry point, run as its users run it: ``python -m
openrlhf.cli.train_ppo_ray`` with its flags (openrlhf 0.11.2 from
.venv/frameworks/openrlhf/site-packages), once synchronous and once asynchronous
(``--train.async_enable``), on a local Ray cluster. Run by tests/test_framework_openrlhf.py.

RL-Insight is turned on by the one setting a user makes: the Ray job's runtime environment,
here through ``RAY_RUNTIME_ENV_HOOK=rl_insight.ray.hooks.runtime_env_hook`` in the driver's
environment (the test's), which adds the server's address and the worker setup hook to
every ``ray.init`` of the job; nothing in OpenRLHF's code or command line names RL-Insight.

Real: OpenRLHF's CLI parser and ``train`` (cli/train_ppo_ray.py), ``create_vllm_engines``
and ``RolloutRayActor`` (trainer/ray/vllm_engine.py), ``PPOTrainer`` /
``PPOTrainerAsync``, ``GenerateSamplesActor``, ``TrainingActor`` and ``VLLMLock`` as Ray
actors (trainer/ppo_trainer.py, ppo_trainer_async.py), the samples generator, the agent
executor and the reward function file it loads, ``Experience``, the KL controller, the
logging. FAKE (tests/frameworks/stand_ins/openrlhf_cpu/, on no GPU): vLLM, the model
actors, the experience maker's forward passes, DeepSpeed's strategy, the tokenizer and the
dataset. The cluster has 4 logical GPUs (``ray.init(num_gpus=4)``) so OpenRLHF's
placement groups of GPU bundles are placed as on a GPU node.

The ground truth goes to ``--out``: every step's dict as OpenRLHF itself printed it
(``Global step N: {...}``, the trainer actor's log), per mode.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import runpy
import sys
import time
from pathlib import Path

import ray

HERE = Path(__file__).resolve().parent
REWARD = HERE / "openrlhf_reward.py"
STEP_LINE = re.compile(r"Global step (\d+): (\{.*\})\s*$")


def flags(mode: str, steps: int, slow_step: int, work: Path) -> list[str]:
    """The command line of an OpenRLHF GRPO run (its README's shape, small): 2 engines,
    2 prompts a step, 2 samples each; evaluation every 3 steps."""
    batch, samples = 2, 2
    slow = f"&slow={(slow_step - 1) * batch}-{slow_step * batch - 1}" if slow_step else ""
    out = ["--actor.model_name_or_path", "Qwen/Qwen3-0.6B-fake",
           "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1",
           "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "1",
           "--vllm.num_engines", "2", "--vllm.tensor_parallel_size", "1",
           "--algo.advantage.estimator", "group_norm", "--algo.kl.init_coef", "0.001",
           "--reward.remote_url", str(REWARD),
           "--data.prompt_dataset", f"openrlhf-fake://math?prompts={steps * batch}{slow}",
           "--eval.dataset", "openrlhf-fake://gsm8k?prompts=2", "--eval.steps", "3",
           "--rollout.batch_size", str(batch), "--rollout.n_samples_per_prompt", str(samples),
           "--train.batch_size", str(batch * samples), "--rollout.max_new_tokens", "16",
           "--data.max_len", "64", "--ckpt.save_steps", "-1",
           "--ckpt.path", str(work / f"ckpt-{mode}"),
           "--logger.wandb.project", "framework-openrlhf",
           "--logger.wandb.run_name", f"grpo-{mode}"]
    return out + (["--train.async_enable"] if mode == "async" else [])


def printed_steps(logs_dir: str, mode: str) -> dict[int, dict]:
    """Each step's dict as OpenRLHF's trainer printed it (``✨ Global step N: {...}`` sync,
    ``Global step N: {...}`` async), from the trainer actor's log."""
    found: dict[int, dict] = {}
    for path in glob.glob(os.path.join(logs_dir, "worker-*.out")):
        with open(path, errors="replace") as f:
            for line in f:
                m = STEP_LINE.search(line)
                if m and ("✨" in line) == (mode == "sync"):
                    try:
                        found[int(m.group(1))] = ast.literal_eval(m.group(2))
                    except (ValueError, SyntaxError):
                        continue
    return found


def start_ray() -> None:
    """The GPU node OpenRLHF expects, as logical resources, on a Ray of its own. Ray
    gives its raylet 30 s to register (ray/_private/node.py, fixed): started beside the
    route server's other runs on a loaded host it had not after 56 s once (an audit run,
    2026-12-07, one busy loop beside); once more then, as tests/raycluster.py does."""
    for attempt in (1, 2):
        try:
            ray.init(num_cpus=8, num_gpus=4, include_dashboard=False, log_to_driver=False)
            return
        except Exception as exc:
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
            print(f"ray.init: {exc}; once more", flush=True)
            ray.shutdown()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--slow-step", type=int, default=4)
    p.add_argument("--modes", default="sync,async")
    a = p.parse_args()
    work = Path(a.out).parent
    start_ray()
    logs_dir = ray._private.worker.global_worker.node.get_logs_dir_path()
    truth: dict = {"openrlhf": None, "modes": {}}

    for mode in a.modes.split(","):
        t0 = time.time()
        sys.argv = ["train_ppo_ray", *flags(mode, a.steps, a.slow_step, work)]
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
        truth["modes"][mode] = {"t_start": t0, "t_done": time.time()}
        print(f"{mode}: {time.time() - t0:.1f}s", flush=True)
    deadline = time.monotonic() + 20  # the workers' logs reach their files
    for mode in truth["modes"]:
        while True:
            steps = truth["modes"][mode]["steps"] = printed_steps(logs_dir, mode)
            if len(steps) >= a.steps or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    from importlib.metadata import version

    truth["openrlhf"] = version("openrlhf")
    Path(a.out).write_text(json.dumps(truth))
    ray.shutdown()


if __name__ == "__main__":
    main()
