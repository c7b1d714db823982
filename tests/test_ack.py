"""Delivery confirmation: what a restarted actor lost is sent again, nothing else."""

from __future__ import annotations

from rl_insight.collector.ack import Unconfirmed, Watermarks


def test_confirmed_batches_are_forgotten_and_a_new_incarnation_gets_the_rest():
    actor = Watermarks()
    mine = Unconfirmed(max_events=1000)
    for i in range(1, 6):
        assert mine.add(10, f"batch{i}") == i
        actor.received("p1", i)
        if i == 3:
            snap = actor.snapshot()  # a tick starts after batch 3 ...
    actor.confirm(snap)  # ... and delivers it
    assert mine.settle(*actor.confirmed("p1")) == []
    assert [s for s, _, _ in mine.items] == [4, 5] and mine.events == 20
    restarted = Watermarks()  # killed and restarted: batches 4 and 5 were never pushed
    assert mine.settle(*restarted.confirmed("p1")) == [(4, "batch4"), (5, "batch5")]
    restarted.received("p1", 5)
    restarted.confirm(restarted.snapshot())
    assert mine.settle(*restarted.confirmed("p1")) == [] and not mine.items


def test_the_resend_budget_counts_what_it_cannot_keep():
    mine = Unconfirmed(max_events=25)
    for i in range(5):
        mine.add(10, i)
    assert mine.overflow == 30 and mine.events == 20
    assert [a for _, _, a in mine.items] == [3, 4]
