"""Which rank a step waited for: each trainer rank's compute and wait per phase, and the
culprit, from signals that survive collectives.

In FSDP or Megatron training the ranks meet at every collective: the slow rank computes
longer, the others wait for it inside the all-reduce, and every rank's phase ends at the
same moment, so per-rank phase durations are equal and say nothing. What differs is
*when each rank arrived* at the collectives. Two sources tell it (docs/anatomy.md, "The
culprit rank"):

- the Flight Recorder torch already keeps (``TORCH_FR_BUFFER_SIZE``): each collective's
  ``time_created_ns`` on each rank, its arrival. The client summarises a phase's
  collectives on each rank against the phase's end, which the last collective makes
  common to all ranks (no clock skew between nodes enters): how many, the mean time from
  an arrival to the end, the first arrival's. A rank that arrives later on average waited
  less: the culprit waited least. What the others waited, summed over the collectives,
  is the median rank's count times its mean lead over the culprit;
- a profiler's trace of the rank (``rl-insight import --profiler``): its collectives'
  starts, summarised the same way (rl_insight/profiler/export.py), named by
  ``rank.arrivals``;
- the phase's own boundaries, where no recorder is on: a rank that starts the phase late
  (its data or its dispatch came late) arrives late at the first collective, and where
  the ranks never meet (no collective: the phase ends on each rank on its own) the
  slowest rank is the one that ended last. Ranks that met and started together hide a
  compute straggler from the boundaries: the row says so instead of naming one.

The kind: *input* when the culprit's lead is in its start or its first collective (its
data came late), *compute* when it is spread over the phase's collectives (it computed
longer). Where both sources name a rank, different ones, and the recorder does not
bear the boundaries' out (a rank that started late arrives late at the first collective,
unless the culprit came later still), the phase is *unclear*: no rank is named, and the
row says which each pointed at. Plain data in and out; no clock, no I/O.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# the span attributes a rank's client sets (rl_insight/client/rank_evidence.py) and a
# profiler import writes
from rl_insight.wire.rank_evidence import (
    ARRIVALS,
    COLLECTIVES,
    EVIDENCE_KEYS,
    FIRST_TO_END,
    GPU,
    GPU_BUSY,
    GPU_COMM,
    GPU_OVERLAP,
    MEAN_TO_END,
    NODE,
)

# the arrivals' source as the report says it
SOURCES = {"torch": "the torch profiler's collectives", "nvtx": "Nsight's NCCL kernels",
           "mstx": "the Ascend profiler's HCCL operators"}


def pack(evidence: Mapping) -> tuple:
    """A phase span's evidence as the server holds it (a run's rank lanes keep 64 spans
    each: at 1,000 ranks a dict apiece was tens of MB); node and GPU names interned."""
    return tuple(sys.intern(str(evidence[k])) if k in (NODE, GPU, ARRIVALS) and k in evidence
                 else evidence.get(k) for k in EVIDENCE_KEYS)


def unpack(evidence: Mapping | tuple | None) -> dict:
    if not evidence:
        return {}
    if isinstance(evidence, tuple):
        return {k: v for k, v in zip(EVIDENCE_KEYS, evidence, strict=False) if v is not None}
    return dict(evidence)


RECORDER, BOUNDARIES = "flight_recorder", "phase_boundaries"
HIDDEN = "hidden"  # the ranks met and started together: no recorder, no culprit
# the recorder and the boundaries each named a rank, not the same one: neither is named
# (a straggler's arrivals and its phase's start cannot both be right)
UNCLEAR = "unclear"
SUMMARY = (COLLECTIVES, MEAN_TO_END, FIRST_TO_END)  # a phase's collectives, summarised
KERNEL_SUMS = (GPU_BUSY, GPU_COMM, GPU_OVERLAP)  # measured over the whole span: they add
WHOLE = SUMMARY + KERNEL_SUMS  # figures of the span as it was: none for a piece of it
COMPUTE, INPUT = "compute", "input"
MIN_SHARE = 0.05  # a culprit leads the median rank by this share of the phase at least
MIN_LEAD_S = 0.05  # seconds: below this no rank is worth chasing
NOISE = 4.0  # ... and by this many robust spreads of the other ranks' leads
ALIGNED = 0.02  # ends within this share of the phase: the ranks met at its end
KEEP = 8  # ranks whose figures a row keeps (those that waited least), with the median

# a phase's role (the rank's, for the report): a word of verl's and the frameworks'
# state names, the first that matches
ROLES = (("ref", "reference"), ("critic", "critic"), ("reward", "reward"),
         ("actor", "actor"), ("update_weights", "actor"), ("train", "actor"),
         ("policy", "actor"))


def role_of(phase: str) -> str:
    words = phase.split("_")
    for word, role in ROLES:
        if word in words or (("_" in word) and word in phase):
            return role
    return "trainer"


@dataclass
class RankPhase:
    """One rank's interval of one phase in a step, with what its client measured.
    ``pieces``: where a rank entered the phase more than once in the step, each time
    (its duration is theirs, not the time from the first start to the last end, and a
    phase between two of them is no phase nested in it); empty for one interval."""

    start: int
    end: int
    evidence: Mapping = field(default_factory=dict)
    pieces: tuple[tuple[int, int], ...] = ()

    @property
    def duration(self) -> float:
        return sum(e - s for s, e in self.spans()) / 1e9

    def spans(self) -> tuple[tuple[int, int], ...]:
        return self.pieces or ((self.start, self.end),)


def rank_number(lane: str) -> str:
    return lane.rpartition("_")[2]


def phase_waits(ranks: Mapping[str, RankPhase]) -> tuple[str, dict[str, float], dict]:
    """(evidence, wait per rank in seconds, the culprit or {}) of one phase. ``ranks``:
    rank -> its interval of the phase."""
    return _phase(ranks)[:3]


def _phase(ranks: Mapping[str, RankPhase]) -> tuple[str, dict[str, float], dict, dict]:
    """``phase_waits`` and, for an unclear phase, what each source pointed at."""
    if len(ranks) < 2:
        return BOUNDARIES, {r: 0.0 for r in ranks}, {}, {}
    recorded = {r: p for r, p in ranks.items()
                if int(p.evidence.get(COLLECTIVES) or 0) > 0
                and p.evidence.get(MEAN_TO_END) is not None}
    bounds = _from_boundaries(ranks)
    if len(recorded) < 2:
        return (*bounds, {})
    waits, culprit = _from_recorder(recorded)
    other = bounds[2]
    if culprit and other and other["rank"] != culprit["rank"] and \
            not _corroborated(ranks, recorded, other["rank"], culprit["rank"]):
        return UNCLEAR, waits if len(recorded) == len(ranks) else bounds[1], {}, {
            RECORDER: _pointer(culprit), BOUNDARIES: _pointer(other)}
    if len(recorded) == len(ranks):
        return RECORDER, waits, culprit, {}
    return (*bounds, {})  # a rank's recorder said nothing: the boundaries alone


def _pointer(culprit: Mapping) -> dict:
    return {k: culprit[k] for k in ("rank", "kind", "lead_s")}


def _corroborated(ranks: Mapping[str, RankPhase], recorded: Mapping[str, RankPhase],
                  late: str, culprit: str) -> bool:
    """Whether the recorder bears out the boundaries' rank beside its own culprit: a
    rank that started the phase late arrived late at its first collective too (by half
    its late start at least, against the ranks neither names), and was only outrun by
    the culprit (both are true, and the others waited for the culprit). Ends that did
    not meet, or a late start whose first arrival was on time, contradict it."""
    if not _aligned(ranks):
        return False
    if late not in recorded:
        return True  # no arrivals of its own to say otherwise
    first = {r: p.end - float(p.evidence.get(FIRST_TO_END) or 0.0) * 1e9
             for r, p in recorded.items()}
    refs = [first[r] for r in recorded if r not in (late, culprit)]
    if not refs:
        return True
    starts = [p.start for r, p in ranks.items() if r not in (late, culprit)]
    late_start = ranks[late].start - statistics.median(starts) if starts else 0
    return first[late] - statistics.median(refs) >= 0.5 * late_start


def _aligned(ranks: Mapping[str, RankPhase]) -> bool:
    """Whether the ranks' phase ended together (they met at its last collective)."""
    ends = [p.end for p in ranks.values()]
    typical = statistics.median(p.duration for p in ranks.values())
    return (max(ends) - min(ends)) / 1e9 <= max(ALIGNED * typical, MIN_LEAD_S)


