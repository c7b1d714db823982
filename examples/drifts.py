"""Drifts the simulation injects into an otherwise steady run with noise, and a run of
the same model in virtual time (steps computed, not slept) for the tests and the bench.

``simulate_rl.py --drift KIND:...`` applies them to its real run (its phases sleep for
the drifted seconds, its engines' KV cache shrinks, its trainer logs the longer
responses); :func:`virtual_run` computes a run of the same shape step by step (rows as
``/api/v1/anatomy`` answers them, and every series the server would hold) in
milliseconds, so a 300-step run costs no wall time. Each drift says which step it starts
at and what is its cause (the names the association should rank first).

Drifts (``--drift``):

- ``response-length:START[:RATE]``: responses grow RATE (0.01) a step from START: each
  replica generates that much longer, the trainer's ``response_length/mean`` grows;
- ``kv-shrink:REPLICA:START``: that replica's KV cache shrinks 10 % a step from START
  until it preempts: its generation slows, it is the straggler;
- ``throttle:NODE:START``: that node's GPUs throttle from START (SM clock 1,980 to
  1,500 MHz, hotter): its replicas generate a quarter slower;
- ``weight-sync:START[:RATE]``: the weight update takes RATE (0.1) longer every step;
- ``rank-slow:RANK:START[:FACTOR]``: that trainer rank computes FACTOR (1.5) times as
  long in each micro-batch of the actor update from START; the others wait for it at
  each all-reduce, so every rank's phase ends at the same moment (issue 49);
- ``rank-creep:RANK:START[:RATE]``: that rank's compute grows RATE (0.05) a step;
- ``rank-input:RANK:START[:FACTOR]``: that rank's data comes late: its first
  micro-batch waits (FACTOR - 1) times a micro-batch's compute before it starts.

The actor update is :data:`MICRO_BATCHES` micro-batches on :data:`RANKS` ranks, each
ending in an all-reduce; each rank's arrivals are summarised as its client summarises
torch's Flight Recorder (rl_insight/client/rank_evidence.py), and the row's rank
figures are what rl_insight/anatomy/ranks.py makes of them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

NOISE = 0.01  # lognormal sigma of every part of every step
SPIKE_P = 0.02  # a step's driver work doubled (a checkpoint save): one slow step
KINDS = ("response-length", "kv-shrink", "throttle", "weight-sync", "rank-slow",
         "rank-creep", "rank-input")
RANK_KINDS = KINDS[4:]
RANKS, MICRO_BATCHES = 4, 8
KV_NEED = 0.7  # the share of a full KV cache a replica's batch needs
KV_SHRINK = 0.1  # a step, from the drift's start
KV_FLOOR = 0.4
CLOCK, THROTTLED_CLOCK = 1980.0, 1500.0


@dataclass(frozen=True)
class Drift:
    kind: str
    start: int
    target: int = 0  # the replica (kv-shrink) or node (throttle)
    rate: float = 0.0

    def k(self, step: int) -> int:
        """Steps since the drift started, 1 at its start; 0 before."""
        return max(0, step - self.start + 1)

    def response_factor(self, step: int) -> float:
        return (1 + self.rate) ** self.k(step) if self.kind == "response-length" else 1.0

    def kv_capacity(self, step: int) -> float:
        """The replica's KV cache as a share of its full size."""
        if self.kind != "kv-shrink":
            return 1.0
        return max(KV_FLOOR, 1.0 - KV_SHRINK * self.k(step))

    def throttled(self, step: int) -> bool:
        return self.kind == "throttle" and self.k(step) > 0

    def weight_sync_factor(self, step: int) -> float:
        return (1 + self.rate) ** self.k(step) if self.kind == "weight-sync" else 1.0

    def compute_factor(self, step: int, rank: int) -> float:
        """How much longer the rank computes each micro-batch."""
        if rank != self.target or not self.k(step):
            return 1.0
        if self.kind == "rank-slow":
            return self.rate
        return (1 + self.rate) ** self.k(step) if self.kind == "rank-creep" else 1.0

    def input_delay(self, step: int, rank: int) -> float:
        """Micro-batches of compute the rank's data comes late by."""
        if self.kind != "rank-input" or rank != self.target or not self.k(step):
            return 0.0
        return self.rate - 1.0


def parse(text: str) -> Drift:
    """``KIND:...`` as ``--drift`` takes it (module docstring)."""
    kind, _, rest = text.partition(":")
    bits = [b for b in rest.split(":") if b]
    try:
        if kind == "response-length":
            return Drift(kind, int(bits[0]), rate=float(bits[1]) if len(bits) > 1 else 0.01)
        if kind == "weight-sync":
            return Drift(kind, int(bits[0]), rate=float(bits[1]) if len(bits) > 1 else 0.1)
        if kind in ("kv-shrink", "throttle"):
            return Drift(kind, int(bits[1]), target=int(bits[0]))
        if kind in RANK_KINDS:
            rate = float(bits[2]) if len(bits) > 2 else \
                {"rank-slow": 1.5, "rank-creep": 0.05, "rank-input": 1.5}[kind]
            return Drift(kind, int(bits[1]), target=int(bits[0]), rate=rate)
    except (IndexError, ValueError):
        pass
    raise ValueError(f"--drift {text!r}: expected one of response-length:START[:RATE], "
                     "kv-shrink:REPLICA:START, throttle:NODE:START, weight-sync:START[:RATE], "
                     "rank-slow|rank-creep|rank-input:RANK:START[:FACTOR]")


