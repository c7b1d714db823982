"""rl_insight.ray: attach a Ray job to RL-Insight; the hub and lane actors; hooks."""

from rl_insight.ray.actors import HUB_NAME, NAMESPACE, find_hub
from rl_insight.ray.attach import Attachment, attach, hub_stats, runtime_env

__all__ = ["HUB_NAME", "NAMESPACE", "Attachment", "attach", "find_hub", "hub_stats",
           "runtime_env"]
