"""What a lane id says: its kind (a rollout-engine replica, a trainer rank, the
trainer's step marks, or any other lane), the role of a replica and its number.

The one place that reads lane ids: the lane actors (which lane gets an actor of its
own), the step anatomy (per role), the alerts, the status page, the report, the
Perfetto export and the dashboards all ask here, so a lane name a caller invents
(verl main's ``<role>_replica_<n>``) is either known everywhere or nowhere.

Names, by caller:
- verl 0.9.1 and VeRL-Omni: ``replica_<n>`` (``vllm_async_server.py`` /
  ``vllm_omni_async_server.py``: ``state_lane_id=f"replica_{replica_rank}"``), the
  policy's own rollout;
- verl main: ``RLInsightLogger.rollout_state_lane_id(replica_rank, state_lane_prefix)``,
  ``<prefix>_replica_<n>`` (``rollout_replica_0``, ``rollout_student_replica_1``,
  ``reward_replica_0``, ``reward_rm_replica_0``, ``teacher_replica_0``,
  ``teacher_deepseek_r1_replica_2``; its tests list these);
- trainer ranks: ``rank_<r>`` (``DistProfiler.annotate``, every verl version);
- ``trainer``: this package's own step marks (``rl_insight.client.steps``);
- ``driver``: a framework's step loop, the phases it runs one after another, where the
  framework says no more (ROLL's and NeMo-RL's driver spans, AReaL's trainer scopes,
  TRL's profiled calls: rl_insight/frameworks/); one lane per run.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

REPLICA = "replica"
RANK = "rank"
TRAINER = "trainer"
DRIVER = "driver"
OTHER = "other"

ROLLOUT = "rollout"  # the role of a bare replica_<n>: the policy's own rollout
RANKS = "ranks"  # the role of every trainer rank lane
# a role is whatever prefix the caller gives before `_replica_` (verl main builds it
# from the rollout's role and a model name: teacher_deepseek_r1), never a path (the
# agent-loop lanes hold slashes); the number is the replica's rank
_REPLICA = re.compile(r"^(?:([^/\s]+?)_)?replica_(\d+)$")
_RANK = re.compile(r"^rank_(\d+)$")

# The same, as RE2 patterns for PromQL label matchers (=~ anchors them): a dashboard or
# an alerting rule selecting replica or rank lanes uses these, never a pattern of its own
REPLICA_LANES = "([^/]+_)?replica_[0-9]+"
RANK_LANES = "rank_[0-9]+"
DEDICATED_LANES = f"{REPLICA_LANES}|{RANK_LANES}|{DRIVER}"
# role families a dashboard shows apart: the policy's rollout, reward models, teachers
FAMILIES = (ROLLOUT, "reward", "teacher")


class Lane(NamedTuple):
    kind: str  # REPLICA, RANK, DRIVER, TRAINER or OTHER
    role: str  # a replica's role (rollout, reward_rm, teacher_x ...); RANKS; DRIVER; "" else
    number: int | None  # the replica's or rank's number

    @property
    def dedicated(self) -> bool:
        """A lane with series of its own (state gauges): replicas, ranks and a
        framework's driver. Other lanes (per request, per trajectory: thousands) are
        pooled per state."""
        return self.kind in (REPLICA, RANK, DRIVER)

    @property
    def family(self) -> str:
        """rollout, reward or teacher for a replica (``rollout_student`` is the rollout,
        ``teacher_deepseek_r1`` a teacher); the role itself for any other role."""
        return family_of(self.role)


_NOT_DEDICATED = Lane(OTHER, "", None)
_TRAINER = Lane(TRAINER, "", None)
_DRIVER = Lane(DRIVER, DRIVER, None)


@functools.lru_cache(maxsize=65536)
def classify(lane: str | None) -> Lane:
    """The kind, role and number of a lane id (cached: a lane actor asks per event)."""
    if not lane:
        return _NOT_DEDICATED
    m = _REPLICA.match(lane)
    if m:
        return Lane(REPLICA, m.group(1) or ROLLOUT, int(m.group(2)))
    m = _RANK.match(lane)
    if m:
        return Lane(RANK, RANKS, int(m.group(1)))
    if lane == TRAINER:
        return _TRAINER
    if lane == DRIVER:
        return _DRIVER
    return _NOT_DEDICATED


def is_replica(lane: str | None) -> bool:
    return classify(lane).kind == REPLICA


def is_rank(lane: str | None) -> bool:
    return classify(lane).kind == RANK


def is_dedicated(lane: str | None) -> bool:
    return classify(lane).dedicated


def family_of(role: str) -> str:
    """rollout, reward or teacher for a role of those families; the role otherwise."""
    head = role.split("_", 1)[0]
    return head if head in FAMILIES else role


def replica_key(lane: str) -> str:
    """How a replica lane is named where engines are: the ``replica`` label verl gives a
    replica's engine target. The policy's rollout registers ``{"replica": <rank>}``
    (``llm_server.py``), a teacher ``{"replica": f"{state_lane_prefix}_{rank}"}``
    (verl main ``teacher_model.py`` at 081479a8): "0" for ``replica_0`` and
    ``rollout_replica_0``, "teacher_x_2" for ``teacher_x_replica_2``."""
    c = classify(lane)
    if c.kind != REPLICA:
        return lane
    return str(c.number) if c.role == ROLLOUT else f"{c.role}_{c.number}"


_ENGINE_KEY = re.compile(r"^(.+?)_(\d+)$")


def engine_role(replica: str) -> str:
    """The role of an engine target from its ``replica`` label (the inverse of
    :func:`replica_key`): ``rollout`` for a plain number, the prefix of
    ``<role>_<n>`` otherwise, "" for a label of neither form."""
    replica = str(replica)
    if replica.isdigit():
        return ROLLOUT
    m = _ENGINE_KEY.match(replica)
    return m.group(1) if m else ""


def role_of(lane: str | None) -> str:
    """A replica's role, ``ranks`` for a rank lane, ``driver`` for the driver's, ""
    for any other lane."""
    return classify(lane).role


def sort_key(lane: str) -> tuple:
    """The driver first (the step's phases), then replica lanes by family, role and
    number; then ranks by number; then the rest by name (a timeline reads top-down:
    driver, rollout, reward, teacher, ranks, others)."""
    c = classify(lane)
    if c.kind == DRIVER:
        return (-1, 0, "", 0, lane)
    if c.kind == REPLICA:
        fam = FAMILIES.index(c.family) if c.family in FAMILIES else len(FAMILIES)
        return (0, fam, c.role, c.number, lane)
    if c.kind == RANK:
        return (1, 0, "", c.number, lane)
    return (2, 0, "", 0, lane)


# everyday words the package also uses in other senses (a label's name, a JSON key, a
# config section: ``trainer.rl_insight``): left out of tests/test_wire.py's scan
EVERYDAY = frozenset({"REPLICA", "RANK", "TRAINER", "DRIVER", "OTHER", "ROLLOUT", "RANKS",
                      "FAMILIES"})
