"""Agent-loop sessions: one multi-turn agent session (a sample, a session, its
trajectories) reported once it is done, for the agent-loop trajectory dashboard.

The protocol follows upstream 0.3.0 where verl depends on it: the same call signature,
``.identity`` with a ``state_lane_id`` of ``experiment=<e>/sample=<s>/session=<n>/traj=<t>``,
and an ``agent_session`` span carrying the identity. Unlike upstream, the Prometheus side
is bounded: no series per sample, session or trajectory (an RL run has millions), only
counters and histograms labelled by status, runner and reward source. The per-session
detail goes to Tempo, as spans (one ``agent_session``, one ``agent_trajectory`` per
trajectory), where high cardinality is cheap.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
from rl_insight.wire.attributes import LANE_ATTR

SESSION_SPAN = "agent_session"
TRAJECTORY_SPAN = "agent_trajectory"
# histogram bounds of the agent-loop families (the default bounds are for seconds)
REWARD_BUCKETS = (-1.0, -0.5, 0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 2.0, 5.0)
COUNT_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
BUCKETS = {"agent_loop_trajectory_reward": REWARD_BUCKETS,
           "agent_loop_trajectory_turns": COUNT_BUCKETS,
           "agent_loop_trajectories_per_session": COUNT_BUCKETS,
           "agent_loop_session_duration_seconds": DURATION_BUCKETS}


def agent_loop_lane_id(experiment_name: Any, sample: Any, session: Any, traj: Any) -> str:
    """The lane of one trajectory, as upstream names it (dashboards search by it):
    ``experiment=<e>/sample=<s>/session=<n>/traj=<t>``. Uni-Agent derives the lanes of a
    session's later trajectories with it (``traj = chain_id - 1``). A pure function: it
    needs no ``init``."""
    return f"experiment={experiment_name}/sample={sample}/session={session}/traj={traj}"


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None  # NaN: no reward


def _trajectory(index: int, traj: Any) -> tuple[str, float | None, int]:
    """(id, reward, turns) of a trajectory object (verl's AgentLoopOutput-like objects
    carry ``chain_id``, ``reward_score``, ``num_turns``) or a mapping with those keys."""
    get = traj.get if isinstance(traj, dict) else (lambda k, d=None: getattr(traj, k, d))
    chain = get("chain_id")
    try:
        tid = str(int(chain) - 1) if chain is not None else str(index)
    except (TypeError, ValueError):
        tid = str(chain)
    try:
        turns = int(get("num_turns", 0) or 0)
    except (TypeError, ValueError):
        turns = 0
    return tid, _number(get("reward_score")), turns


@dataclass(frozen=True)
class AgentLoopSession:
    """One session: ``identity`` to attach to the session's own states and spans, and
    ``finish`` once its trajectories are done."""

    identity: dict[str, Any]
    start_ns: int

    def finish(self, *, trajectories: Sequence[Any], status: str,
               runner_name: str | None = None, reward_source: str | None = None,
               finished: bool | None = None) -> None:
        """Report the finished session. Never raises."""
        try:
            self._finish(list(trajectories or ()), str(status), runner_name or "",
                         reward_source or "", finished)
        except Exception:
            RUNTIME.failed("agent_loop_session.finish")

    def _finish(self, trajectories: list, status: str, runner: str, source: str,
                finished: bool | None) -> None:
        end = time.time_ns()
        c = RUNTIME.client or RUNTIME.get()
        if c is None:
            return
        for name, bounds in BUCKETS.items():
            c.bucket_map.setdefault(name, bounds)
        ident = self.identity
        labels = {"status": status, "runner_name": runner, "reward_source": source}
        trajs = [_trajectory(i, t) for i, t in enumerate(trajectories)]
        rewards = [r for _, r, _ in trajs if r is not None]
        api.metric_count("agent_loop_sessions", 1.0, "Agent-loop sessions finished",
                         **labels)
        api.metric_count("agent_loop_trajectories", float(len(trajs)),
                         "Agent-loop trajectories finished", **labels)
        api.metric_histogram("agent_loop_session_duration_seconds", (end - self.start_ns) / 1e9,
                             "Agent-loop session duration", **labels)
        api.metric_histogram("agent_loop_trajectories_per_session", float(len(trajs)),
                             "Trajectories per agent-loop session", **labels)
        for _, reward, turns in trajs:
            if reward is not None:
                api.metric_histogram("agent_loop_trajectory_reward", reward,
                                     "Reward of each agent-loop trajectory", **labels)
            api.metric_histogram("agent_loop_trajectory_turns", float(turns),
                                 "Turns of each agent-loop trajectory", **labels)
        step = _number(ident.get("global_steps"))
        if step is not None:
            api.metric_gauge("agent_loop_global_step", step,
                             "The global step of the latest finished agent-loop session")
        api.metric_gauge("agent_loop_last_session_end_unixtime", end / 1e9,
                         "When the latest agent-loop session finished")
        attrs = {**ident, "monitor.trace_source": "session", "runner_name": runner,
                 "status": status, "num_trajectories": len(trajs), "reward_source": source,
                 "finished": "" if finished is None else bool(finished)}
        if rewards:
            attrs["reward_mean"] = sum(rewards) / len(rewards)
            attrs["reward_max"] = max(rewards)
        api.trace_span(name=SESSION_SPAN, start_time_ns=self.start_ns, end_time_ns=end,
                       attributes=attrs)
        for tid, reward, turns in trajs:
            lane = agent_loop_lane_id(ident["experiment_name"], ident["sample"],
                                      ident["session"], tid)
            api.trace_span(name=TRAJECTORY_SPAN, start_time_ns=self.start_ns, end_time_ns=end,
                           attributes={**ident, "traj": tid, LANE_ATTR: lane,
                                       "reward": "" if reward is None else reward,
                                       "num_turns": turns, "status": status})


def agent_loop_session(*, project: Any = None, experiment_name: Any, sample: Any,
                       session: Any, traj: Any = 0, uid: Any = None, global_steps: Any = None,
                       session_id: Any = None) -> AgentLoopSession:
    """Start one agent-loop session (verl's ``RLInsightLogger.agent_loop_session``)."""
    experiment_name = str(experiment_name)
    sample, session, traj = str(sample), str(session), str(traj)
    return AgentLoopSession(
        identity={"project": "" if project is None else str(project),
                  "experiment_name": experiment_name, "sample": sample, "session": session,
                  "traj": traj, LANE_ATTR: agent_loop_lane_id(experiment_name, sample,
                                                                     session, traj),
                  "uid": "" if uid is None else str(uid),
                  "global_steps": "" if global_steps is None else global_steps,
                  "session_id": "" if session_id is None else str(session_id)},
        start_ns=time.time_ns())