def _from_recorder(ranks: Mapping[str, RankPhase]) -> tuple[dict[str, float], dict]:
    n = statistics.median(int(p.evidence[COLLECTIVES]) for p in ranks.values())
    to_end = {r: float(p.evidence[MEAN_TO_END]) for r, p in ranks.items()}
    latest = min(to_end.values())
    waits = {r: n * (t - latest) for r, t in to_end.items()}
    culprit = min(to_end, key=lambda r: (to_end[r], _order(r)))
    lead = _lead(waits, culprit)
    if not _material(lead, waits, culprit, ranks):
        return waits, {}
    first = {r: float(p.evidence.get(FIRST_TO_END) or 0.0) for r, p in ranks.items()}
    others = [r for r in ranks if r != culprit]
    at_first = statistics.median(first[r] - first[culprit] for r in others)
    late_start = _late_start(ranks, culprit)
    kind = INPUT if n >= 2 and max(at_first, late_start) >= 0.5 * lead else COMPUTE
    return waits, _culprit(culprit, kind, lead, ranks, RECORDER, collectives=int(n))


def _from_boundaries(ranks: Mapping[str, RankPhase]) -> tuple[str, dict[str, float], dict]:
    ends = {r: p.end for r, p in ranks.items()}
    if _aligned(ranks):  # they met at the end: who started last kept the others waiting
        starts = {r: p.start for r, p in ranks.items()}
        last = max(starts.values())
        waits = {r: (last - s) / 1e9 for r, s in starts.items()}
        culprit = max(starts, key=lambda r: (starts[r], -_order(r)))
        lead = _lead(waits, culprit)
        if not _material(lead, waits, culprit, ranks):
            return HIDDEN, waits, {}
        return BOUNDARIES, waits, _culprit(culprit, INPUT, lead, ranks, BOUNDARIES)
    last = max(ends.values())  # they did not meet: each waited from its end to the last
    waits = {r: (last - e) / 1e9 for r, e in ends.items()}
    culprit = max(ends, key=lambda r: (ends[r], -_order(r)))
    lead = _lead(waits, culprit)
    if not _material(lead, waits, culprit, ranks):
        return BOUNDARIES, waits, {}
    kind = INPUT if _late_start(ranks, culprit) >= 0.5 * lead else COMPUTE
    return BOUNDARIES, waits, _culprit(culprit, kind, lead, ranks, BOUNDARIES)


