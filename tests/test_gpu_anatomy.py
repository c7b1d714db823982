"""The ranks' GPUs in the step anatomy (rl_insight/anatomy/gpu.py): the kernel figures an
imported profile puts on each rank's phase spans (rank.gpu_busy_s, rank.gpu_comm_s,
rank.gpu_overlap_s; an MoE stage's rank.expert_tokens) read into each step's row, its
rl_insight_step_rank_gpu_* and expert series, and `report --step N`; in plain data and
through the in-process server over real OTLP."""

from __future__ import annotations

import time

import pytest

from rl_insight.anatomy import explain, gpu
from rl_insight.anatomy import ranks as ev
from rl_insight.anatomy.rows import step_row
from rl_insight.profiler import experts
from tests.test_anatomy import server  # noqa: F401  (the route, in-process, over real OTLP)

S = 1_000_000_000
EXPERTS = {0: [30, 10, 10, 0], 1: [4, 4, 4, 28]}


def figures(busy: float, comm: float = 1.0, overlap: float = 0.6) -> dict:
    return {ev.GPU_BUSY: busy, ev.GPU_COMM: comm, ev.GPU_OVERLAP: overlap}


def step_lanes(t0: float, slow: dict[int, float] | None = None, ranks: int = 3,
               moe: bool = False) -> dict[str, list[tuple]]:
    """actor_update from t0+2 to t0+7 on every rank, verl's train_batch nested in it; the
    kernels busy 3 s (more on a slow rank), 1 s communicating, 0.6 s of it hidden."""
    out = {}
    for k in range(ranks):
        busy = 3.0 + (slow or {}).get(k, 0.0)
        update = {**figures(busy), **(experts.span_attributes(EXPERTS) if moe and k == 0
                                      else {})}
        out[f"rank_{k}"] = [("actor_update", int((t0 + 2) * S), int((t0 + 7) * S), update),
                            ("train_batch", int((t0 + 2.5) * S), int((t0 + 6.5) * S),
                             figures(busy - 0.5))]
    return out


def test_a_step_s_row_names_the_rank_whose_kernels_ran_longest_and_the_median():
    row = step_row(2, 10 * S, 20 * S, step_lanes(10, slow={2: 1.5}))
    assert row.gpu_count == 3
    assert row.gpu_longest == {"rank": "2", "busy_s": 4.5, "lead_s": pytest.approx(1.5),
                               "ranks": 3}
    assert row.gpu_ranks["2"] == {"busy_s": 4.5, "comm_s": 1.0, "overlap_s": 0.6,
                                  "idle_s": pytest.approx(0.5)}  # the nested phase once
    assert row.gpu_median == {"busy_s": 3.0, "comm_s": 1.0, "overlap_s": 0.6,
                              "idle_s": pytest.approx(2.0)}
    for v in row.gpu_ranks.values():
        assert v["busy_s"] + v["idle_s"] == pytest.approx(5.0)  # the phase, once


def test_a_row_keeps_the_ranks_worth_naming_and_ranks_without_kernels_are_not_counted():
    lanes = step_lanes(0, slow={r: r / 10 for r in range(20)}, ranks=20)
    lanes["rank_99"] = [("actor_update", 2 * S, 7 * S)]  # monitored live: no profile
    row = step_row(1, 0, 10 * S, lanes)
    assert row.gpu_count == 20 and len(row.gpu_ranks) == gpu.KEEP
    assert set(row.gpu_ranks) == {str(r) for r in range(12, 20)}
    assert row.gpu_longest["rank"] == "19"
    assert step_row(1, 0, 10 * S, {"rank_0": [("actor_update", 2 * S, 7 * S)]}).gpu_longest \
        is None