def preemptions(capacity: float) -> float:
    """Preemptions a step of a replica whose KV cache is ``capacity`` of full."""
    return max(0.0, 100.0 * (KV_NEED / capacity - 0.95))


def slowdown(capacity: float) -> float:
    """How much longer a replica generates, preempting (its requests recomputed)."""
    return 1.0 + 0.01 * preemptions(capacity)


def noise(rng: random.Random, sigma: float = NOISE) -> float:
    return math.exp(rng.gauss(0.0, sigma))


@dataclass
class VirtualRun:
    """A run computed step by step: its rows, every series the server would hold per
    step, and where each drift's regression starts."""

    rows: list[dict] = field(default_factory=list)
    scalars: dict[str, dict[int, float]] = field(default_factory=dict)
    engine: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    hardware: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    replica_node: dict[str, str] = field(default_factory=dict)
    onsets: dict[str, int] = field(default_factory=dict)  # drift kind -> first slower step

    def put(self, into: dict, key, step: int, value: float) -> None:
        into.setdefault(key, {})[step] = value


def virtual_run(steps: int, drifts: list[Drift] = (), seed: int = 0, replicas: int = 4,
                nodes: int = 2, step_s: float = 60.0, sigma: float = NOISE) -> VirtualRun:
    """A synchronous run of ``steps`` steps, ``replicas`` rollout replicas spread over
    ``nodes`` nodes, every part with lognormal noise ``sigma`` (:data:`NOISE`), and the
    drifts."""
    rng = random.Random(seed)
    rank_rng = random.Random(seed + 7919)  # the ranks' own draws: the rest as before
    run = VirtualRun()
    for r in range(replicas):
        run.replica_node[str(r)] = f"node-{r * nodes // replicas}"
    phase_s = {"actor_compute_log_prob": 0.1 * step_s, "ref_compute_log_prob": 0.08 * step_s,
               "actor_update": 0.18 * step_s, "update_weights": 0.06 * step_s}
    gen_s, other_s, tokens = 0.5 * step_s, 0.08 * step_s, 500.0
    for step in range(1, steps + 1):
        length = tokens * math.prod(d.response_factor(step) for d in drifts) * noise(rng, sigma)
        per_replica, kv, pre = {}, {}, {}
        for r in range(replicas):
            rep, node = str(r), run.replica_node[str(r)]
            capacity = math.prod(d.kv_capacity(step) for d in drifts if d.target == r)
            hot = any(d.throttled(step) and d.target == int(node.split("-")[1])
                      for d in drifts)
            pre[rep] = preemptions(capacity)
            kv[rep] = min(1.0, KV_NEED * length / tokens / capacity) * noise(rng, 0.02)
            per_replica[rep] = gen_s * length / tokens * slowdown(capacity) * \
                (CLOCK / THROTTLED_CLOCK if hot else 1.0) * noise(rng, sigma)
        generate = max(per_replica.values())
        phases = {p: s * noise(rng, sigma) for p, s in phase_s.items()}
        phases["update_weights"] *= math.prod(d.weight_sync_factor(step) for d in drifts)
        figures, extra = rank_figures(step, drifts, rank_rng, phases["actor_update"], sigma)
        phases["actor_update"] += extra
        other = other_s * noise(rng, sigma) * (2.0 if rng.random() < SPIKE_P else 1.0)
        duration = generate + sum(phases.values()) + other
        completion = length * 64 * replicas
        gpus = replicas + 2
        run.rows.append({
            "step": step, "duration_s": duration, "other_s": other,
            "generate_s": generate, "weight_update_s": phases["update_weights"],
            "roles": {"rollout": {"generate_s": generate, "replicas": replicas}},
            "phases": phases,
            "replicas": {rep: {"generate_s": g, "idle_s": duration - g, "wait_s":
                               generate - g, "role": "rollout"}
                         for rep, g in per_replica.items()},
            "requests": {"rollout": {"requests": 64 * replicas,
                                     "completion_tokens": completion,
                                     "preemptions": sum(pre.values()),
                                     "queue_s_mean": 0.2 * noise(rng, 0.05),
                                     "prefill_s_mean": 0.05 * noise(rng, 0.05),
                                     "decode_s_mean": generate * 0.8 * noise(rng, 0.02)}},
            "tokens_per_gpu_second": completion / (gpus * duration),
            "source": "lanes", **figures})
        run.put(run.scalars, "response_length/mean", step, length)
        run.put(run.scalars, "actor/entropy", step, 0.6 * noise(rng, 0.03))
        run.put(run.scalars, "actor/pg_loss", step, rng.gauss(0.0, 0.02))
        run.put(run.scalars, "critic/score/mean", step, 0.3 + 0.002 * step + rng.gauss(0, 0.02))
        run.put(run.scalars, "actor/grad_norm", step, 0.5 * noise(rng, 0.1))
        for rep in per_replica:
            run.put(run.engine, ("vllm:kv_cache_usage_perc", rep), step, kv[rep])
            run.put(run.engine, ("vllm:num_preemptions", rep), step, pre[rep])
            run.put(run.engine, ("vllm:num_requests_running", rep), step,
                    64 * noise(rng, 0.03))
            run.put(run.engine, ("vllm:num_requests_waiting", rep), step,
                    2 + pre[rep] / 4 + rng.random())
        for n in range(nodes):
            node = f"node-{n}"
            hot = any(d.throttled(step) and d.target == n for d in drifts)
            run.put(run.hardware, ("DCGM_FI_DEV_SM_CLOCK", node), step,
                    (THROTTLED_CLOCK if hot else CLOCK) + rng.gauss(0, 5))
            run.put(run.hardware, ("DCGM_FI_DEV_GPU_TEMP", node), step,
                    (86.0 if hot else 66.0) + rng.gauss(0, 1))
            run.put(run.hardware, ("DCGM_FI_DEV_POWER_USAGE", node), step,
                    (560.0 if hot else 640.0) + rng.gauss(0, 8))
            run.put(run.hardware, ("DCGM_FI_DEV_GPU_UTIL", node), step,
                    min(100.0, 85 + rng.gauss(0, 3)))
    for d in drifts:
        run.onsets[d.kind] = first_slower_step(d)
    return run


