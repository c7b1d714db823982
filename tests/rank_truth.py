"""The ground truth of a straggling rank, from the ranks' own clocks around their
collectives (examples/straggler_ranks_spawn.py --truth-file, examples/profiled_ranks.py's
stamps): each rank's lead, as the anatomy defines it (rl_insight/anatomy/ranks.py)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping


def leads(waits: Mapping[str, float]) -> dict[str, float]:
    """rank -> how much less it waited in a phase's collectives than the median other
    rank (what the others waited for it); empty with one rank."""
    if len(waits) < 2:
        return {}
    return {r: statistics.median(x for o, x in waits.items() if o != r) - w
            for r, w in waits.items()}
