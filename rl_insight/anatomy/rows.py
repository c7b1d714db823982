"""The anatomy of an RL step: where its wall time went, computed from state intervals.

Plain data in (the step's window, the replica and rank lanes' state intervals), plain
data out (one :class:`StepRow`). Lanes are read by :mod:`rl_insight.wire.laneid`: replica
lanes of every role, each role with its own straggler. No clock, no I/O: the server feeds
it what arrived, the tests feed it what they made, and both get the same answer.

Definitions (docs/anatomy.md has them with the measured error):
- a step's window runs from the previous step mark to its own (contiguous windows, so
  the steps add up to the run's wall time); the first step seen starts at the trainer's
  own ``timing_s/step`` before its mark;
- per replica: *generating* is the union of its ``*_generate`` states in the window,
  *idle* the rest of the window, *waiting* the time from its last generation end to the
  slowest replica's (what a straggler costs the others);
- straggler ratio: the slowest replica's generating time over the median replica's;
- trainer time per phase: the union, across ranks, of each rank state; trainer idle:
  the window minus the union of every rank state;
- weight update: the union of the ranks' ``update_weights``;
- overlap: rollout (any replica generating) and training (any rank busy) at once;
- staleness: weight updates finished between the start of the generation the trainer
  consumed (the last one ended before its first phase in the window) and that phase;
- a framework's driver lane (``driver``: its step loop's phases, from its own spans) adds
  its generation to the rollout (no replica breakdown: no straggler) and its other states
  to the trainer's phases; its ``idle`` (waiting) stays in ``other``;
- goodput buckets (NeMo-RL's ``rl.bucket``): the union of each bucket's spans.

A framework that logs timing keys and no spans gets its rows from :func:`timing_row`
instead: the same fields, from the keys' seconds (``source`` "timing_keys").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rl_insight.anatomy import bound as accounting
from rl_insight.anatomy import experts as expert_load
from rl_insight.anatomy import gpu as gpu_figures
from rl_insight.anatomy import ranks as rank_figures
from rl_insight.anatomy.intervals import Interval, clip, intersect, length, union
from rl_insight.anatomy.requests import (
    Request,
    last_to_finish,
    summarize,
    tail,
    tail_share,
)
from rl_insight.frameworks.table import Parts
from rl_insight.wire import laneid, rank_evidence

__all__ = ["Interval", "clip", "intersect", "length", "union", "step_row", "timing_row",
           "StepRow", "ReplicaRow", "RoleRow"]

WEIGHT_UPDATE = "update_weights"
IDLE = "idle"  # a driver's waiting, as the framework names it
LANES, TIMING_KEYS = "lanes", "timing_keys"  # where a row's figures come from
NS = 1e9

is_generation = accounting.is_generation


@dataclass
class ReplicaRow:
    generate_s: float
    idle_s: float
    wait_s: float
    role: str = laneid.ROLLOUT


@dataclass
class RoleRow:
    """The replicas of one role (the policy's rollout, a reward model, a teacher) in a
    step: each role has its own straggler (a teacher's slow replica is not the
    student's straggler)."""

    generate_s: float  # any replica of the role generating
    replicas: int
    straggler_ratio: float | None = None
    slowest_replica: str | None = None
    median_generate_s: float | None = None


@dataclass
class StepRow:
    step: int
    start_ns: int
    end_ns: int
    duration_s: float
    generate_s: float  # any replica of the policy's rollout (family rollout) generating
    # by replica key (laneid.replica_key: "0" for the rollout role, "<role>_<n>" else)
    replicas: dict[str, ReplicaRow] = field(default_factory=dict)
    straggler_ratio: float | None = None  # of the policy's rollout
    slowest_replica: str | None = None
    median_generate_s: float | None = None
    weight_update_s: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # rank state -> seconds
    trainer_busy_s: float = 0.0
    trainer_idle_s: float = 0.0
    overlap_s: float = 0.0
    staleness: int | None = None
    roles: dict[str, RoleRow] = field(default_factory=dict)
    other_s: float = 0.0  # no replica of any role generating and no rank busy
    # what the step waited for where the framework's timers say so (a timing key of the
    # idle part, by key: SkyRL's generation buffer, OpenRLHF's vLLM lock): no part of other
    waits: dict[str, float] = field(default_factory=dict)
    # the engines' own request spans that ended in the window (rl_insight.anatomy.requests)
    requests: dict[str, dict] = field(default_factory=dict)  # per role: summarize()
    tail: list[dict] = field(default_factory=list)  # the slowest requests
    # per role, the requests its slowest replica finished last (the critical path)
    critical: dict[str, list[dict]] = field(default_factory=dict)
    tail_share: float | None = None  # share of the step after 90% of requests finished
    generated_tokens: int | None = None
    # request spans the server could not hold for this step (over
    # anatomy.max_requests_per_run): its request figures are short by these
    requests_dropped: int = 0
    # goodput: GPU-seconds busy and idle per role (replica roles, "ranks", "weight_sync")
    gpu_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    tokens_per_gpu_second: float | None = None
    # seconds per goodput bucket (productive, overhead, idle, wasted) where the framework
    # tags its spans with one (NeMo-RL's rl.bucket)
    buckets: dict[str, float] = field(default_factory=dict)
    source: str = LANES  # LANES, or TIMING_KEYS: no replica breakdown, no straggler
    framework: str | None = None  # the table its timing keys were read with
    # the trainer ranks (rl_insight.anatomy.ranks): compute and wait per rank (those that
    # waited least, at most ranks.KEEP) and the median rank's, the rank the step waited
    # for (its phase, role, kind, lead, node and GPU), how each phase was read
    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    rank_median: dict[str, float] = field(default_factory=dict)
    rank_count: int = 0
    culprit: dict | None = None
    rank_evidence: dict[str, str] = field(default_factory=dict)
    # phases whose evidence disagrees (rank_evidence "unclear"): the rank each source
    # pointed at (ranks.why_unclear says it)
    rank_unclear: dict[str, dict] = field(default_factory=dict)
    # a rank state told inside another on the same lanes (verl's train_batch inside
    # actor_update): inner -> outer; the explanation counts the outer for its own share
    enclosed: dict[str, str] = field(default_factory=dict)
    # the ranks' GPUs from a profiler's kernels (rl_insight.anatomy.gpu): busy, comm,
    # overlap and idle per rank (those whose kernels ran longest) and the median rank's,
    # the rank whose kernels ran longest; per phase, an MoE model's expert load
    gpu_ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    gpu_median: dict[str, float] = field(default_factory=dict)
    gpu_longest: dict | None = None
    gpu_count: int = 0
    experts: dict[str, dict] = field(default_factory=dict)
    # what the step's wall time waited on and its GPU-seconds by role and cause
    # (rl_insight.anatomy.bound): the bound, its verdict and the what-if read it
    bound: accounting.StepBound | None = None

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("replicas", "roles", "bound")}
        d["bound"] = None if self.bound is None else self.bound.as_dict()
        d["replicas"] = {r: v.__dict__ for r, v in sorted(self.replicas.items(),
                                                          key=lambda kv: _num(kv[0]))}
        d["roles"] = {r: v.__dict__ for r, v in sorted(self.roles.items())}
        return d


def _num(replica: str) -> tuple[int, str, int]:
    """The rollout role's replicas ("0", "1") first, by number; other roles' after."""
    if replica.isdigit():
        return (0, "", int(replica))
    role, _, n = replica.rpartition("_")
    return (1, role, int(n)) if n.isdigit() else (1, replica, 0)


def _straggler(busy: Mapping[str, float]) -> tuple[float | None, str | None, float | None]:
    """(straggler ratio, slowest replica, median) of the replicas that generated."""
    if not busy:
        return None, None, None
    median = statistics.median(busy.values())
    # ties: the first replica in order (the rollout role's, lowest number)
    order = {r: i for i, r in enumerate(sorted(busy, key=_num))}
    slowest = max(busy, key=lambda r: (busy[r], -order[r]))
    return (busy[slowest] / median if median > 0 else None), slowest, median


def step_row(step: int, start_ns: int, end_ns: int,
             lanes: Mapping[str, Iterable[tuple[str, int, int]]],
             requests: Sequence[Request] = (), gpus_per_replica: float = 0.0,
             gpus_per_rank: float = 0.0,
             buckets: Mapping[str, Iterable[Interval]] | None = None,
             first_seen: Mapping[str, int] | None = None) -> StepRow:
    """The anatomy of one step. ``lanes``: lane id -> (state, start, end) intervals; they
    may reach outside the window (sums are clipped to it) and should include the
    previous step's, which staleness looks back into. Replica lanes of every role count
    (``replica_<n>``, ``<role>_replica_<n>``); the step's own rollout, straggler,
    overlap and staleness are the policy's rollout's (role family ``rollout``), and each
    role has its own row. ``requests``: the engines' request spans that ended in the
    window (the server's rule: a request belongs to the step it ended in); GPU-seconds
    count ``gpus_per_replica`` per replica lane and ``gpus_per_rank`` per rank lane;
    ``buckets``: goodput bucket -> its spans' intervals. A rank lane's interval may carry
    a fourth item, what its client measured (rl_insight.anatomy.ranks): the ranks'
    compute, wait and culprit come from it. ``first_seen``: when each lane's first state
    began (the GPU accounting's ``startup`` before it); GPUs per lane of 0 or less are
    not told (one assumed, said so in ``bound``)."""
    window = end_ns - start_ns
    sorted_ = _Lanes.of(lanes)
    gen_by_replica, role_of = sorted_.gen_by_replica, sorted_.role_of
    rank_states, rank_all = sorted_.rank_states, sorted_.rank_all
    driver_gen, per_rank = sorted_.driver_gen, sorted_.per_rank
    gen_by_replica = {r: union(iv) for r, iv in gen_by_replica.items()}
    policy = {r: iv for r, iv in gen_by_replica.items()
              if laneid.family_of(role_of[r]) == laneid.ROLLOUT}
    gen_union = clip(union([*(iv for ivs in policy.values() for iv in ivs), *driver_gen]),
                     start_ns, end_ns)
    busy_union = clip(union(rank_all), start_ns, end_ns)
    row = StepRow(step, start_ns, end_ns, window / NS, length(gen_union) / NS)
    inside = {r: clip(iv, start_ns, end_ns) for r, iv in gen_by_replica.items()}
    if driver_gen and not policy:  # the framework's whole rollout, replicas unknown
        row.roles[laneid.ROLLOUT] = RoleRow(row.generate_s, 0)
    _replicas_and_roles(row, inside, role_of, window)
    row.straggler_ratio, row.slowest_replica, row.median_generate_s = _straggler(
        {r: row.replicas[r].generate_s for r in policy if row.replicas[r].generate_s > 0})
    for state, iv in rank_states.items():
        row.phases[state] = length(clip(union(iv), start_ns, end_ns)) / NS
    row.weight_update_s = row.phases.get(WEIGHT_UPDATE, 0.0)
    row.trainer_busy_s = length(busy_union) / NS
    row.trainer_idle_s = (window - length(busy_union)) / NS
    row.overlap_s = length(intersect(gen_union, busy_union)) / NS
    anything = union([*busy_union, *gen_union,
                      *(iv for ivs in inside.values() for iv in ivs)])
    row.other_s = (window - length(anything)) / NS
    if driver_gen and not policy:
        policy = {laneid.ROLLOUT: union(driver_gen)}
    row.staleness = _staleness(start_ns, end_ns, rank_states, policy)
    for bucket, iv in (buckets or {}).items():
        seconds = length(clip(union(iv), start_ns, end_ns)) / NS
        if seconds > 0:
            row.buckets[bucket] = seconds
    _goodput(row, per_rank, requests, max(gpus_per_replica, 0.0) or 1.0,
             max(gpus_per_rank, 0.0) or 1.0)
    _ranks(row, sorted_.rank_lanes)
    row.enclosed = _enclosed(sorted_.rank_lanes, start_ns, end_ns)
    row.bound = accounting.step_bound(start_ns, end_ns, lanes, requests, first_seen,
                                      gpus_per_replica, gpus_per_rank)
    return row


def _ranks(row: StepRow, lanes: Mapping[str, list[tuple]]) -> None:
    """Each rank's compute and wait, and the rank the step waited for."""
    if not lanes:
        return
    phases = rank_figures.from_lanes(lanes, row.start_ns, row.end_ns, by_end=True)
    got = rank_figures.attribute(phases)
    row.ranks, row.rank_median, row.rank_count = got.ranks, got.median, got.count
    row.culprit, row.rank_evidence = got.culprit, got.evidence
    row.rank_unclear = got.unclear
    gpu = gpu_figures.step_gpu(phases)
    row.gpu_ranks, row.gpu_median, row.gpu_count = gpu.ranks, gpu.median, gpu.count
    row.gpu_longest = gpu.longest
    row.experts = expert_load.from_evidence(
        ((phase, p.evidence) for phase, ranks in phases.items() for p in ranks.values()),
        rank_evidence.EXPERT_TOKENS)


def _enclosed(lanes: Mapping[str, list[tuple]], lo: int, hi: int) -> dict[str, str]:
    """Rank states that lie inside one other state on every lane that told them in the
    step (verl nests ``train_batch`` in ``actor_update``): inner -> outer."""
    outer_of: dict[str, set[str]] = {}
    for intervals in lanes.values():
        ivs = [iv for iv in intervals if iv[2] > lo and iv[1] < hi]
        for inner in ivs:
            around = {o[0] for o in ivs if o[0] != inner[0] and o[1] <= inner[1] and
                      inner[2] <= o[2] and o[2] - o[1] > inner[2] - inner[1]}
            if inner[0] in outer_of:
                outer_of[inner[0]] &= around
            else:
                outer_of[inner[0]] = around
    return {inner: next(iter(o)) for inner, o in outer_of.items() if len(o) == 1}


def timing_row(step: int, end_ns: int, parts: Parts, framework: str,
               start_ns: int | None = None,
               wait_causes: Mapping[str, str] | None = None) -> StepRow:
    """A step's anatomy from its timing keys (a framework that logs no spans): the
    rollout's generation, each phase, the weight sync; ``other`` what the parts leave of
    the step. Parts that add up to more than the step ran at once (an asynchronous
    trainer): ``overlap`` is at least that much. The step's time is the framework's own
    where it logs one, else the window since ``start_ns``."""
    if parts.step_s is not None:
        duration = parts.step_s
        start_ns = end_ns - int(duration * NS)
    else:
        start_ns = end_ns if start_ns is None else min(start_ns, end_ns)
        duration = (end_ns - start_ns) / NS
    row = StepRow(step, start_ns, end_ns, float(duration), parts.generate_s,
                  source=TIMING_KEYS, framework=framework)
    row.phases = {p: s for p, s in parts.phases.items() if s > 0}
    row.weight_update_s = parts.weight_update_s
    busy = sum(row.phases.values())
    row.trainer_busy_s = min(busy, duration)
    row.trainer_idle_s = max(0.0, duration - busy)
    if parts.generate_s > 0:
        row.roles[laneid.ROLLOUT] = RoleRow(parts.generate_s, 0)
    row.waits = {k: s for k, s in parts.waits.items() if s > 0}
    work = parts.generate_s + busy
    row.other_s = max(0.0, duration - work - sum(row.waits.values()))
    row.overlap_s = max(0.0, work - duration)
    row.bound = accounting.timing_bound(duration, row.generate_s, row.phases,
                                        row.weight_update_s, row.waits, row.other_s,
                                        row.overlap_s, wait_causes)
    return row


def _goodput(row: StepRow, per_rank: Mapping[str, tuple[list, list]],
             requests: Sequence[Request], gpus_per_replica: float,
             gpus_per_rank: float) -> None:
    """What the step's GPUs did: busy and idle GPU-seconds per replica role, the ranks'
    work and their weight sync; tokens generated per GPU-second; the engines' requests
    per role and the slowest of them."""
    window = row.duration_s
    for rep in row.replicas.values():
        g = row.gpu_seconds.setdefault(rep.role, {"busy": 0.0, "idle": 0.0})
        g["busy"] += rep.generate_s * gpus_per_replica
        g["idle"] += rep.idle_s * gpus_per_replica
    if per_rank:
        lo, hi = row.start_ns, row.end_ns
        work = sum(length(clip(union(w), lo, hi)) for w, _ in per_rank.values()) / NS
        sync = sum(length(clip(union(u), lo, hi)) for _, u in per_rank.values()) / NS
        row.gpu_seconds[laneid.RANKS] = {
            "busy": work * gpus_per_rank,
            "idle": max(0.0, len(per_rank) * window - work - sync) * gpus_per_rank}
        row.gpu_seconds["weight_sync"] = {"busy": sync * gpus_per_rank, "idle": 0.0}
    if requests:
        row.requests = summarize(requests)
        row.tail = tail(requests)
        for role, rr in row.roles.items():
            if rr.slowest_replica is not None:
                row.critical[role] = last_to_finish(requests, rr.slowest_replica)
        row.tail_share = tail_share(requests, row.start_ns, row.end_ns)
        row.generated_tokens = sum(r.completion_tokens or 0 for r in requests)
        total = sum(g["busy"] + g["idle"] for k, g in row.gpu_seconds.items()
                    if k != "weight_sync") + row.gpu_seconds.get(
                        "weight_sync", {}).get("busy", 0.0)
        if total > 0:
            row.tokens_per_gpu_second = row.generated_tokens / total


def _staleness(start_ns: int, end_ns: int, rank_states: Mapping[str, list[Interval]],
               gen_by_replica: Mapping[str, list[Interval]]) -> int | None:
    """Weight updates the consumed batch is behind, the worst replica's; None when the
    lanes cannot say (no trainer phase in the window, or no generation before it)."""
    consume = min((s for state, iv in rank_states.items() if state != WEIGHT_UPDATE
                   for s, _ in iv if start_ns <= s < end_ns), default=None)
    if consume is None:
        return None
    updates = union(rank_states.get(WEIGHT_UPDATE, []))
    worst = None
    for iv in gen_by_replica.values():
        done = [g for g in iv if g[1] <= consume]
        if done:
            began = done[-1][0]
            n = sum(1 for _, e in updates if began < e <= consume)
            worst = n if worst is None else max(worst, n)
    return worst


@dataclass
class _Lanes:
    """A step's lanes sorted by what they are: each replica's generation (and its role),
    the ranks' states (all, by state, and per rank: work and weight sync), the driver's
    generation; a driver's other states count as the trainer's phases."""

    gen_by_replica: dict[str, list[Interval]] = field(default_factory=dict)
    role_of: dict[str, str] = field(default_factory=dict)
    rank_states: dict[str, list[Interval]] = field(default_factory=dict)
    rank_all: list[Interval] = field(default_factory=list)
    driver_gen: list[Interval] = field(default_factory=list)
    per_rank: dict[str, tuple[list[Interval], list[Interval]]] = field(default_factory=dict)
    rank_lanes: dict[str, list[tuple]] = field(default_factory=dict)

    @classmethod
    def of(cls, lanes: Mapping[str, Iterable[tuple[str, int, int]]]) -> _Lanes:
        out = cls()
        for lane, intervals in lanes.items():
            c = laneid.classify(lane)
            if c.kind == laneid.REPLICA:
                key = laneid.replica_key(lane)
                out.role_of[key] = c.role
                gen = out.gen_by_replica.setdefault(key, [])
                gen.extend((iv[1], iv[2]) for iv in intervals if is_generation(iv[0]))
            elif c.kind == laneid.RANK:
                own = out.per_rank.setdefault(lane, ([], []))
                intervals = out.rank_lanes[lane] = list(intervals)
                for state, s, e, *_ in intervals:
                    out._phase(state, s, e)
                    own[state == WEIGHT_UPDATE].append((s, e))
            elif c.kind == laneid.DRIVER:
                for state, s, e, *_ in intervals:
                    if is_generation(state):
                        out.driver_gen.append((s, e))
                    elif state != IDLE:  # waiting is no phase: it stays in `other`
                        out._phase(state, s, e)
        return out

    def _phase(self, state: str, s: int, e: int) -> None:
        self.rank_all.append((s, e))
        self.rank_states.setdefault(state, []).append((s, e))


def _replicas_and_roles(row: StepRow, inside: Mapping[str, list[Interval]],
                        role_of: Mapping[str, str], window: int) -> None:
    """Each replica's generating, idle and waiting time, and each role's straggler."""
    by_role: dict[str, list[str]] = {}
    for r in inside:
        by_role.setdefault(role_of[r], []).append(r)
    for role, members in by_role.items():
        latest = max((inside[r][-1][1] for r in members if inside[r]), default=None)
        for r in members:
            iv = inside[r]
            g = length(iv)
            wait = latest - iv[-1][1] if iv else 0
            row.replicas[r] = ReplicaRow(g / NS, (window - g) / NS, wait / NS, role)
        busy = {r: row.replicas[r].generate_s for r in members
                if row.replicas[r].generate_s > 0}
        ratio, slowest, median = _straggler(busy)
        row.roles[role] = RoleRow(length(union(iv for r in members for iv in inside[r])) / NS,
                                  len(members), ratio, slowest, median)
