"""Run by upstream rl-insight 0.3.0 (tests/upstream_env.py), as a verl image that pins it
would: Ray up, init with the run's names, verl's step keys (their "/" made "_", as verl's
tracking backend for it does), a state block on a replica lane per step. It lives until
the server's Prometheus scraped its last step and the server has its spans (its hub is
scraped, not pushing; its spans leave every 5 s). Prints RESULT."""

import json
import os
import sys
import time

import ray
import requests

import rl_insight

project, experiment, port, prom = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
server = os.environ["RL_INSIGHT_SERVER_URL"]
ray.init(num_cpus=2, include_dashboard=False)
rl_insight.init(project=project, experiment_name=experiment,
                config={"prometheus": {"metrics_report_port": port}})
KEYS = ("actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl",
        "actor/grad_norm", "actor/lr", "critic/score/mean", "critic/rewards/mean",
        "response_length/mean", "prompt_length/mean", "response_length/clip_ratio",
        "perf/throughput", "perf/time_per_step", "timing_s/gen", "timing_s/update_actor",
        "timing_s/step", "val-core/gsm8k/reward/mean@1", "training/global_step")
t0 = time.time()
for step in range(1, 4):
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
        time.sleep(0.3)
    for key in KEYS:
        value = float(step) if key == "training/global_step" else 0.1 * step
        rl_insight.metric_gauge(key.replace("/", "_").replace("-", "_").replace("@", "_"),
                                value)
    time.sleep(1.0)  # not a wait: the step's training


def delivered() -> bool:
    q = f'rl_insight_monitor_training_global_step{{project="{project}"}} == 3'
    scraped = requests.get(prom + "/api/v1/query", params={"query": q}, timeout=5).json()
    lanes = requests.get(server + "/api/v1/lanes", params={"project": project},
                         timeout=5).json()["lanes"]
    return bool(scraped["data"]["result"]) and sum(x["spans"] for x in lanes) >= 3


deadline = time.time() + 60
while not delivered() and time.time() < deadline:
    time.sleep(0.5)
print("RESULT " + json.dumps({"t_start": t0, "t_done": time.time(),
                              "version": rl_insight.__version__}), flush=True)
ray.shutdown()
