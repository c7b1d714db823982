"""When a lane actor goes (rl_insight/collector/lifetime.py): once every job that sent to
it has ended and the grace passed, never while one of them still sends; and with the
defaults, no lane actor is left a minute after its job ends, as docs/collecting.md says
(the Ray-world test, tests/test_lane_tier.py, sets a shorter grace to spend less time)."""

from __future__ import annotations

from rl_insight.collector.lifetime import JobLifetime
from rl_insight.config.settings import ClientSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exit_after_job_end(grace_s: float, check_s: float, job_end_phase: float) -> float:
    """Seconds from the job's end to the check that lets the actor go, the actor checking
    every ``check_s`` as LaneActor does, the job ending ``job_end_phase`` after a check."""
    clock = Clock()
    life = JobLifetime(grace_s, clock)
    life.seen("01000000")
    ended_at = clock.now + job_end_phase
    for _ in range(1000):
        clock.now += check_s
        ended = {"01000000"} if clock.now >= ended_at else set()
        if life.over(ended):
            return clock.now - ended_at
    raise AssertionError("the actor never went")


def test_the_actor_stays_while_a_job_runs_and_goes_after_the_grace():
    clock = Clock()
    life = JobLifetime(20.0, clock)
    life.seen("a")
    life.seen("b")
    assert not life.over({"a"})  # b still runs
    clock.now += 30
    assert not life.over({"a"})
    assert not life.over({"a", "b"})  # every job ended just now: the grace starts
    clock.now += 19
    assert not life.over(set())
    clock.now += 1
    assert life.over(set())


def test_a_job_that_sends_again_keeps_its_actor():
    clock = Clock()
    life = JobLifetime(20.0, clock)
    life.seen("a")
    assert not life.over({"a"})
    clock.now += 15
    life.seen("c")  # a new job on the same lane actor (a replica lane shared by runs)
    clock.now += 10
    assert not life.over(set())
    assert not life.over({"a"})
    clock.now += 25
    assert not life.over({"c"})
    clock.now += 20
    assert life.over(set())


def test_an_actor_no_job_used_goes_after_the_grace():
    clock = Clock()
    life = JobLifetime(5.0, clock)
    assert not life.over(set())
    clock.now += 5
    assert life.over(set())


def test_with_the_defaults_no_lane_actor_is_left_a_minute_after_its_job():
    from rl_insight.ray.actors import JOB_CHECK_S

    grace = ClientSettings().lane_exit_grace_s
    worst = max(exit_after_job_end(grace, JOB_CHECK_S, phase / 10 * JOB_CHECK_S)
                for phase in range(1, 11))
    # Ray's job table marks a driver's job dead within a few seconds of its exit: the
    # rest of the minute is for that and for the actor's kill
    assert worst <= 45, (grace, JOB_CHECK_S, worst)
    assert exit_after_job_end(5, JOB_CHECK_S, JOB_CHECK_S / 2) <= 5 + 2 * JOB_CHECK_S