def test_an_interval_cut_by_the_window_carries_no_kernel_figures_of_the_whole():
    cut = ev.from_lanes({"rank_0": [("actor_update", 5 * S, 15 * S, figures(8.0))]}, 10 * S,
                        20 * S)
    assert ev.GPU_BUSY not in cut["actor_update"]["0"].evidence
    joined = ev.from_lanes({"rank_0": [("actor_update", 11 * S, 12 * S, figures(0.5)),
                                       ("actor_update", 13 * S, 14 * S, figures(0.25))]},
                           10 * S, 20 * S, by_end=True)
    assert joined["actor_update"]["0"].evidence[ev.GPU_BUSY] == 0.75


def test_the_route_the_series_and_the_report_carry_the_gpu_figures(server):  # noqa: F811
    client, _ = server
    from rl_insight.collector.otlp_encode import encode
    from rl_insight.wire.events import Identity, Span

    ident, t0 = Identity("p", "kernels"), int(time.time()) - 60  # /metrics: the recent
    spans = []
    for i in range(3):
        lanes = step_lanes(t0 + 10 * i, slow={2: 1.5} if i == 2 else None, moe=i == 2)
        spans += [(ident, "host:1", Span(state, s, e, lane, tuple(attrs.items()),
                                         ends_state=True))
                  for lane, ivs in lanes.items() for state, s, e, attrs in ivs]
        spans.append((ident, "host:1", Span("train_step", (t0 + 10 * i) * S,
                                            (t0 + 10 * (i + 1)) * S, "trainer",
                                            (("step", i + 1),))))
    assert client.post("/v1/traces", content=encode(spans),
                       headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    assert client.post("/api/v1/experiments/finish",
                       json={"project": "p", "experiment_name": "kernels"}).status_code == 200
    rows = client.get("/api/v1/anatomy", params={"project": "p",
                                                 "experiment_name": "kernels"}).json()["steps"]
    assert [r["gpu_longest"]["rank"] for r in rows] == ["0", "0", "2"]  # ties: the lowest
    assert rows[2]["gpu_median"]["busy_s"] == 3.0
    assert rows[2]["experts"]["actor_update"]["top"]["expert"] == 3
    metrics = client.get("/metrics").text
    base = 'experiment_name="kernels",project="p"'
    assert f'rl_insight_step_rank_gpu_busy_seconds{{{base},rank="2"}} 4.5' in metrics
    assert f'rl_insight_step_rank_gpu_idle_seconds{{{base},rank="median"}} 2.0' in metrics
    assert f'rl_insight_step_gpu_longest_rank{{{base}}} 2.0' in metrics
    assert ('rl_insight_step_expert_tokens{experiment_name="kernels",expert="3",layer="1",'
            'phase="actor_update",project="p"} 28.0') in metrics
    assert 'rl_insight_step_expert_top_share{' in metrics
    got = client.get("/api/v1/anatomy/explain", params={
        "project": "p", "experiment_name": "kernels", "step": 3}).json()
    text = explain.render(got)
    assert "rank 2's kernels ran longest, 4.50 s (+1.50 s on the median rank)" in text
    assert "60% of it under computation" in text
    assert "layer 1's expert 3 took 70.0% of its layer's tokens" in text


def test_the_dashboard_s_kernel_panels_query_series_the_server_exports():
    import json
    import re

    from dashboards import panels
    from rl_insight.common.resources import dashboards_dir
    from rl_insight.server.analyses.anatomy_series import Families

    asked = {m for p in panels.KERNELS for q in p.queries
             for m in re.findall(r"rl_insight_step_(\w+)\{", q.expr)}
    assert asked >= {"rank_gpu_busy_seconds", "rank_gpu_idle_seconds", "rank_gpu_comm_seconds",
                     "rank_gpu_overlap_seconds", "gpu_longest_rank", "expert_tokens",
                     "expert_top_share"}
    assert asked <= set(Families.DOCS) | {"number"}
    built = json.loads((dashboards_dir() / "rl-insight-step-anatomy.json").read_text())
    titles = {p["title"]: p for p in built["panels"]}
    for p in panels.KERNELS:  # in the built Step anatomy dashboard, quiet until an import
        assert titles[p.title]["fieldConfig"]["defaults"]["noValue"].startswith("no ")
