"""What a rank's GPU did in each range it marked (rl_insight/profiler/kernels.py): busy,
communicating, communication under computation, idle, on hand-made rank traces whose
answer is known; the figures adding up over random kernels, checked against a
nanosecond-by-nanosecond count; the rank whose kernels ran longest."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.profiler import kernels
from rl_insight.profiler.model import COLLECTIVE, KERNEL, RANGE, Event, RankTrace
from rl_insight.wire import rank_evidence as evidence

MS = 1_000_000


def ev(kind: str, name: str, a_ms: float, z_ms: float, lane: str = "stream 7") -> Event:
    return Event(kind, name, int(a_ms * MS), int(z_ms * MS), lane)


def rank(r: int, *events: Event) -> RankTrace:
    return RankTrace(r, f"rank{r}.jsonl", events=list(events))


def test_a_range_s_busy_comm_overlap_and_idle_are_what_its_kernels_did():
    t = rank(0, ev(RANGE, "actor_update", 0, 1000, "thread 1"),
             ev(KERNEL, "gemm", 100, 400), ev(KERNEL, "gemm", 500, 900),
             ev(KERNEL, "add", 450, 550, "stream 9"),  # another stream, overlapping one
             ev(COLLECTIVE, "ncclDevKernel_AllReduce", 600, 1100, "stream 13"),  # past the end
             ev(KERNEL, "gemm", 1200, 1300))  # after the range
    [(r, f)] = kernels.per_range(t)
    assert r.name == "actor_update"
    assert f.busy_s == pytest.approx(0.85)  # 100-400, 450-1000
    assert f.comm_s == pytest.approx(0.4)  # 600-1000: clipped to the range
    assert f.overlap_s == pytest.approx(0.3)  # 600-900 under the second gemm
    assert f.idle_s == pytest.approx(0.15)
    assert f.compute_s == pytest.approx(0.75)  # 100-400, 450-900
    assert kernels.span_attributes(f) == {evidence.GPU_BUSY: 0.85, evidence.GPU_COMM: 0.4,
                                          evidence.GPU_OVERLAP: 0.3}


def test_every_range_gets_its_own_window_and_an_idle_gpu_says_so():
    t = rank(1, ev(RANGE, "compute_log_prob", 0, 100), ev(RANGE, "update_actor", 200, 400),
             ev(KERNEL, "k", 50, 250))
    got = {r.name: f for r, f in kernels.per_range(t)}
    assert got["compute_log_prob"].busy_s == pytest.approx(0.05)
    assert got["update_actor"].busy_s == pytest.approx(0.05)
    assert got["update_actor"].idle_s == pytest.approx(0.15)
    assert kernels.figures([], 0, 10 * MS).idle_s == pytest.approx(0.01)


@pytest.mark.parametrize("name, comm", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", True), ("ncclKernel_AllGather_RING_LL", True),
    ("hcom_allReduce__360_0_1", True), ("HCCL_AllGather", True),
    ("sm90_xmma_gemm_bf16", False), ("MatMulV2", False), ("memcpy", False)])
def test_communication_is_told_by_the_library_s_kernel_names(name, comm):
    assert kernels.is_collective(name) is comm


def test_the_rank_whose_kernels_ran_longest_and_its_lead_on_the_median():
    top = kernels.longest({0: 1.0, 1: 1.1, 2: 1.6, 3: 1.05})
    assert (top.rank, top.busy_s) == (2, 1.6)
    assert top.lead_s == pytest.approx(1.6 - 1.075)
    assert kernels.longest({4: 1.0, 3: 1.0}).rank == 3  # a tie: the lowest rank
    assert kernels.longest({}) is None


intervals = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 30),
                               st.sampled_from([KERNEL, COLLECTIVE])), max_size=12)


@settings(max_examples=200, deadline=None)
@given(intervals, st.integers(0, 40), st.integers(1, 60))
def test_the_figures_add_up_and_match_a_count_of_every_nanosecond(raw, lo, width):
    events = [Event(kind, "k", a, a + d, "s") for a, d, kind in raw]
    hi = lo + width
    f = kernels.figures(events, lo, hi)
    compute = {t for e in events if e.kind == KERNEL for t in range(e.start_ns, e.end_ns)}
    comm = {t for e in events if e.kind == COLLECTIVE for t in range(e.start_ns, e.end_ns)}
    window = set(range(lo, hi))
    assert f.busy_s * 1e9 == pytest.approx(len((compute | comm) & window))
    assert f.comm_s * 1e9 == pytest.approx(len(comm & window))
    assert f.overlap_s * 1e9 == pytest.approx(len(compute & comm & window))
    assert f.busy_s + f.idle_s == pytest.approx(f.window_s)
    assert f.busy_s == pytest.approx(f.compute_s + f.comm_s - f.overlap_s)
