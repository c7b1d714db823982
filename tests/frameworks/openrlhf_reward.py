"""The run's reward function, as OpenRLHF loads one (``--reward.remote_url <file>.py``:
openrlhf 0.11.2 utils/agent.py SingleTurnAgentExecutor, inside each vLLM engine's actor):
``reward_func(queries, prompts, labels)``. A prompt labelled ``slow`` takes
``OPENRLHF_SLOW_REWARD_S`` seconds (a slow remote judge): its step's generation is slow."""

import os
import time


def reward_func(queries, prompts, labels):
    if "slow" in labels:
        time.sleep(float(os.environ.get("OPENRLHF_SLOW_REWARD_S", "1.0")))
    return {"rewards": 1.0 if len(queries[0]) % 2 else 0.0, "scores": 1.0,
            "extra_logs": {"judge_calls": 1.0}}
