"""The engines' requests as the what-if reads them: how long a replica's share of a step
must take (its longest request, and its requests' time in the engine over the most that
ran at once), and how much sooner the rollout would end with its longest responses cut.

Plain data in (the step's request records, rl_insight.anatomy.requests), plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from rl_insight.anatomy.requests import Request
from rl_insight.wire import laneid

NS = 1e9
TAIL_CUT = 0.01  # the share of a step's longest responses the tail what-if cuts


def service(r: Request) -> float:
    """A request's time in the engine (its queue left out)."""
    return max(0.0, r.e2e_s - (r.queue_s or 0.0))


def makespan(services: Sequence[tuple[int, int]], durations: Sequence[float]
              ) -> tuple[float, float]:
    """(longest request, the requests' engine time over the most that ran at once): a
    replica cannot finish before either."""
    events = sorted([(s, 1) for s, _ in services] + [(e, -1) for _, e in services])
    most = running = 0
    for _, d in events:
        running += d
        most = max(most, running)
    return max(durations), sum(durations) / max(most, 1)


def policy_requests(requests: Sequence[Request]) -> list[Request]:
    families: dict[str, str] = {}
    out = []
    for r in requests:
        fam = families.get(r.role)
        if fam is None:
            fam = families[r.role] = laneid.family_of(r.role)
        if fam == laneid.ROLLOUT:
            out.append(r)
    return out


class ReplicaRequests(NamedTuple):
    """A replica's requests in the engine: their spans, their times, its bound."""

    requests: list[Request]
    spans: list[tuple[int, int]]
    services: list[float]
    bound: tuple[float, float]


def by_replica(requests: Sequence[Request]) -> dict[str, ReplicaRequests]:
    """The policy's requests of a step per replica, with each replica's bound."""
    grouped: dict[str, list[Request]] = {}
    for r in policy_requests(requests):
        grouped.setdefault(r.replica, []).append(r)
    out = {}
    for key, rs in grouped.items():
        services = [service(r) for r in rs]
        spans = [(r.end_ns - int(t * NS), r.end_ns) for r, t in zip(rs, services, strict=True)]
        out[key] = ReplicaRequests(rs, spans, services, makespan(spans, services))
    return out


def tail_cut(generating: Mapping[str, float], replicas: Mapping[str, ReplicaRequests]
             ) -> float | None:
    """How much sooner the rollout's generation would end were the step's longest
    responses (TAIL_CUT of them, one at least) cut at the length of the longest of the
    rest: each replica's generating time (``generating``, seconds) scaled by what its
    requests' bound (:func:`makespan`) becomes."""
    everyone = [r for rep in replicas.values() for r in rep.requests]
    if len(everyone) < 2:
        return None
    tokens = all(r.completion_tokens for r in everyone)
    size = (lambda r: r.completion_tokens) if tokens else service
    ranked = sorted(everyone, key=size, reverse=True)
    n = max(1, math.ceil(TAIL_CUT * len(everyone)))
    cut, cap = {id(r) for r in ranked[:n]}, size(ranked[n])
    before = max(generating.values(), default=0.0)
    after = 0.0
    for k, g in generating.items():
        rep = replicas.get(k)
        if rep is None or not any(id(r) in cut for r in rep.requests):
            after = max(after, g)
            continue
        new = makespan(rep.spans, [_shortened(r, cap, size) if id(r) in cut else t
                                   for r, t in zip(rep.requests, rep.services, strict=True)])
        old = max(rep.bound)
        after = max(after, g * (max(new) / old) if old > 0 else g)
    return max(0.0, before - after)


def _shortened(r: Request, cap: float, size) -> float:
    """A cut request's engine time: its decode in proportion to what is left of it."""
    whole = size(r) or 1.0
    keep = min(1.0, cap / whole)
    decode = r.decode_s if r.decode_s is not None else service(r)
    return max(0.0, service(r) - decode * (1.0 - keep))


