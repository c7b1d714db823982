"""A NeMo-RL synchronous GRPO run replayed in NeMo-RL's order (NVIDIA-NeMo/RL 7ea279ab
nemo_rl/algorithms/grpo.py grpo_train; its tracing from branch rajsin/lens-with-goodput
ce32d420 nemo_rl/telemetry/, through the nemo-lens exporter), with
``rl_insight.integrations.nemo_rl.attach(logger, master_config)`` after ``setup()``.

NeMo-RL does not install here: its composite ``Logger`` comes from a FAKE stand-in
(tests/frameworks/stand_ins/nemo_rl: the loggers list, positional fan-out). Its spans
are made with the real OpenTelemetry SDK and sent by the real OTLP/HTTP exporter, as
lens does with ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``: to the endpoint,
with the token and the run's resource attributes ``rl-insight ray-env --otel`` writes
(``framework_tracing_env``). Resource as lens sets it: ``service.name=nemo-rl``,
``rl.algorithm``, ``dl.rank``, ``nemo.run.id``; scope ``nemo.lens``.

Per step s (1-based), as grpo_train: ``rl.grpo.step{rl.iteration, rl.epoch}`` around
``rl.grpo.data_processing`` (overhead), ``rl.grpo.collect_rollouts`` >
``rl.vllm.generate`` (productive), ``rl.grpo.compute_rewards`` (productive),
``rl.grpo.compute_logprobs`` (overhead), ``rl.grpo.compute_advantages`` (overhead),
``rl.grpo.policy_update{rl.iteration}`` (productive); the logger's calls: the
rollout's ``train`` dict mid-step, then ``train``, ``performance`` and ``timing/train``
with ``step_finished=True`` after the step span closed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "stand_ins"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="nemo-rl-replay")
    ap.add_argument("--experiment-name", default="nemo-rl-run")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--slow-step", type=int, default=0, help="this step's policy training "
                    "takes three times as long")
    ap.add_argument("--truth", metavar="FILE")
    a = ap.parse_args(argv)
    os.environ["RL_INSIGHT_PROJECT"] = a.project
    os.environ["RL_INSIGHT_EXPERIMENT_NAME"] = a.experiment_name
    from rl_insight.ray.attach import env_vars, framework_tracing_env

    os.environ.update(framework_tracing_env(env_vars(), os.environ))  # ray-env --otel
    from nemo_rl.utils.logger import Logger
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import rl_insight.integrations.nemo_rl as rl_nemo

    provider = TracerProvider(resource=Resource.create({
        "service.name": "nemo-rl", "rl.algorithm": "grpo", "rl.model": "Qwen/Qwen2.5-1.5B",
        "dl.rank": 0, "dl.world_size": 1, "nemo.run.id": "a1b2c3d4e5f6",
        "service.instance.id": "a1b2c3d4e5f6-rank0"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("nemo.lens")
    # MasterConfig's sections (examples/configs/grpo_math_1B.yaml), those this replay
    # reads and a few a run sets
    master_config = {"logger": {"wandb": {"project": a.project, "name": a.experiment_name}},
                     "grpo": {"num_prompts_per_step": 32, "num_generations_per_prompt": 16,
                              "max_num_steps": a.steps},
                     "policy": {"model_name": "Qwen/Qwen2.5-1.5B",
                                "optimizer": {"kwargs": {"lr": 5e-6}}}}
    logger = Logger(master_config["logger"])  # setup() builds it
    rl_nemo.attach(logger, master_config)  # the entry script's one line after setup()
    steps, t_start = [], time.time()

    def leaf(name: str, seconds: float, bucket: str, **attrs) -> float:
        with tracer.start_as_current_span(name, attributes={"rl.bucket": bucket, **attrs}):
            t0 = time.perf_counter()
            time.sleep(seconds)
            return time.perf_counter() - t0

    with tracer.start_as_current_span("rl.grpo.job"):
        for s in range(1, a.steps + 1):
            timing = {}
            with tracer.start_as_current_span("rl.grpo.step", attributes={
                    "rl.iteration": s, "rl.epoch": 1}):
                t_step = time.perf_counter()
                timing["data_processing"] = leaf("rl.grpo.data_processing", 0.03, "overhead")
                with tracer.start_as_current_span("rl.grpo.collect_rollouts", attributes={
                        "rl.num_generations_per_prompt": 16}):
                    timing["generation"] = leaf("rl.vllm.generate", 0.5, "productive")
                logger.log_metrics({"mean_gen_tokens_per_sample": 214.7, "truncation_rate":
                                    0.07, "natural_termination_rate": 0.93}, s, "train")
                timing["reward_calculation"] = leaf("rl.grpo.compute_rewards", 0.05,
                                                    "productive")
                timing["policy_and_reference_logprobs"] = leaf(
                    "rl.grpo.compute_logprobs", 0.15, "overhead")
                timing["advantage_calculation"] = leaf("rl.grpo.compute_advantages", 0.02,
                                                       "overhead")
                timing["policy_training"] = leaf(
                    "rl.grpo.policy_update", 0.3 * (3 if s == a.slow_step else 1),
                    "productive", **{"rl.iteration": s})
                timing["total_step_time"] = time.perf_counter() - t_step
            logger.log_metrics({"loss": 0.012, "grad_norm": 0.41, "reward": 0.38 + 0.01 * s,
                                "kl_penalty": 0.0, "approx_entropy": 0.63,
                                "token_mult_prob_error": 1.012, "lr": 1e-6}, s, "train")
            logger.log_metrics({"samples_per_sec": 9.8, "tokens_per_sec": 2950.0,
                                "generation_tokens_per_sec": 4100.0}, s, "performance")
            logger.log_metrics(dict(timing), s, "timing/train", None, True)
            steps.append({"step": s, **timing})
    t_end = time.time()
    provider.force_flush(10_000)
    logger.finish()
    if a.truth:
        Path(a.truth).write_text(json.dumps(steps))
    print("RUN " + json.dumps({"framework": "nemo_rl", "project": a.project,
                               "experiment_name": a.experiment_name, "t_start": t_start,
                               "t_end": t_end, "steps": a.steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
