"""``rl_insight.agent_loop``: the module path upstream 0.3.0 and verl import."""

from rl_insight.client.agent_loop import (
    AgentLoopSession,
    agent_loop_lane_id,
    agent_loop_session,
)

__all__ = ["AgentLoopSession", "agent_loop_lane_id", "agent_loop_session"]
