"""FAKE openrlhf.trainer.ray.ppo_critic.CriticModelActor (0.11.2): a role only (the run
uses group_norm: no critic)."""

from openrlhf.trainer.ray.launcher import ModelRole


class CriticModelActor(ModelRole):
    def fit(self):
        return {"critic_loss": 0.0, "critic_lr": 0.0}
