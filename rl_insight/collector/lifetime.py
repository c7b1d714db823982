"""When a lane actor may go: it belongs to the jobs whose processes send to it, and
leaves once all of them have ended (plus a grace period for stragglers), or when no
job used it for as long. Plain data in (job ids seen, the ended ones, the time), a
decision out; the actor asks Ray which jobs ended."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


class JobLifetime:
    def __init__(self, grace_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s = grace_s
        self.clock = clock
        self.jobs: set[str] = set()
        self.created = clock()
        self.ended_since: float | None = None  # when every job was first seen ended

    def seen(self, job_id: str) -> None:
        """A job sent something: the actor is its again."""
        if job_id and job_id not in self.jobs:
            self.jobs.add(job_id)
        if job_id:
            self.ended_since = None

    def over(self, ended: Iterable[str]) -> bool:
        """Whether the actor may exit, given the ids of the jobs that have ended. Jobs
        that ended are forgotten, so a long-lived actor's set stays small."""
        now = self.clock()
        if not self.jobs:  # created and never used, or every job already forgotten
            start = self.ended_since if self.ended_since is not None else self.created
            return now - start >= self.grace_s
        self.jobs -= set(ended)
        if self.jobs:
            self.ended_since = None
            return False
        self.ended_since = now
        return self.grace_s <= 0
