"""Lanes by role, as verl main names them, read the same way everywhere: the classifier
itself, the lane actor a lane goes to, the lane series' role label, the step anatomy's
straggler per role, the doctor's and the Perfetto export's view of them.

verl main is not installable here (0.9.1 is the newest release), so its lane names are
built the way its newest source builds them:
- ``verl/utils/tracking.py`` (verl main, 047621b2): ``RLInsightLogger.rollout_state_lane_id
  (replica_rank, state_lane_prefix="rollout")`` returns ``f"{prefix}_replica_{rank}"``;
- ``verl/workers/rollout/replica.py`` (081479a8): ``state_lane_prefix = model_role +
  ("_" + name_suffix if name_suffix else "")``, model_role ``teacher`` / ``reward`` /
  ``rollout``; its test ``tests/workers/rollout/test_rollout_replica_state_lane_prefix_on_cpu
  .py`` lists the prefixes below, the tracking test the rollout/teacher_default ids;
- ``verl/experimental/teacher_loop/teacher_model.py`` (081479a8): a teacher's engines are
  registered with ``[{"replica": f"{state_lane_prefix}_{rank}"}]``.
"""

from __future__ import annotations

import re

import pytest

from rl_insight.anatomy.rows import step_row
from rl_insight.collector.lanes import DURATION, STATE_GAUGE, LaneCore
from rl_insight.export.timeline import chrome_trace
from rl_insight.ray.actors import lane_actor_name
from rl_insight.wire import laneid
from rl_insight.wire.events import Identity, Span, StateChange

S = 1_000_000_000


def state_lane_prefix(is_reward_model: bool = False, is_teacher_model: bool = False,
                      name_suffix: str = "") -> str:
    """verl main's RolloutReplica.state_lane_prefix (replica.py, 081479a8)."""
    role = "teacher" if is_teacher_model else "reward" if is_reward_model else "rollout"
    return role + (f"_{name_suffix}" if name_suffix else "")


def rollout_state_lane_id(replica_rank: int, prefix: str = "rollout") -> str:
    """verl main's RLInsightLogger.rollout_state_lane_id (tracking.py, 047621b2)."""
    return f"{prefix}_replica_{replica_rank}"


# the cases of verl main's test_state_lane_prefix_distinguishes_model_roles
PREFIXES = [({}, "rollout"), ({"name_suffix": "student"}, "rollout_student"),
            ({"is_reward_model": True}, "reward"),
            ({"is_reward_model": True, "name_suffix": "rm"}, "reward_rm"),
            ({"is_teacher_model": True}, "teacher"),
            ({"is_teacher_model": True, "name_suffix": "deepseek_r1"},
             "teacher_deepseek_r1"),
            ({"is_teacher_model": True, "name_suffix": "default"}, "teacher_default")]


@pytest.mark.parametrize(("kwargs", "prefix"), PREFIXES)
@pytest.mark.parametrize("rank", [0, 1, 2, 17])
def test_every_lane_verl_main_names_is_a_replica_lane_of_its_role(kwargs, prefix, rank):
    assert state_lane_prefix(**kwargs) == prefix
    lane = rollout_state_lane_id(rank, prefix)
    c = laneid.classify(lane)
    assert (c.kind, c.role, c.number) == (laneid.REPLICA, prefix, rank)
    assert c.family == prefix.split("_")[0]
    assert c.dedicated and laneid.is_replica(lane) and not laneid.is_rank(lane)
    # where its engine is: the policy's rollout as the rank, another role as verl's
    # teacher registers it (teacher_model.py: f"{state_lane_prefix}_{rank}")
    key = laneid.replica_key(lane)
    assert key == (str(rank) if prefix == "rollout" else f"{prefix}_{rank}")
    assert laneid.engine_role(key) == prefix
    # the PromQL matchers select it as the classifier does (=~ is anchored)
    assert re.fullmatch(laneid.REPLICA_LANES, lane)
    assert re.fullmatch(laneid.DEDICATED_LANES, lane)
    assert lane_actor_name(lane, "abcdef0123456789") == "rl_insight_lane_" + lane


@pytest.mark.parametrize("lane", ["replica_0", "replica_12"])
def test_verl_0_9_1_and_verl_omni_replica_lanes_stay_the_policys_rollout(lane):
    c = laneid.classify(lane)
    assert (c.kind, c.role, c.family) == (laneid.REPLICA, "rollout", "rollout")
    assert laneid.replica_key(lane) == lane.split("_")[1]


@pytest.mark.parametrize("lane", [
    "experiment=e/sample=1/session=0/traj=0",  # agent_loop_lane_id
    "experiment=x_replica_1/sample=1/session=0/traj=0", "process_123", "traj_1",
    "replica_x", "replica_", "my replica_1", "ranks", "rank_x", "trainer"])
def test_other_lanes_are_not_replica_or_rank_lanes(lane):
    c = laneid.classify(lane)
    assert not c.dedicated
    assert not re.fullmatch(laneid.DEDICATED_LANES, lane) or " " in lane
    assert lane_actor_name(lane, "abcdef0123456789").startswith("rl_insight_lane_node_")