def _order(rank: str) -> int:
    return int(rank) if rank.isdigit() else 1 << 30


def _lead(waits: Mapping[str, float], culprit: str) -> float:
    """How much longer the culprit took than the median other rank: what it waited."""
    return statistics.median(w for r, w in waits.items() if r != culprit) - waits[culprit]


def _late_start(ranks: Mapping[str, RankPhase], culprit: str) -> float:
    starts = [p.start for r, p in ranks.items() if r != culprit]
    return (ranks[culprit].start - statistics.median(starts)) / 1e9


def _material(lead: float, waits: Mapping[str, float], culprit: str,
              ranks: Mapping[str, RankPhase]) -> bool:
    """A culprit worth naming: it leads by a share of the phase and well beyond how much
    the other ranks differ among themselves (a balanced run names no rank)."""
    typical = statistics.median(p.duration for p in ranks.values())
    others = [w for r, w in waits.items() if r != culprit]
    mid = statistics.median(others)
    spread = 1.4826 * statistics.median(abs(w - mid) for w in others) if others else 0.0
    return lead >= max(MIN_SHARE * typical, MIN_LEAD_S, NOISE * spread)


def _culprit(rank: str, kind: str, lead: float, ranks: Mapping[str, RankPhase],
             evidence: str, **extra) -> dict:
    ev = ranks[rank].evidence
    out = {"rank": rank, "kind": kind, "lead_s": lead, "ranks": len(ranks),
           "evidence": evidence, **extra}
    for key, name in ((NODE, "node"), (GPU, "gpu")) + \
            (((ARRIVALS, "arrivals"),) if evidence == RECORDER else ()):
        if ev.get(key) not in (None, ""):
            out[name] = str(ev[key])
    return out


@dataclass
class RankFigures:
    """A step's ranks: compute and wait per rank (summed over phases; the ranks that
    waited least kept, with the median), the culprit of the phase it cost most in, and
    each phase's evidence."""

    ranks: dict[str, dict[str, float]] = field(default_factory=dict)
    median: dict[str, float] = field(default_factory=dict)
    culprit: dict | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    count: int = 0
    # per unclear phase, the rank each source pointed at (``why_unclear`` says it)
    unclear: dict[str, dict] = field(default_factory=dict)


