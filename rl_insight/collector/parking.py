"""Events of a Ray job whose run has no name yet, held where they arrive (the hub for
metrics, a lane actor for states and spans) until some process of the job names the run,
or PARK_S passed: then they go to project ``default``, experiment ``<job id>``.

verl creates and wakes its replicas in ``init_workers``, before ``fit()`` makes the
Tracking that names the run; a replica's events of that time belong to the run. Held at
the actor that receives them, not in the sending process: a replica killed at the job's
end (Ray gives it no exit hook) has already handed them over.
"""

from __future__ import annotations

PARK_S = 30.0


class Parking:
    """Per job, when its first held event came and the events held (at most ``limit``).
    Not locked: its owner's lock guards it."""

    def __init__(self, limit: int, seconds: float = PARK_S) -> None:
        self.limit = limit
        self.seconds = seconds
        self.jobs: dict[str, tuple[float, list]] = {}

    def hold(self, job: str, items: list, now: float) -> int:
        """Hold ``items`` for ``job``; returns how many did not fit (the caller counts them
        as dropped)."""
        since, held = self.jobs.setdefault(job, (now, []))
        room = max(self.limit - len(held), 0)
        held.extend(items[:room])
        return max(len(items) - room, 0)

    def take(self, job: str) -> list:
        """The job's run is named: what it held, oldest first."""
        return self.jobs.pop(job, (0.0, []))[1]

    def expired(self, now: float) -> list[tuple[str, list]]:
        """Jobs that named no run within ``seconds``, with what they held."""
        old = [job for job, (since, _) in self.jobs.items() if now - since > self.seconds]
        return [(job, self.jobs.pop(job)[1]) for job in old]
