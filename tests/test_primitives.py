"""trace_state and trace_op in every context a serving engine gives them: blocks that exit
in another context (an abandoned stream closed by the loop's finalizer), generators as
decorated functions, cancellation, and random interleavings of all of them on many tasks.
Every interval must close, and none may be counted twice."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rl_insight
from rl_insight.client.runtime import RUNTIME
from rl_insight.wire.events import Span, StateChange

S = 1_000_000_000


def intervals(got: list, lane: str, state: str | None = None) -> list:
    return [e for e in got if type(e) is Span and e.lane == lane
            and (state is None or e.name == state)]


def run_loop(main) -> None:
    """A fresh loop each time, closed as asyncio.run closes it: its async generators
    are finalised by the loop (shutdown_asyncgens), in the loop's own context."""
    asyncio.run(main())


def test_an_abandoned_stream_does_not_silence_its_lane(recorded):
    """The reproduction: a streaming request whose consumer stops early is closed by the
    loop's finalizer in another context; later requests on that lane still give spans."""
    _, got = recorded

    async def stream(lane):
        with rl_insight.trace_state("vllm_generate", state_lane_id=lane):
            for i in range(5):
                await asyncio.sleep(0)
                yield i

    async def main():
        async for _ in stream("replica_9"):  # the client disconnects after one chunk
            break
        for _ in range(3):
            async for _ in stream("replica_9"):
                pass

    run_loop(main)
    rl_insight.flush(2)
    # overlapping blocks of one state form one interval: count blocks, not spans
    spans = intervals(got, "replica_9", "vllm_generate")
    assert sum(dict(s.attributes).get("blocks", 1) for s in spans) == 4, spans
    assert not any(k[0] == "replica_9" for k in RUNTIME.open)


def test_decorated_async_generators_time_the_whole_iteration(recorded):
    _, got = recorded

    @rl_insight.trace_state("sglang_generate", state_lane_id="replica_8")
    async def chunks():
        for i in range(3):
            await asyncio.sleep(0.05)
            yield i

    @rl_insight.trace_op("stream", state_lane_id="req_8")
    async def op_chunks():
        for i in range(3):
            await asyncio.sleep(0.05)
            yield i

    @rl_insight.trace_state("detokenize", state_lane_id="replica_8")
    def sync_chunks():
        yield from range(3)
        return "done"

    async def main():
        assert [i async for i in chunks()] == [0, 1, 2]
        assert [i async for i in op_chunks()] == [0, 1, 2]

    run_loop(main)
    assert list(sync_chunks()) == [0, 1, 2]
    rl_insight.flush(2)
    (state,) = intervals(got, "replica_8", "sglang_generate")
    (op,) = intervals(got, "req_8", "stream")
    for span in (state, op):  # three sleeps of 50 ms: the iteration, not its creation
        assert span.end_ns - span.start_ns >= 0.14 * S, span
        assert "error" not in dict(span.attributes)
    assert len(intervals(got, "replica_8", "detokenize")) == 1


def test_cancellation_inside_a_block_closes_it(recorded):
    _, got = recorded

    async def main():
        inside = asyncio.Event()

        async def request():
            with rl_insight.trace_state("vllm_generate", state_lane_id="replica_7"):
                inside.set()
                await asyncio.sleep(60)  # not a wait: held until cancelled

        task = asyncio.create_task(request())
        await inside.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run_loop(main)
    rl_insight.flush(2)
    (span,) = intervals(got, "replica_7")
    assert dict(span.attributes)["error"] == "CancelledError"
    assert not any(k[0] == "replica_7" for k in RUNTIME.open)


ACTIONS = st.sampled_from(["exit", "error", "cancel", "abandon"])
TASK = st.tuples(st.sampled_from(["replica_0", "replica_1"]),
                 st.sampled_from(["vllm_generate", "vllm_sleep"]), ACTIONS,
                 st.integers(0, 4), st.integers(0, 4))


# the recorder is cleared at the start of each example
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(TASK, min_size=1, max_size=30))
def test_random_interleavings_close_every_interval_once(recorded, tasks):
    """Many tasks enter, wait a few loop turns, then exit, fail, are cancelled or are
    abandoned mid-stream; afterwards no interval is open, each interval was opened and
    closed once, and its blocks add up to the blocks entered."""
    _, got = recorded
    got.clear()
    RUNTIME.open.clear()

    async def block(lane, state, delay, hold, how):
        for _ in range(delay):
            await asyncio.sleep(0)
        with rl_insight.trace_state(state, state_lane_id=lane):
            for _ in range(hold):
                await asyncio.sleep(0)
                if how == "abandon":
                    yield
            if how == "error":
                raise KeyError(lane)
            if how == "cancel":
                await asyncio.sleep(60)  # not a wait: held until cancelled
        yield

    async def consume(agen, how):
        async for _ in agen:
            if how == "abandon":
                return  # the generator is left to the loop's finalizer

    async def main():
        jobs = [asyncio.create_task(consume(block(*t[:2], t[3], t[4], t[2]), t[2]))
                for t in tasks]
        for _ in range(12):
            await asyncio.sleep(0)
        for job, t in zip(jobs, tasks, strict=True):
            if t[2] == "cancel":
                job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)

    run_loop(main)
    assert not RUNTIME.open, RUNTIME.open
    rl_insight.flush(5)
    opened = [e for e in got if type(e) is StateChange and e.entering]
    closed = [e for e in got if type(e) is Span
              and ("monitor.trace_segment", "state_interval") in e.attributes]
    assert len({e.span_id for e in closed}) == len(closed)  # none closed twice
    assert sorted(e.token for e in opened) == sorted(e.span_id for e in closed)
    entered = sum(dict(e.attributes).get("blocks", 1) for e in closed)
    assert entered == len(tasks)