def rank_figures(step: int, drifts: list[Drift], rng: random.Random, phase_s: float,
                 sigma: float = NOISE) -> tuple[dict, float]:
    """The actor update's ranks in a step: :data:`MICRO_BATCHES` micro-batches, each
    ending in an all-reduce all ranks leave together; (the row's rank figures as the
    server makes them from each rank's arrivals, how much longer the drifts made the
    phase)."""
    from rl_insight.anatomy import ranks as attribution

    compute = [[phase_s / MICRO_BATCHES * noise(rng, sigma) for _ in range(RANKS)]
               for _ in range(MICRO_BATCHES)]
    factor = [math.prod(d.compute_factor(step, r) for d in drifts) for r in range(RANKS)]
    late = [sum(d.input_delay(step, r) for d in drifts) * phase_s / MICRO_BATCHES
            for r in range(RANKS)]

    def phase(drifted: bool) -> tuple[list[list[float]], float]:
        at, arrivals = 0.0, []
        for i, row in enumerate(compute):
            took = [c * (factor[r] if drifted else 1.0) +
                    (late[r] if drifted and i == 0 else 0.0) for r, c in enumerate(row)]
            arrivals.append([at + t for t in took])
            at += max(took)
        return arrivals, at

    arrivals, end = phase(True)
    _, plain = phase(False)
    ns = 1e9
    base = int(step * 1000 * ns)
    per_rank = {}
    for r in range(RANKS):
        mine = [a[r] for a in arrivals]
        per_rank[str(r)] = attribution.RankPhase(base, base + int(end * ns), {
            attribution.COLLECTIVES: MICRO_BATCHES,
            attribution.MEAN_TO_END: sum(end - t for t in mine) / len(mine),
            attribution.FIRST_TO_END: end - mine[0], attribution.NODE: f"node-{r // 2}",
            attribution.GPU: str(r % 2)})
    got = attribution.attribute({"actor_update": per_rank})
    return ({"ranks": got.ranks, "rank_median": got.median, "rank_count": got.count,
             "culprit": got.culprit, "rank_evidence": got.evidence}, end - plain)


def first_slower_step(d: Drift) -> int:
    """The first step the drift makes slower: its start, or for a shrinking KV cache the
    first step it preempts (until then the cache only fills)."""
    if d.kind != "kv-shrink":
        return d.start
    step = d.start
    while preemptions(d.kv_capacity(step)) <= 0 and d.kv_capacity(step) > KV_FLOOR:
        step += 1
    return step


def causes(d: Drift) -> set[tuple[str, str]]:
    """(series name, the replica or node it is of) that name the drift's cause."""
    if d.kind == "response-length":
        return {("response_length/mean", ""), ("completion_tokens_per_request", ""),
                ("completion_tokens", "")}
    if d.kind == "kv-shrink":
        rep = str(d.target)
        return {("vllm:kv_cache_usage_perc", rep), ("vllm:num_preemptions", rep),
                ("preemptions", "")}
    if d.kind == "throttle":
        node = f"node-{d.target}"
        return {(name, node) for name in ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
                                          "DCGM_FI_DEV_POWER_USAGE")}
    if d.kind in RANK_KINDS:
        return {("rank", str(d.target))}
    return {("weight_sync", "")}
