"""Where a step's GPU-seconds went, by role and cause, and what its wall time waited on.

Plain data in (the step's window, its lanes' state intervals, its engine requests), plain
data out (:class:`StepBound`); no clock, no I/O. Two views of one step:

- **the path**: the window cut by what ran, each instant counted once: the policy's rollout
  alone (the trainer waits for samples; its ``tail`` is what ran after half the replicas
  of a generation burst had finished), training alone (the rollout waits for the trainer),
  both at once (``overlap``), other replica roles alone (a teacher, a reward model), the
  weight sync alone, validation, and ``other`` (nothing of these: the driver's own work).
  The what-if (:mod:`rl_insight.anatomy.whatif`) works on it: a side made faster saves at
  most the time the other side waited for it;
- **the GPUs**: every lane's window split by cause, times the GPUs behind the lane, so the
  causes of a role add up to its GPUs times the wall time: ``busy`` (a replica generating,
  a rank computing), ``waiting_for_samples`` (a rank with nothing to train on),
  ``waiting_for_slowest`` (a replica done before its role's slowest, a rank waiting at a
  collective or for a slower rank), ``waiting_for_trainer`` (a replica awake and idle while
  the trainer works), ``weight_sync`` (in or paused for it), ``asleep`` (the hybrid engine's
  offload, from a sleep to the next wake-up: in a colocated run the trainer has those GPUs),
  ``startup`` (before the lane's first state), ``validation`` and ``other``.

GPUs behind a lane: ``gpus_per_replica`` and ``gpus_per_rank`` where the operator told them
(``anatomy.gpus_per_replica``), one per rank where the ranks name their device, else one
assumed and said so (``gpus_known`` false).
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rl_insight.anatomy import engine_bound
from rl_insight.anatomy import ranks as rank_figures
from rl_insight.anatomy.intervals import Interval, clip, intersect, length, subtract, union
from rl_insight.anatomy.requests import Request
from rl_insight.frameworks.phases import VALIDATION as VALIDATION_PHASE
from rl_insight.frameworks.table import (
    WAITING_FOR_SAMPLES,
    WAITING_FOR_SLOWEST,
    WAITING_FOR_SYNC,
)
from rl_insight.wire import laneid, rank_evidence

NS = 1e9

# causes, in the order a lane's time is given to them (a cause takes only what the ones
# before it left)
BUSY = "busy"
SAMPLES = WAITING_FOR_SAMPLES
SLOWEST = WAITING_FOR_SLOWEST
TRAINER_WAIT = "waiting_for_trainer"
SYNC = WAITING_FOR_SYNC
ASLEEP = "asleep"
STARTUP = "startup"
VALIDATION = "validation"
OTHER = "other"
CAUSES = (BUSY, SAMPLES, SLOWEST, TRAINER_WAIT, SYNC, ASLEEP, STARTUP, VALIDATION, OTHER)
_C = {c: i for i, c in enumerate(CAUSES)}

# the path: the step's wall time by what ran
ROLLOUT, TAIL, TRAINING, OVERLAP, OTHER_ROLES = (
    "rollout", "tail", "training", "overlap", "other_roles")
PATH = (ROLLOUT, TAIL, TRAINING, OVERLAP, OTHER_ROLES, SYNC, VALIDATION, OTHER)
_P = {p: i for i, p in enumerate(PATH)}

TRAINER = "trainer"  # the role of the rank lanes (or of a driver lane without ranks)
TAIL_CUT = engine_bound.TAIL_CUT

# states, by their place in the RL step (verl's and the frameworks' names)
_RANK_SYNC = ("update_weights", "switch_to_trainer", "switch_to_rollout")
_REPLICA_SYNC_WORDS = ("wake_up", "resume", "switch_wait", "update_weights", "weight")
_SLEEP_WORDS = ("sleep", "release_kv_cache", "offload")
_DRIVER_SYNC = "update_weights"
_IDLE = "idle"


def is_generation(state: str) -> bool:
    """vllm_generate, sglang_generate (verl's rollout servers) and the like."""
    return state == "generate" or state.endswith("_generate")


def _is_rank_sync(state: str) -> bool:
    return state in _RANK_SYNC or state.startswith("switch_")


def _is_sleep(state: str) -> bool:
    return any(w in state for w in _SLEEP_WORDS) and "wake" not in state


def _is_replica_sync(state: str) -> bool:
    return any(w in state for w in _REPLICA_SYNC_WORDS)


class Inputs(NamedTuple):
    """What the what-if needs of a step beyond its path (seconds unless said)."""

    replicas: int  # the policy's rollout replicas
    ranks: int
    gen_s: float  # any policy replica generating
    straggler_gain_s: float  # how much sooner the slowest replica's peers finished
    longest_s: float | None  # the longest request's time in the engine (no split helps it)
    work_s: float | None  # the busiest replica's requests' engine time over its concurrency
    tail_cut_s: float | None  # how much sooner the rollout ends, its longest 1 % cut
    samples: int | None  # the policy's requests that ended in the step
    tokens: int | None  # the tokens they generated


@dataclass(slots=True)
class RoleBound:
    """One role's GPU-seconds in a step, by cause (in CAUSES order)."""

    lanes: int
    gpus_per_lane: float
    gpus_known: bool
    causes: tuple[float, ...]

    def as_dict(self) -> dict:
        return {"lanes": self.lanes, "gpus": self.lanes * self.gpus_per_lane,
                "gpus_per_lane": self.gpus_per_lane, "gpus_known": self.gpus_known,
                "gpu_seconds": {c: v for c, v in zip(CAUSES, self.causes, strict=True)
                                if v > 0}}


@dataclass(slots=True)
class StepBound:
    """A step's path and GPU accounting; per replica its seconds by cause, packed (a
    step of 128 replicas holds 4.6 KB of them, not a dict apiece)."""

    path: tuple[float, ...]
    roles: dict[str, RoleBound] = field(default_factory=dict)
    replica_keys: tuple[str, ...] = ()
    replica_causes: array = field(default_factory=lambda: array("f"))
    colocated: bool = False
    inputs: Inputs | None = None
    source: str = "lanes"
    # what the figures could not see (a sentence each): GPUs assumed, no request spans
    missing: tuple[str, ...] = ()

    def replica(self, key: str) -> dict[str, float]:
        i = self.replica_keys.index(key) * len(CAUSES)
        return {c: float(v) for c, v in zip(CAUSES, self.replica_causes[i:i + len(CAUSES)],
                                            strict=True) if v > 0}

    def as_dict(self, replicas: bool = True) -> dict:
        """As the API gives it; without ``replicas`` the per-replica split is left out
        (the verdict and the what-if need only the roles')."""
        return {"path": dict(zip(PATH, self.path, strict=True)),
                "roles": {r: b.as_dict() for r, b in self.roles.items()},
                "replicas": {k: self.replica(k) for k in self.replica_keys} if replicas
                else {},
                "colocated": self.colocated,
                "inputs": None if self.inputs is None else self.inputs._asdict(),
                "source": self.source, "missing": list(self.missing)}


def sum_replicas(bounds: Iterable[StepBound]) -> dict[str, dict[str, float]]:
    """Each replica's seconds by cause over many steps, from their packed figures (a
    week of 128 replicas is 10,000 steps: no dict per replica and step on the way)."""
    totals: dict[tuple[str, ...], list[float]] = {}
    for b in bounds:
        acc = totals.get(b.replica_keys)
        totals[b.replica_keys] = list(b.replica_causes) if acc is None else \
            [x + y for x, y in zip(acc, b.replica_causes, strict=True)]
    n = len(CAUSES)
    out: dict[str, list[float]] = {}
    for keys, acc in totals.items():
        for i, key in enumerate(keys):
            mine = out.setdefault(key, [0.0] * n)
            for j in range(n):
                mine[j] += acc[i * n + j]
    return {k: {c: v for c, v in zip(CAUSES, out[k], strict=True) if v > 0}
            for k in sorted(out, key=_key_order)}


@dataclass
class _Sorted:
    """A step's lanes by what they are."""

    gen: dict[str, list[Interval]] = field(default_factory=dict)  # replica key -> its
    role: dict[str, str] = field(default_factory=dict)  # replica key -> role
    lane_of: dict[str, str] = field(default_factory=dict)  # replica key -> lane id
    rsync: dict[str, list[Interval]] = field(default_factory=dict)
    asleep: dict[str, list[Interval]] = field(default_factory=dict)
    work: dict[str, list[Interval]] = field(default_factory=dict)  # rank lane -> phases
    ksync: dict[str, list[Interval]] = field(default_factory=dict)  # rank lane -> its sync
    rank_lanes: dict[str, list[tuple]] = field(default_factory=dict)
    rank_device: bool = False
    driver_gen: list[Interval] = field(default_factory=list)
    driver_work: list[Interval] = field(default_factory=list)
    driver_sync: list[Interval] = field(default_factory=list)
    driver_val: list[Interval] = field(default_factory=list)

    @classmethod
    def of(cls, lanes: Mapping[str, Iterable[tuple]]) -> _Sorted:
        out = cls()
        for lane, intervals in lanes.items():
            c = laneid.classify(lane)
            if c.kind == laneid.REPLICA:
                key = laneid.replica_key(lane)
                out.role[key], out.lane_of[key] = c.role, lane
                gen, sync = out.gen.setdefault(key, []), out.rsync.setdefault(key, [])
                ordered = sorted((iv[1], iv[2], iv[0]) for iv in intervals)
                for s, e, state in ordered:
                    if is_generation(state):
                        gen.append((s, e))
                    elif _is_replica_sync(state):
                        sync.append((s, e))
                out.asleep[key] = _asleep(ordered)
            elif c.kind == laneid.RANK:
                intervals = out.rank_lanes[lane] = list(intervals)
                work, sync = out.work.setdefault(lane, []), out.ksync.setdefault(lane, [])
                for iv in intervals:
                    (sync if _is_rank_sync(iv[0]) else work).append((iv[1], iv[2]))
                    if not out.rank_device and len(iv) > 3 and \
                            rank_figures.unpack(iv[3]).get(rank_evidence.GPU):
                        out.rank_device = True
            elif c.kind == laneid.DRIVER:
                for state, s, e, *_ in intervals:
                    if is_generation(state):
                        out.driver_gen.append((s, e))
                    elif state == _DRIVER_SYNC:
                        out.driver_sync.append((s, e))
                    elif state == VALIDATION_PHASE:
                        out.driver_val.append((s, e))
                    elif state != _IDLE:  # waiting is nobody's work
                        out.driver_work.append((s, e))
        return out


def _asleep(ordered: Sequence[tuple[int, int, str]]) -> list[Interval]:
    """A replica's offloaded time: from a sleep (or KV-cache release) to the start of its
    next wake-up, generation or sync state (the lane's states by start)."""
    out, since = [], None
    for s, _e, state in ordered:
        if _is_sleep(state):
            if since is None:
                since = s
        elif since is not None:
            out.append((since, s))
            since = None
    if since is not None:
        out.append((since, 1 << 62))  # asleep past what the lane has said
    return out


class _Window(NamedTuple):
    """A step's window and what ran in it, each a union clipped to it (``pg_all``: the
    policy's generation unclipped, whose bursts may begin in the step before)."""

    lo: int
    hi: int
    window: list[Interval]
    policy: list[str]
    pg_all: list[Interval]
    pg: list[Interval]  # the policy's rollout generating
    og: list[Interval]  # other replica roles generating
    rank_work: list[Interval]
    work: list[Interval]  # the trainer's phases (ranks', a driver's)
    sync: list[Interval]
    val: list[Interval]

    @classmethod
    def of(cls, s: _Sorted, lo: int, hi: int) -> _Window:
        policy = [k for k in s.gen if laneid.family_of(s.role[k]) == laneid.ROLLOUT]
        pg_all = union([*(iv for k in policy for iv in s.gen[k]), *s.driver_gen])
        others = set(s.gen) - set(policy)
        rank_work = clip(union(iv for ivs in s.work.values() for iv in ivs), lo, hi)
        sync = union([*(iv for ivs in s.ksync.values() for iv in ivs),
                      *(iv for ivs in s.rsync.values() for iv in ivs), *s.driver_sync])
        return cls(lo, hi, [(lo, hi)] if hi > lo else [], policy, pg_all,
                   clip(pg_all, lo, hi),
                   clip(union(iv for k in others for iv in s.gen[k]), lo, hi), rank_work,
                   union([*rank_work, *clip(s.driver_work, lo, hi)]), clip(sync, lo, hi),
                   clip(union(s.driver_val), lo, hi))


def step_bound(lo: int, hi: int, lanes: Mapping[str, Iterable[tuple]],
               requests: Sequence[Request] = (),
               first_seen: Mapping[str, int] | None = None,
               gpus_per_replica: float = 0.0, gpus_per_rank: float = 0.0) -> StepBound:
    """The step ``[lo, hi)``'s path and GPU accounting from its lanes' intervals
    ``(state, start, end[, evidence])`` (they may reach outside the window and should
    include the step before's: a burst or a sleep that began there), its engine
    requests, and when each lane was first seen (``startup`` before it)."""
    s = _Sorted.of(lanes)
    w = _Window.of(s, lo, hi)
    out = StepBound(_path(s, w, requests))
    first_seen = first_seen or {}
    missing = _replica_roles(out, s, w, first_seen, gpus_per_replica)
    missing += _trainer_role(out, s, w, first_seen, gpus_per_rank)
    out.inputs = _inputs(s, w.policy, lo, hi, w.pg, requests)
    if out.inputs.samples is None and w.policy:
        missing.append("no engine request spans: samples per step, the tail what-if and "
                       "the longest request unknown (docs/requests.md)")
    out.missing = tuple(missing)
    return out


def _path(s: _Sorted, w: _Window, requests: Sequence[Request]) -> tuple[float, ...]:
    """The window by what ran, each instant once, in seconds (PATH order)."""
    path = [0.0] * len(PATH)
    alone = subtract(w.pg, w.work)
    tail = intersect(alone, union(_tails(w.pg_all, {k: s.gen[k] for k in w.policy},
                                         requests)))
    path[_P[OVERLAP]] = length(intersect(w.pg, w.work)) / NS
    path[_P[TAIL]] = length(tail) / NS
    path[_P[ROLLOUT]] = (length(alone) - length(tail)) / NS
    path[_P[TRAINING]] = length(subtract(w.work, w.pg)) / NS
    busy = union([*w.pg, *w.work])
    path[_P[OTHER_ROLES]] = length(subtract(w.og, busy)) / NS
    busy = union([*busy, *w.og])
    path[_P[SYNC]] = length(subtract(w.sync, busy)) / NS
    busy = union([*busy, *w.sync])
    path[_P[VALIDATION]] = length(subtract(w.val, busy)) / NS
    path[_P[OTHER]] = length(subtract(w.window, union([*busy, *w.val]))) / NS
    return tuple(path)


def _replica_roles(out: StepBound, s: _Sorted, w: _Window, first_seen: Mapping[str, int],
                   gpus_per_replica: float) -> list[str]:
    """Each replica role's GPU-seconds by cause, each replica's seconds packed; what
    could not be told."""
    gpr = gpus_per_replica if gpus_per_replica > 0 else 1.0
    roles: dict[str, list[str]] = {}
    for k in s.gen:
        roles.setdefault(s.role[k], []).append(k)
    keys, packed = [], array("f")
    lo, hi = w.lo, w.hi
    for role, members in sorted(roles.items()):
        mine = clip(union(iv for k in members for iv in s.gen[k]), lo, hi)
        totals = [0.0] * len(CAUSES)
        for k in sorted(members, key=_key_order):
            got = _replica_causes(lo, hi, w.window, clip(union(s.gen[k]), lo, hi),
                                  clip(union(s.rsync[k]), lo, hi), w.sync,
                                  clip(s.asleep[k], lo, hi), mine, w.work, w.val,
                                  first_seen.get(s.lane_of[k]))
            keys.append(k)
            packed.extend(got)
            for i, v in enumerate(got):
                totals[i] += v * gpr
            if got[_C[ASLEEP]] > 0:
                out.colocated = True
        out.roles[role] = RoleBound(len(members), gpr, gpus_per_replica > 0, tuple(totals))
    out.replica_keys, out.replica_causes = tuple(keys), packed
    if s.gen and gpus_per_replica <= 0:
        return ["GPUs per replica not told (its tensor-parallel size): 1 assumed; set "
                "anatomy.gpus_per_replica"]
    return []


def _trainer_role(out: StepBound, s: _Sorted, w: _Window, first_seen: Mapping[str, int],
                  gpus_per_rank: float) -> list[str]:
    """The trainer's GPU-seconds by cause (its ranks', or a framework driver's lane);
    what could not be told."""
    lo, hi = w.lo, w.hi
    gen = union([*w.pg, *w.og])
    if s.work or s.ksync:
        known = gpus_per_rank > 0 or s.rank_device
        gpk = gpus_per_rank if gpus_per_rank > 0 else 1.0
        waits = _inside_waits(s.rank_lanes, lo, hi)
        totals = [0.0] * len(CAUSES)
        lanes = s.work.keys() | s.ksync.keys()
        for lane in lanes:
            got = _rank_causes(lo, hi, w.window, clip(union(s.work.get(lane, [])), lo, hi),
                               clip(union(s.ksync.get(lane, [])), lo, hi),
                               waits.get(lane, 0.0), w.rank_work, w.sync, gen, w.val,
                               first_seen.get(lane))
            for i, v in enumerate(got):
                totals[i] += v * gpk
        out.roles[TRAINER] = RoleBound(len(lanes), gpk, known, tuple(totals))
        return [] if known else ["the ranks name no GPU (CUDA_VISIBLE_DEVICES): 1 per rank "
                                 "assumed; set anatomy.gpus_per_rank"]
    if s.driver_work:  # a framework's driver lane is the trainer: its GPUs unknown
        got = _rank_causes(lo, hi, w.window, clip(union(s.driver_work), lo, hi),
                           clip(union(s.driver_sync), lo, hi), 0.0, [], w.sync, gen, w.val,
                           None)
        out.roles[TRAINER] = RoleBound(1, 1.0, False, tuple(got))
        return ["the trainer is the framework's driver lane: its GPUs unknown (its seconds "
                "are counted as one GPU's)"]
    return []


def _key_order(key: str) -> tuple[int, str, int]:
    if key.isdigit():
        return (0, "", int(key))
    role, _, n = key.rpartition("_")
    return (1, role, int(n)) if n.isdigit() else (1, key, 0)


def _split(remaining: list[Interval], by: Sequence[Interval]
           ) -> tuple[float, list[Interval]]:
    """Seconds of ``remaining`` inside ``by``, and what is left of it."""
    got = intersect(remaining, by)
    return length(got) / NS, subtract(remaining, got) if got else remaining


def _startup(remaining: list[Interval], lo: int, hi: int, first: int | None
             ) -> tuple[float, list[Interval]]:
    if first is None or first <= lo:
        return 0.0, remaining
    return _split(remaining, [(lo, min(first, hi))])


def _replica_causes(lo: int, hi: int, window: list[Interval], gen: list[Interval],
                    own_sync: list[Interval], sync: list[Interval],
                    asleep: list[Interval], role_gen: list[Interval],
                    work: list[Interval], val: list[Interval], first: int | None
                    ) -> list[float]:
    """One replica's window by cause, in seconds."""
    got = [0.0] * len(CAUSES)
    got[_C[BUSY]] = length(gen) / NS
    rest = subtract(window, gen)
    got[_C[STARTUP]], rest = _startup(rest, lo, hi, first)
    got[_C[SYNC]], rest = _split(rest, union([*own_sync, *sync]))
    got[_C[ASLEEP]], rest = _split(rest, asleep)
    got[_C[SLOWEST]], rest = _split(rest, role_gen)
    got[_C[TRAINER_WAIT]], rest = _split(rest, work)
    got[_C[VALIDATION]], rest = _split(rest, val)
    got[_C[OTHER]] = length(rest) / NS
    return got


def _rank_causes(lo: int, hi: int, window: list[Interval], work: list[Interval],
                 own_sync: list[Interval], waited: float, rank_work: list[Interval],
                 sync: list[Interval], gen: list[Interval], val: list[Interval],
                 first: int | None) -> list[float]:
    """One rank's window by cause, in seconds; ``waited`` of its phases' time it spent
    at collectives waiting for a slower rank."""
    got = [0.0] * len(CAUSES)
    busy = length(work) / NS
    waited = min(waited, busy)
    got[_C[BUSY]] = busy - waited
    got[_C[SLOWEST]] = waited
    own_sync = subtract(own_sync, work)
    rest = subtract(subtract(window, work), own_sync)
    got[_C[SYNC]] = length(own_sync) / NS
    got[_C[STARTUP]], rest = _startup(rest, lo, hi, first)
    v, rest = _split(rest, sync)
    got[_C[SYNC]] += v
    v, rest = _split(rest, rank_work)  # another rank still working: a straggler
    got[_C[SLOWEST]] += v
    got[_C[SAMPLES]], rest = _split(rest, gen)
    got[_C[VALIDATION]], rest = _split(rest, val)
    got[_C[OTHER]] = length(rest) / NS
    return got


def _inside_waits(rank_lanes: Mapping[str, list[tuple]], lo: int, hi: int
                  ) -> dict[str, float]:
    """Per rank lane, the seconds of its phases it waited for a slower rank, where the
    ranks met (a collective, the Flight Recorder's arrivals or aligned ends); where they
    did not meet, the waiting came after a rank's phase and its idle time counts it."""
    out: dict[str, float] = {}
    lane_of = {rank_figures.rank_number(lane): lane for lane in rank_lanes}
    phases = rank_figures.from_lanes(rank_lanes, lo, hi)
    for phase, ranks in phases.items():
        if _is_rank_sync(phase) or len(ranks) < 2:
            continue
        evidence, waits, _ = rank_figures.phase_waits(ranks)
        if evidence == rank_figures.BOUNDARIES and not _met(ranks):
            continue
        for r, p in ranks.items():
            if _nested(phases, phase, r, p):
                continue
            w = min(max(0.0, waits.get(r, 0.0)), p.duration)
            out[lane_of[r]] = out.get(lane_of[r], 0.0) + w
    return out


def _met(ranks: Mapping[str, rank_figures.RankPhase]) -> bool:
    """Whether the ranks' phase ended together (a collective ends it), as ranks.py reads
    the boundaries."""
    ends = [p.end for p in ranks.values()]
    typical = statistics.median(p.duration for p in ranks.values())
    return (max(ends) - min(ends)) / NS <= max(rank_figures.ALIGNED * typical,
                                               rank_figures.MIN_LEAD_S)


def _nested(phases: Mapping[str, Mapping[str, rank_figures.RankPhase]], phase: str,
            rank: str, p: rank_figures.RankPhase) -> bool:
    """Inside another phase on the same rank (verl's train_batch in actor_update)."""
    for other, ranks in phases.items():
        q = ranks.get(rank)
        if other != phase and q is not None and q.start <= p.start and p.end <= q.end \
                and (q.start, -q.end, other) < (p.start, -p.end, phase):
            return True
    return False


def _tails(pg_all: list[Interval], gens: Mapping[str, list[Interval]],
           requests: Sequence[Request]) -> list[Interval]:
    """Per generation burst of the policy's rollout (its replicas' generation, joined),
    the time after half its replicas finished (or after 90 % of its requests had, if
    sooner): the fleet waiting on its slowest."""
    out = []
    policy = engine_bound.policy_requests(requests)
    for b0, b1 in pg_all:
        ends = [max(e for s, e in ivs if b0 <= s < b1) for ivs in gens.values()
                if any(b0 <= s < b1 for s, _ in ivs)]
        starts = []
        if len(ends) >= 2:
            starts.append(statistics.median_low(ends))  # half the fleet done
        done = sorted(r.end_ns for r in policy if b0 < r.end_ns <= b1)
        if len(done) >= 10:
            starts.append(done[int(0.9 * (len(done) - 1))])
        if starts:
            out.append((int(min(starts)), b1))
    return out


def _inputs(s: _Sorted, policy: Sequence[str], lo: int, hi: int, pg: list[Interval],
            requests: Sequence[Request]) -> Inputs:
    generating = {k: length(clip(union(s.gen[k]), lo, hi)) / NS for k in policy}
    gen = sorted(generating.values(), reverse=True)
    gain = gen[0] - gen[1] if len(gen) >= 2 else 0.0
    ranks = len(s.work.keys() | s.ksync.keys())
    replicas = engine_bound.by_replica(requests)
    if not replicas:
        return Inputs(len(policy), ranks, length(pg) / NS, gain, None, None, None, None,
                      None)
    mine = [r for rep in replicas.values() for r in rep.requests]
    return Inputs(len(policy), ranks, length(pg) / NS, gain,
                  max(rep.bound[0] for rep in replicas.values()),
                  max(rep.bound[1] for rep in replicas.values()),
                  engine_bound.tail_cut(generating, replicas), len(mine),
                  sum(r.completion_tokens or 0 for r in mine))


def timing_bound(duration_s: float, generate_s: float, phases: Mapping[str, float],
                 weight_update_s: float, waits: Mapping[str, float], other_s: float,
                 overlap_s: float, wait_causes: Mapping[str, str] | None = None
                 ) -> StepBound:
    """A step's path from a framework's timing keys alone (no lane told it): the rollout
    and the training each alone for what they did not overlap, the weight sync, each
    named wait where its table says what it waited for (``wait_causes``: key ->
    SAMPLES, SYNC or SLOWEST; unsaid: ``other``). No replica breakdown, no GPU count:
    each role's seconds count as one GPU's, and the bound says so."""
    causes = wait_causes or {}
    train = max(0.0, sum(phases.values()) - weight_update_s)
    path = dict.fromkeys(PATH, 0.0)
    path[OVERLAP] = min(overlap_s, generate_s, train)
    path[ROLLOUT] = generate_s - path[OVERLAP]
    path[TRAINING] = train - path[OVERLAP]
    path[SYNC] = weight_update_s
    for key, seconds in waits.items():
        cause = causes.get(key)
        target = ROLLOUT if cause == SAMPLES else SYNC if cause == SYNC else \
            TRAINING if cause == SLOWEST else OTHER  # a straggling rank: the trainer's
        path[target] += seconds
    path[OTHER] += other_s
    total = sum(path.values())
    if total > duration_s > 0:  # parts ran at once beyond what the keys say: the
        scale = duration_s / total  # figures are scaled to the step, the shares kept
        path = {k: v * scale for k, v in path.items()}
    else:
        path[OTHER] += max(0.0, duration_s - total)
    rollout = [0.0] * len(CAUSES)
    rollout[_C[BUSY]] = path[ROLLOUT] + path[OVERLAP]
    rollout[_C[TRAINER_WAIT]] = path[TRAINING]
    rollout[_C[SYNC]] = path[SYNC]
    rollout[_C[OTHER]] = max(0.0, duration_s - sum(rollout))
    trainer = [0.0] * len(CAUSES)
    trainer[_C[BUSY]] = path[TRAINING] + path[OVERLAP]
    trainer[_C[SAMPLES]] = path[ROLLOUT]
    trainer[_C[SYNC]] = path[SYNC]
    trainer[_C[OTHER]] = max(0.0, duration_s - sum(trainer))
    out = StepBound(tuple(path[p] for p in PATH), source="timing_keys")
    if generate_s > 0:
        out.roles[laneid.ROLLOUT] = RoleBound(1, 1.0, False, tuple(rollout))
    if train > 0:
        out.roles[TRAINER] = RoleBound(1, 1.0, False, tuple(trainer))
    out.inputs = Inputs(0, 0, generate_s, 0.0, None, None, None, None, None)
    out.missing = ("from the framework's timing keys: no replica or rank lanes, so no "
                   "straggler, no tail and no GPU count (each role's seconds count as one "
                   "GPU's)",)
    return out
