"""Run against run, in plain data (rl_insight/anatomy/compare.py): the significance test
against two runs that differ only in their seed (the false-difference rate over 20 seed
pairs) and against a known difference, the parts that account for a difference adding
up to it, what moved with it through the what-changed association, alignment by samples.
Runs are the simulation's own model in virtual time (examples/drifts.py); the end-to-end
pairs on the Ray cluster are tests/test_compare_e2e.py."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from rl_insight.anatomy import association, compare
from rl_insight.anatomy import bound as b

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import drifts  # noqa: E402

from tests.test_anatomy import server  # noqa: F401, E402  (in-process, over real OTLP)

STEPS = 100


def with_path(rows: list[dict]) -> list[dict]:
    """A virtual run's rows with their path (a synchronous step: the rollout alone, its
    tail after half its replicas finished, the phases, the weight sync, the rest)."""
    out = []
    for r in rows:
        gens = sorted(v["generate_s"] for v in r["replicas"].values())
        half = gens[(len(gens) - 1) // 2]
        path = dict.fromkeys(b.PATH, 0.0)
        path[b.ROLLOUT] = half
        path[b.TAIL] = r["generate_s"] - half
        path[b.TRAINING] = sum(r["phases"].values()) - r["phases"]["update_weights"]
        path[b.SYNC] = r["phases"]["update_weights"]
        path[b.OTHER] = r["other_s"]
        out.append({**r, "bound": {"path": path, "roles": {}, "inputs": None}})
    return out


def run(seed: int, *drift: str) -> drifts.VirtualRun:
    return drifts.virtual_run(STEPS, [drifts.parse(d) for d in drift], seed=seed)


def candidates(v: drifts.VirtualRun) -> list[association.Candidate]:
    return [association.Candidate(k, "scalar", dict(vals)) for k, vals in v.scalars.items()]


def test_two_runs_differing_only_in_their_seed_are_not_called_different():
    """20 pairs of 100 steps, 1 % noise and a doubled driver step one in 50: the
    false-difference rate, written down in docs/anatomy.md."""
    called = []
    for k in range(20):
        a, bb = run(1000 + 2 * k), run(1001 + 2 * k)
        got = compare.step_time(a.rows, bb.rows)
        called.append(got["significant"])
        assert got["a"] and got["b"] and abs(got["diff_pct"]) < 2, got
    print(f"seed pairs called different: {sum(called)} of {len(called)}")
    assert sum(called) <= 1, called


def test_a_node_throttled_from_the_first_step_is_a_significant_rollout_difference():
    a = with_path(run(7).rows)
    slow = run(8, "throttle:1:1")  # node 1's GPUs 1,980 -> 1,500 MHz: its replicas slower
    got = compare.compare(a, with_path(slow.rows), candidates(run(7)), candidates(slow))
    st = got["step_time"]
    assert got["significant"] and st["diff_s"] > 0, got["why"]
    parts = [d for d in got["differences"] if d["type"] == "part"]
    # the parts add up to the mean step's difference
    assert sum(d["diff_s"] for d in parts) == pytest.approx(st["diff_mean_s"], rel=1e-6)
    assert sum(d["share"] for d in parts) == pytest.approx(1.0, rel=1e-6)
    assert parts[0]["part"] in (b.ROLLOUT, b.TAIL), parts
    detail = {d["part"] for p in parts[:2] for d in p["detail"]}
    assert detail & {"replica:2", "replica:3", "generate:rollout"}, parts[:2]
    assert "no significant" not in got["why"]


def test_longer_responses_rank_the_response_length_first_of_what_moved():
    a = run(11)
    longer = run(12, "response-length:1:0.0")  # the factor from step 1 on, no creep
    for r in longer.rows:  # responses 15 % longer: generation with them
        r["generate_s"] *= 1.15
        r["duration_s"] += 0.15 * (r["generate_s"] / 1.15)
        for v in r["replicas"].values():
            v["generate_s"] *= 1.15
    for step in longer.scalars["response_length/mean"]:
        longer.scalars["response_length/mean"][step] *= 1.15
    got = compare.compare(with_path(a.rows), with_path(longer.rows), candidates(a),
                          candidates(longer))
    went = [d for d in got["differences"] if d["type"] == "moved"]
    assert got["significant"] and went, got["why"]
    assert went[0]["name"] == "response_length/mean" and went[0]["direction"] == "up", went


def test_too_few_steps_or_nothing_to_compare_say_so():
    a = run(3).rows[:3]
    got = compare.step_time(a, run(4).rows[:3])
    assert got["significant"] is None and "too few" in got["why"]
    empty = compare.step_time([], a)
    assert empty["significant"] is None and "no final step" in empty["why"]


def test_runs_of_different_batches_align_by_samples_consumed():
    a = [{"step": i, "duration_s": 1.0, "requests": {"rollout": {"requests": 64}}}
         for i in range(1, 11)]
    big = [{"step": i, "duration_s": 1.5, "requests": {"rollout": {"requests": 128}}}
           for i in range(1, 11)]
    wa, wb, guessed = compare.align_by_samples(a, big)
    assert len(wa) == 10 and len(wb) == 5 and guessed == 0  # 640 samples each
    side = compare.side_by_side(wa, wb)
    assert side["a"]["samples_per_s"] == pytest.approx(64.0)
    assert side["b"]["samples_per_s"] == pytest.approx(128 / 1.5)
    assert compare.align_by_samples(a, [{"step": 1, "duration_s": 1.0}]) is None
    # a step whose requests were not traced (a loaded host: a fresh clone of 2026-12-07
    # fell back to steps for one) counts as its run's median; most steps must say theirs
    big[2] = {"step": 3, "duration_s": 1.5}
    wa, wb, guessed = compare.align_by_samples(a, big)
    assert len(wa) == 10 and [r["step"] for r in wb] == [1, 2, 3, 4, 5] and guessed == 1
    mostly_silent = [{"step": i, "duration_s": 1.5} for i in range(1, 11)]
    mostly_silent[0] = big[0]
    assert compare.align_by_samples(a, mostly_silent) is None


def test_the_mann_whitney_test_against_its_exact_cases():
    # every value of B above every value of A: U of A is 0; p small with 8 + 8
    u, p = compare.mann_whitney([1, 2, 3, 4, 5, 6, 7, 8], [11, 12, 13, 14, 15, 16, 17, 18])
    assert u == 0 and p < 0.001
    u, p = compare.mann_whitney([1, 2, 3, 4], [1, 2, 3, 4])
    assert u == 8 and p == pytest.approx(1.0)
    _, p = compare.mann_whitney([5.0] * 6, [5.0] * 6)  # all tied: nothing to tell
    assert p == 1.0
    same = [statistics.NormalDist(10, 1).inv_cdf((i + 0.5) / 50) for i in range(50)]
    assert compare.mann_whitney(same, [x + 0.01 for x in same])[1] > 0.5


def test_the_route_compares_two_runs_over_real_otlp_and_renders_them(server):  # noqa: F811
    import time

    from rl_insight.collector.otlp_encode import encode
    from rl_insight.wire.events import Identity, Span
    from tests.test_bound import S, sync_step

    c, _ = server
    t0 = int(time.time()) - 600
    spans = []
    for name, slow in (("a", 2.2), ("b", 3.9)):  # B's straggler: 1.7 s more of tail
        ident = Identity("p", name)
        for i in range(8):
            at = t0 + 7 * i + (0 if name == "a" else 100)
            # the straggler's extra time varies a little, as a real one's does
            for lane, ivs in sync_step(at, slow=slow + 0.05 * (i % 3)).items():
                spans += [(ident, "host:1", Span(st, s, e, lane, (), ends_state=True))
                          for st, s, e in ivs]
            spans.append((ident, "host:1", Span("train_step", at * S, (at + 7) * S,
                                                "trainer", (("step", i + 1),))))
    assert c.post("/v1/traces", content=encode(spans),
                  headers={"Content-Type": "application/x-protobuf"}).status_code == 200
    for name in ("a", "b"):
        c.post("/api/v1/experiments/finish", json={"project": "p", "experiment_name": name})
    no_config = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                                 "against": "b"}).json()
    assert no_config["config"] is None
    assert "configuration: not kept for both runs" in compare.render(no_config)
    for name, n in (("a", 4), ("b", 5)):  # what each run handed over (verl's rollout.n)
        assert c.post("/api/v1/experiments/config", json={
            "project": "p", "experiment_name": name,
            "values": {"actor_rollout_ref.rollout.n": n, "data.train_batch_size": 64}}
        ).status_code == 200
    got = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                           "against": "b"}).json()
    cfg = got["config"]
    assert cfg["differing"] == 1 and cfg["counts"]["same"] == 1
    assert cfg["keys"][0] == {"key": "actor_rollout_ref.rollout.n", "a": 4, "b": 5,
                              "status": "changed"}
    st = got["step_time"]
    assert st["a"] == st["b"] == 7.0 and st["diff_s"] == 0  # the same wall time a step...
    parts = {d["part"]: d for d in got["differences"] if d["type"] == "part"}
    # ... cut differently: the straggler's extra 1.7 s of tail came out of `other`
    assert parts["tail"]["diff_s"] == pytest.approx(1.7, abs=0.05)
    assert parts["other"]["diff_s"] == pytest.approx(-1.7, abs=0.05)
    assert got["runs"]["b"]["source"] == "live" and got["runs"]["a"]["steps"] == 8
    assert got["side_by_side"]["b"]["verdict"] == "tail-bound"
    gpus = got["side_by_side"]["b"]["gpus"]  # each role's GPUs' time by cause, as shares
    assert sum(gpus["rollout"].values()) == pytest.approx(1.0) and gpus["trainer"]["busy"] > 0
    text = compare.render(got)
    assert "run B p/b (steps 1-8) against run A p/a (steps 1-8)" in text
    assert "no significant difference" in text and "tail" in text
    assert "configuration: 1 key differs (1 the same)" in text
    assert "actor_rollout_ref.rollout.n: 4 -> 5" in text
    assert compare.to_csv(got).splitlines()[0].startswith("type,what,a,b")
    window = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                              "against": "b", "steps": "3:6"}).json()
    assert window["runs"]["a"]["steps"] == 4 and window["runs"]["b"]["first_step"] == 3
    missing = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                               "against": "nope"})
    assert missing.status_code == 404 and "p/nope" in missing.json()["error"]
    backwards = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                                 "against": "b", "steps": "6:3"}).json()
    assert backwards["runs"]["a"]["steps"] == 4  # B:A is the same window as A:B
    bad = c.get("/api/v1/compare", params={"project": "p", "experiment_name": "a",
                                           "against": "b", "align": "sideways"})
    assert bad.status_code == 400 and "align" in bad.text


def test_the_exact_p_is_the_share_of_arrangements_as_far_from_the_mean():
    """Small samples without ties: against counting every arrangement."""
    import itertools

    for n1, n2 in ((3, 4), (5, 5), (2, 7), (6, 3), (1, 1)):
        n, dist = n1 + n2, {}
        for pos in itertools.combinations(range(n), n1):
            others = [i for i in range(n) if i not in pos]
            u = sum(1 for x in pos for y in others if x > y)
            dist[u] = dist.get(u, 0) + 1
        mid = n1 * n2 / 2
        for u in range(n1 * n2 + 1):
            want = sum(c for k, c in dist.items() if abs(k - mid) >= abs(u - mid)) / \
                sum(dist.values())
            assert compare._exact_p(u, n1, n2) == pytest.approx(want), (n1, n2, u)
    # five steps each, all of B's slower: decided (2 of the 252 arrangements as far)
    assert compare.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])[1] == pytest.approx(2 / 252)