def attribute(phases: Mapping[str, Mapping[str, RankPhase]]) -> RankFigures:
    """A step's rank figures from ``phases``: phase -> rank -> its interval."""
    compute: dict[str, float] = {}
    wait: dict[str, float] = {}
    out = RankFigures()
    for phase, ranks in sorted(phases.items()):
        evidence, waits, culprit, unclear = _phase(ranks)
        out.evidence[phase] = evidence
        if unclear:
            out.unclear[phase] = unclear
        for r, p in ranks.items():
            if nested(phases, phase, r, p):  # verl's train_batch inside actor_update
                continue
            w = min(max(0.0, waits.get(r, 0.0)), p.duration)
            wait[r] = wait.get(r, 0.0) + w
            compute[r] = compute.get(r, 0.0) + p.duration - w
        if culprit:
            culprit.update(phase=phase, role=role_of(phase),
                           waited_s=_waited(waits, culprit["rank"]))
            if out.culprit is None or culprit["waited_s"] * (culprit["ranks"] - 1) > \
                    out.culprit["waited_s"] * (out.culprit["ranks"] - 1):
                out.culprit = culprit
    out.count = len(compute)
    if not compute:
        return out
    keep = sorted(compute, key=lambda r: (wait[r], _order(r)))[:KEEP]
    out.ranks = {r: {"compute_s": compute[r], "wait_s": wait[r]}
                 for r in sorted(keep, key=_order)}
    out.median = {"compute_s": statistics.median(compute.values()),
                  "wait_s": statistics.median(wait.values())}
    return out


def nested(phases: Mapping[str, Mapping[str, RankPhase]], phase: str, rank: str,
           p: RankPhase) -> bool:
    """Whether this interval lies inside another phase's on the same rank (counted
    there: a rank's compute and wait add up to its busy time once)."""
    for other, ranks in phases.items():
        q = ranks.get(rank)
        if other != phase and q is not None and _inside(p, q) \
                and (q.start, -q.end, other) < (p.start, -p.end, phase):
            return True
    return False


def _inside(p: RankPhase, q: RankPhase) -> bool:
    """Every time the rank was in ``p`` it was in ``q`` too (a phase between two entries
    of ``q`` is not inside it)."""
    outer = q.spans()
    return all(any(a <= s and e <= b for a, b in outer) for s, e in p.spans())


def _waited(waits: Mapping[str, float], culprit: str) -> float:
    """What the median other rank waited for the culprit."""
    return statistics.median(w for r, w in waits.items() if r != culprit)


def from_lanes(lanes: Mapping[str, Iterable[tuple]], lo: int, hi: int, *,
               by_end: bool = False) -> dict[str, dict[str, RankPhase]]:
    """phase -> rank -> its interval in the step [lo, hi), from rank lanes' intervals
    ``(state, start, end[, evidence])``: a rank's several intervals of one phase in a
    step are one, their times and their collectives added.

    Clipped to the window (``by_end`` False: what the step's time went to), an interval
    cut at its end keeps no recorder summary: the summary is measured against the end
    it had. ``by_end``: each interval whole, in the step it ended in (which rank a step
    waited for). Outside Ray rank 0 logs the step while the other ranks already started
    the next one and wait for it at its first collective: their next phase starts before
    the step's mark, and cut in two it was counted in both steps with all its
    collectives, joined in the earlier one with that step's own interval of the phase."""
    out: dict[str, dict[str, RankPhase]] = {}
    for lane, intervals in lanes.items():
        rank = rank_number(lane)
        for iv in intervals:
            state, s, e = iv[0], iv[1], iv[2]
            if (not lo < e <= hi) if by_end else (e <= lo or s >= hi):
                continue
            ev = unpack(iv[3] if len(iv) > 3 else None)
            if not by_end:
                if e > hi or s < lo:  # the summary is against the end; the GPU's all of it
                    cut = WHOLE if e > hi else KERNEL_SUMS
                    ev = {k: v for k, v in ev.items() if k not in cut}
                s, e = max(s, lo), min(e, hi)
            here = RankPhase(s, e, ev)
            have = out.setdefault(state, {}).get(rank)
            out[state][rank] = here if have is None else _joined(have, here)
    return out


def _count(p: RankPhase) -> int | None:
    """Its collectives as its client counted them; None where it could not (no
    recorder, or a count without its summary)."""
    n = p.evidence.get(COLLECTIVES)
    if n is None:
        return None
    n = int(n)
    return n if n == 0 or p.evidence.get(MEAN_TO_END) is not None else None


