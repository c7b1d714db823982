"""The ground truth of a straggling rank, from the ranks' own clocks around their
collectives (examples/straggler_ranks_spawn.py --truth-file, examples/profiled_ranks.py's
stamps): each rank's lead, as the anatomy defines it (rl_insight/anatomy/ranks.py)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from rl_insight.anatomy.ranks import MIN_LEAD_S, MIN_SHARE, NOISE


def leads(waits: Mapping[str, float]) -> dict[str, float]:
    """rank -> how much less it waited in a phase's collectives than the median other
    rank (what the others waited for it); empty with one rank."""
    if len(waits) < 2:
        return {}
    return {r: statistics.median(x for o, x in waits.items() if o != r) - w
            for r, w in waits.items()}


def clear_culprit(waits: Mapping[str, float], durations: Mapping[str, float],
                  margin: float = 1.5) -> str | None:
    """The rank the anatomy's rule names (rl_insight/anatomy/ranks.py ``_material``: a
    lead of a share of the phase, and well beyond how the other ranks differ), judged on
    the ranks' own clocks with ``margin`` to spare; None when no rank clears it (a host
    whose load slowed two ranks at once: the rule names neither, by design)."""
    if len(waits) < 2:
        return None
    lead = leads(waits)
    rank = max(lead, key=lead.get)
    others = [w for r, w in waits.items() if r != rank]
    mid = statistics.median(others)
    spread = 1.4826 * statistics.median(abs(w - mid) for w in others)
    bar = max(MIN_SHARE * statistics.median(durations.values()), MIN_LEAD_S, NOISE * spread)
    return rank if lead[rank] >= margin * bar else None
