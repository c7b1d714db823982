"""FAKE openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker (0.11.2): the
forward passes (actor, reference, critic, reward model) and the advantages stood for by a
reference forward call and a sleep; each experience's info gets its reward and KL as the
real one's does (experience_maker.py l.80-96)."""

from __future__ import annotations

import os
import time

import ray
import torch

MAKE_S = float(os.environ.get("OPENRLHF_FAKE_MAKE_S", "0.12"))


class RemoteExperienceMaker:
    def __init__(self, actor_model_group, critic_model_group, reward_model_group,
                 initial_model_group, kl_controller, strategy=None, tokenizer=None, **_):
        self.initial_model_group = initial_model_group

    def make_experience_batch(self, rollout_samples):
        if self.initial_model_group is not None:
            ray.get(self.initial_model_group.async_run_method_batch(
                method_name="forward", sequences=[]))
        time.sleep(MAKE_S)
        for exp in rollout_samples:
            reward = exp.rewards if exp.rewards is not None else torch.zeros(1)
            exp.info["reward"] = reward.float()
            exp.info["kl"] = torch.full_like(reward.float(), 0.001)
        return rollout_samples
