"""FAKE openrlhf.trainer.ray.ppo_actor.PolicyModelActor (0.11.2): ``fit`` answers what the
real one's ``ppo_train`` returns (policy_loss, entropy_loss, actor_lr, actor_grad_norm and
the experiences' info keys: trainer/ray/ppo_actor.py l.370-399, 240-257);
``broadcast_to_vllm`` calls each engine's ``update_weight`` as the real one does."""

from __future__ import annotations

import os
import time

import ray

from openrlhf.trainer.ray.launcher import ModelRole

FIT_S = float(os.environ.get("OPENRLHF_FAKE_FIT_S", "0.25"))


class PolicyModelActor(ModelRole):
    steps = 0

    def fit(self, kl_ctl: float = 0):
        time.sleep(FIT_S)
        self.steps += 1
        n = self.steps
        return {"policy_loss": 0.5 / n, "entropy_loss": 1.2 - 0.02 * n, "actor_lr": 1e-6,
                "actor_grad_norm": 0.8 + 0.01 * n, "kl": 0.001 * n, "reward": 0.4 + 0.05 * n,
                "response_clip_ratio": 0.0, "response_length": 12.0, "total_length": 30.0}

    def broadcast_to_vllm(self):
        ray.get([e.update_weight.remote("model.weight", "bfloat16", (4, 4))
                 for e in self.vllm_engines or []])