def test_rank_lanes():
    c = laneid.classify("rank_31")
    assert (c.kind, c.role, c.number) == (laneid.RANK, laneid.RANKS, 31)
    assert re.fullmatch(laneid.RANK_LANES, "rank_31")


class Recorder:
    """What a lane core hands its sender (the server's intake in production)."""

    on_server_restart: list = []

    def __init__(self) -> None:
        self.groups: list = []

    def push_groups(self, groups):
        self.groups += groups
        return [True] * len(groups)

    def spans(self, payload):
        return True


def test_lane_series_carry_the_lanes_role():
    sender = Recorder()
    core = LaneCore(sender, "t")
    run = Identity("p", "e")
    teacher, student = (rollout_state_lane_id(2, "teacher_deepseek_r1"),
                        rollout_state_lane_id(0, "rollout_student"))
    items = [StateChange(teacher, "vllm_generate", 1 * S, True, 1),
             StateChange(student, "vllm_generate", 1 * S, True, 2),
             StateChange("rank_0", "actor_update", 1 * S, True, 3),
             Span("vllm_generate", 1 * S, 3 * S, teacher, (), 1, 1, 0, True),
             Span("actor_update", 1 * S, 2 * S, "rank_0", (), 3, 3, 0, True)]
    core.ingest(run, "host:1", items)
    assert {lane for _, lane in core.lanes} == {teacher, student, "rank_0"}
    core.push_metrics()
    text = next(g[2] for g in sender.groups if "project" in g[1])
    # it ended before a push: its gauge 0, its seconds on the lane's role (the timeline)
    assert f'{STATE_GAUGE}{{role="teacher_deepseek_r1",state_lane_id="{teacher}",' \
           'state_name="vllm_generate"} 0' in text
    assert f'{STATE_GAUGE}_seconds_total{{role="teacher_deepseek_r1",state_lane_id=' \
           f'"{teacher}",state_name="vllm_generate"}} 2' in text
    assert f'{STATE_GAUGE}{{role="rollout_student",state_lane_id="{student}",' \
           'state_name="vllm_generate"} 1' in text
    # a replica's durations per lane; the ranks' pooled under "ranks"
    assert f'{DURATION}_count{{role="teacher_deepseek_r1",state_lane_id="{teacher}",' \
           'state_name="vllm_generate"} 1' in text
    assert f'{DURATION}_count{{role="ranks",state_lane_id="ranks",' \
           'state_name="actor_update"} 1' in text


def test_a_teachers_slow_replica_is_not_the_policys_straggler():
    """Student replicas generate 4 s and 2 s; teacher replicas 1 s and 9 s (one slow):
    the step's straggler is the student's, the teacher's is its own row's."""
    lanes = {rollout_state_lane_id(0): [("vllm_generate", 0, 4 * S)],
             rollout_state_lane_id(1): [("vllm_generate", 0, 2 * S)],
             rollout_state_lane_id(0, "teacher_deepseek_r1"): [("vllm_generate", 4 * S,
                                                                5 * S)],
             rollout_state_lane_id(1, "teacher_deepseek_r1"): [("vllm_generate", 4 * S,
                                                                13 * S)],
             "rank_0": [("actor_update", 14 * S, 18 * S)]}
    row = step_row(1, 0, 20 * S, lanes)
    assert row.slowest_replica == "0" and row.straggler_ratio == pytest.approx(4 / 3)
    assert row.generate_s == 4  # the policy's rollout only
    teacher = row.roles["teacher_deepseek_r1"]
    assert teacher.slowest_replica == "teacher_deepseek_r1_1"
    assert teacher.straggler_ratio == pytest.approx(9 / 5)
    assert teacher.generate_s == 9 and teacher.replicas == 2
    assert row.roles["rollout"].generate_s == 4
    # waiting is for the slowest of one's own role
    assert row.replicas["1"].wait_s == 2
    assert row.replicas["teacher_deepseek_r1_0"].wait_s == 8
    assert row.replicas["teacher_deepseek_r1_0"].role == "teacher_deepseek_r1"
    # other: neither any role generating nor a rank busy (13..14 and 18..20)
    assert row.other_s == 3
    assert row.overlap_s == 0  # the teacher's generation is not the policy's rollout


def test_the_perfetto_export_groups_tracks_by_role():
    spans = [{"lane": lane, "state": "vllm_generate", "start_ns": 0, "end_ns": S}
             for lane in ("rank_1", "teacher_x_replica_0", "replica_1", "replica_0",
                          "reward_rm_replica_0", "experiment=e/sample=1/session=0/traj=0")]
    events = chrome_trace(spans)["traceEvents"]
    procs = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert list(sorted(procs, key=procs.get)) == [
        "rollout replicas", "reward_rm replicas", "teacher_x replicas", "trainer ranks",
        "other lanes"]
    threads = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "thread_name"}
    assert threads["teacher_x_replica_0"] == procs["teacher_x replicas"]
    assert threads["replica_0"] == threads["replica_1"] == procs["rollout replicas"]