def _joined(a: RankPhase, b: RankPhase) -> RankPhase:
    """Two intervals of one phase on one rank: one, its time theirs, its collectives'
    summary weighted against the later end. An interval the recorder counted none in
    adds none; one it could not read leaves the whole without a summary (a partial
    count would mislead)."""
    start, end = min(a.start, b.start), max(a.end, b.end)
    ev = {k: v for k, v in {**a.evidence, **b.evidence}.items() if k not in WHOLE}
    for k in KERNEL_SUMS:  # both measured: their sum; one of them not: none (a part misleads)
        if a.evidence.get(k) is not None and b.evidence.get(k) is not None:
            ev[k] = float(a.evidence[k]) + float(b.evidence[k])
    na, nb = _count(a), _count(b)
    if na is not None and nb is not None:
        ev[COLLECTIVES] = na + nb
        counted = sorted((p for p, n in ((a, na), (b, nb)) if n), key=lambda p: p.start)
        if counted:  # each summary against the joined end: shifted by its end's distance
            ev[MEAN_TO_END] = sum(
                n * (float(p.evidence[MEAN_TO_END]) + (end - p.end) / 1e9)
                for p, n in ((a, na), (b, nb)) if n) / (na + nb)
            first = counted[0]
            ev[FIRST_TO_END] = float(first.evidence.get(FIRST_TO_END) or 0) + \
                (end - first.end) / 1e9
    return RankPhase(start, end, ev, tuple(sorted(a.spans() + b.spans())))


def where(scope: Mapping) -> str:
    """``replica 1``, ``node n-2``, ``rank 3 (actor, node n-0, GPU 1)``."""
    if scope.get("rank") is not None:
        bits = [b for b in (scope.get("role"),
                            f"node {scope['node']}" if scope.get("node") else None,
                            f"GPU {scope['gpu']}" if scope.get("gpu") else None) if b]
        return f"rank {scope['rank']}" + (f" ({', '.join(bits)})" if bits else "")
    for key in ("replica", "node"):
        if scope.get(key) is not None:
            return f"{key} {scope[key]}"
    return ""


def why_rank(c: Mapping) -> str:
    """Why a rank is the culprit, in a line (a step's culprit, or a change's scope)."""
    others = (c.get("ranks") or 2) - 1
    phase = c.get("phase") or "its phase"
    source = "the phase's boundaries"
    if c.get("evidence") == RECORDER:
        source = SOURCES.get(str(c.get("arrivals")), "torch's Flight Recorder")
    if c.get("kind") == "input":
        what = f"its data came {c['lead_s']:.2f} s late into {phase}"
    else:
        what = f"it computed {c['lead_s']:.2f} s longer in {phase}"
    return (f"why: {what} while the other {others} rank{'s' if others != 1 else ''} "
            f"waited {c['waited_s']:.2f} s for it (from {source})")


def why_unclear(phase: str, unclear: Mapping) -> str:
    """Why no rank is named in a phase whose sources disagree, in a line."""
    def said(source: str, name: str) -> str:
        p = unclear.get(source) or {}
        what = (f"its data came {p.get('lead_s', 0):.2f} s late" if p.get("kind") == INPUT
                else f"it computed {p.get('lead_s', 0):.2f} s longer")
        return f"{name} at rank {p.get('rank', '?')} ({what})"

    recorder = said(RECORDER, "torch's Flight Recorder points")
    bounds = said(BOUNDARIES, "the phase's boundaries")
    return (f"ranks in {phase}: unclear, no rank named: {recorder} and {bounds}, "
            "and both cannot be right")


def frame_label(frame: Mapping) -> str:
    """A profile's frame as the report, the CLI, the dashboard and the pictures name it:
    ``slow_backward (train.py:21)``."""
    file = str(frame.get("file") or "?").rsplit("/", 1)[-1]
    return f"{frame.get('name', '?')} ({file}:{frame.get('line') or '?'})"


def frame_lines(frames: Iterable[Mapping], n: int, total: bool = False) -> list[str]:
    """The top ``n`` frames, a line each: their own share of the samples (and, with
    ``total``, the share with what they called)."""
    return [f"{100 * f.get('self_share', 0):5.1f}% {frame_label(f)}"
            + (f", {100 * f.get('total_share', 0):.0f}% with what it called" if total else "")
            for f in list(frames)[:n]]


def profile_lines(profile: Mapping | None, n: int = 5) -> list[str]:
    """A rank's profile in a few lines: where its time went, in its code."""
    if not profile:
        return []
    return [f"its code ({profile.get('method') or 'profile'} {profile['id']}, "
            f"{profile.get('seconds', 0):g} s; {profile.get('download', '')}):",
            *("  " + line for line in frame_lines(profile.get("top_frames", []), n))]
