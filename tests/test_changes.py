"""What changed, without a server: the regression rule and the ranking of what moved,
on runs of the simulation's own noise and drift model computed in virtual time
(examples/drifts.py), and on rows made by hand for the rule's edges; the server's
ChangeStore fed rows as the anatomy makes them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rl_insight.anatomy import association, changes
from rl_insight.config import ChangesSettings
from rl_insight.server.analyses.changes import EMPTY_TRIES, EMPTY_WAIT_S

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import drifts  # noqa: E402

from bench import changes as bench  # noqa: E402

SEEDS = 10


def row(step: int, duration: float, generate: float | None = None, **extra) -> dict:
    gen = duration * 0.5 if generate is None else generate
    return {"step": step, "duration_s": duration, "other_s": duration - gen - 1.0,
            "roles": {"rollout": {"generate_s": gen}},
            "phases": {"actor_update": 1.0}, **extra}


def steady(n: int, seed: int = 0, level: float = 10.0, noise: float = 0.01) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [row(s, level * (1 + rng.gauss(0, noise))) for s in range(1, n + 1)]


@pytest.mark.parametrize("spec", bench.SCENARIOS)
def test_each_injected_drift_is_found_within_five_steps_with_its_cause_first(spec):
    """Over ten runs each: found after its onset, none before it; within five steps (a
    creep of 1 % a step through 1 % noise: in 8 of 10 at least, all within 6, as the
    bench's 200 runs measured); the injected cause ranked first in every run."""
    got = bench.scenario(spec, SEEDS)
    assert got["false_alarms_before_onset"] == 0, got
    assert got["delay_max"] <= 6, got
    assert got["within_5"] >= (0.8 if spec.startswith("response-length") else 1.0), got
    assert got["cause_first"] == 1.0, got
    # a step change's onset within one step, a creep's within two; a creep of 1 % a step
    # through 1 % noise shows its first steps no better than noise: within five
    assert got["onset_error_max"] <= {"throttle": 1, "response-length": 5}.get(
        spec.partition(":")[0], 2), got
    # a shrinking KV cache slows its replica over three steps, then holds at its floor:
    # told as either
    assert got["kind"] in {"throttle": ("shift",), "kv-shrink": ("shift", "ramp")}.get(
        spec.partition(":")[0], ("ramp",)), got


@pytest.mark.parametrize("spec, kind, within", [("response-length:30:0.04", "ramp", 2),
                                                 ("response-length:30:0.02", "ramp", 2),
                                                 ("rank-slow:1:30:1.5", "shift", 1),
                                                 ("throttle:0:35", "shift", 1)])
def test_a_change_is_told_as_the_kind_it_is_from_the_step_it_began(spec, kind, within):
    """Issue 49: a rank half again as slow from step 30 was told as a creep 6 steps
    early, responses growing 4 % a step as a change 5 steps before they grew. Over 20
    runs each: the kind right in every run, the onset within one step (a shift) or two (a
    creep) of the first step the drift made slower."""
    drift = drifts.parse(spec)
    for seed in range(20):
        run = drifts.virtual_run(60, [drift], seed=seed)
        truth = run.onsets[drift.kind]
        hit = next(c for c in bench.analyze(run) if c.detected_step >= truth)
        assert (hit.kind, abs(hit.onset_step - truth) <= within) == (kind, True), \
            (seed, hit.as_dict())


def _change_in(run: drifts.VirtualRun, part: str, truth: int) -> changes.Change:
    """The change found at or after ``truth`` that holds ``part`` (the drift's own: at 5 %
    noise a part may move on its own beside it)."""
    return next(c for c in changes.analyze(run.rows).report()
                if c.detected_step >= truth and part in {r.signal for r in c.regressions})


def test_a_creep_through_five_percent_noise_is_dated_from_where_it_began_never_before():
    """Issue 56: responses growing 4 % a step from step 22 under 5 % noise (every part of
    every step) were dated from step 17 (the first regression from 14, the first step
    tested: a baseline of 10 steps whose median sat low) and found at 25. Over 20 runs:
    within two steps of 22 in 18 (200 runs: 174 of 198, was 156; docs/anatomy.md); never
    more than two steps early (200 runs: none, was 13), nor its alert's label, unless
    said unclear with 22 in its range; at most 5 late, where the creep's first steps
    were within the noise and nothing in the values says otherwise."""
    drift = drifts.parse("response-length:22:0.04")
    within = 0
    for seed in range(20):
        run = drifts.virtual_run(60, [drift], seed=seed, sigma=0.05)
        got = _change_in(run, "generate:rollout", 22).as_dict()
        err = got["onset_step"] - 22
        low, high = got.get("onset_range") or (got["onset_step"],) * 2
        said = got.get("onset_unclear") is not None and low <= 22 <= high
        within += abs(err) <= 2
        assert (err >= -2 and got["first_onset_step"] >= 20) or said, (seed, got)
        assert err <= 5, (seed, got)
    assert within >= 18, within


def test_a_change_is_dated_by_the_series_that_shows_it_most_clearly():
    """The weight sync 10 % longer a step through 5 % noise: two of its own spreads a
    step, a tenth of one in the step time. Dated by the step time it was found from (as
    before issue 56), within two steps in 4 of these 20 runs (the bench's 200: 47.5 %);
    by its own series, in 19 (200: 99.5 %)."""
    drift = drifts.parse("weight-sync:30")
    found = [_change_in(drifts.virtual_run(60, [drift], seed=seed, sigma=0.05),
                        "phase:update_weights", 30) for seed in range(20)]
    assert sum(abs(c.onset_step - 30) <= 2 for c in found) >= 19, \
        [c.onset_step for c in found]
    assert {c.dated_by.signal for c in found} == {"phase:update_weights"}


def test_an_onset_the_values_cannot_date_is_said_unclear_with_where_it_may_be():
    """A fit tells the onsets that fit about as well; a creep of a third of a spread a
    step is unclear over most of its window, a step change of six spreads is not; two
    series of one change that date it apart make it unclear, both named."""
    noise = [0.4, -0.6, 0.2, -0.3, 0.5, -0.4, 0.1, -0.2, 0.3, -0.5, 0.6, -0.1]
    base = [0.3, -0.2, 0.1, -0.4, 0.5, -0.3, 0.2, 0.0, -0.1, 0.4]

    def points(after):
        return [(s, noise[s - 14] + (after(s - 21) if s >= 22 else 0.0))
                for s in range(14, 26)]
    step = changes.fit_onset(points(lambda k: 6.0), base)
    assert (step.onset, step.kind, step.low, step.high) == (22, "shift", 22, 22)
    creep = changes.fit_onset(points(lambda k: 1.0 * k), base)
    assert (creep.kind, creep.low <= 22 <= creep.high) == ("ramp", True), creep
    assert abs(creep.onset - 22) <= 2 and creep.high - creep.low <= 4, creep
    faint = changes.fit_onset(points(lambda k: 0.3 * k), base)
    assert faint.low <= 22 <= faint.high and faint.high - faint.low > 4, faint
    # a short baseline whose median sat a spread low: the steps before the creep are a
    # level of their own, not a change from the first one tested
    offset = changes.fit_onset([(s, y + 1.2) for s, y in points(lambda k: 1.0 * k)], base)
    assert offset.onset >= 20 or offset.high - offset.low > 4, offset

    def reg(signal, onset, span, size):
        return changes.Regression(signal, 1, onset, 33, 10.0, 0.1, size=size, kind="ramp",
                                  onset_low=span[0], onset_high=span[1],
                                  found_onset=onset)
    apart = changes.Change([reg("step_time", 30, (28, 32), 2.0),
                            reg("generate:rollout", 24, (22, 26), 4.0)])
    assert (apart.onset_step, apart.onset_range) == (24, [22, 32])
    why = apart.onset_unclear()
    assert "generate:rollout" in why and "step_time" in why, why
    d = apart.as_dict()
    text = changes.render({"project": "p", "experiment_name": "e", "steps": 40,
                           "source": "live", "changes": [d]})
    assert "its onset is unclear, somewhere in steps 22-32" in text, text
    agree = changes.Change([reg("step_time", 30, (29, 31), 2.0),
                            reg("generate:rollout", 31, (30, 32), 4.0)])
    assert agree.onset_unclear() is None and agree.onset_step == 31


def test_a_steady_300_step_run_with_the_same_noise_raises_nothing():
    for seed in range(SEEDS):
        run = drifts.virtual_run(300, [], seed=seed)
        found = changes.analyze(run.rows).report()
        assert found == [], (seed, [c.as_dict() for c in found])


def test_the_change_says_where_it_lives_and_the_one_replica_or_node():
    kv = drifts.virtual_run(60, [drifts.parse("kv-shrink:2:30")], seed=3)
    found = bench.analyze(kv)
    assert len(found) == 1
    c = found[0].as_dict()
    assert c["signal"] == "step_time" and c["open"]
    assert c["parts"][0]["part"] == "generate:rollout" and c["parts"][0]["share"] > 0.8
    assert c["scope"] == {"replica": "2"}
    hot = drifts.virtual_run(60, [drifts.parse("throttle:0:40")], seed=3)
    c = bench.analyze(hot)[0].as_dict()
    assert c["scope"] == {"node": "node-0"}
    assert c["candidates"][0]["kind"] == "hardware"
    sync = drifts.virtual_run(60, [drifts.parse("weight-sync:30")], seed=3)
    c = bench.analyze(sync)[0].as_dict()
    assert c["parts"][0]["part"] == "phase:update_weights" and c["scope"] is None
    first = c["candidates"][0]
    assert first["name"] == "weight_sync" and first["direction"] == "up"
    assert first["before"] < first["after"] and first["accounts_for"] > 0.5


def test_one_slow_step_is_no_change_and_three_in_a_row_are():
    rows = steady(40)
    rows[25]["duration_s"] *= 2.0  # a checkpoint save
    assert changes.analyze(rows).report() == []
    for s in (25, 26, 27):
        rows[s]["duration_s"] = 20.0
    found = changes.analyze(rows).report()
    assert [(c.onset_step, c.detected_step) for c in found] == [(26, 28)]


def test_a_change_recovers_and_a_lasting_one_becomes_the_new_level():
    rows = steady(80, seed=1)
    for r in rows[30:40]:
        r["duration_s"] *= 1.3
    found = changes.analyze(rows).report()
    assert len(found) == 1
    c = found[0].as_dict()
    # back at step 41; a step of noise a spread above the baseline may put it one later
    assert (c["onset_step"], c["end"]) == (31, "recovered") and 41 <= c["end_step"] <= 43
    rows = steady(140, seed=2)
    for r in rows[30:]:
        r["duration_s"] *= 1.3
    rule = ChangesSettings(accept_after=50)
    found = changes.analyze(rows, rule).report()
    assert [(c.onset_step, c.open, c.headline.end) for c in found] == [(31, False, "new_level")]


def test_a_part_that_moved_on_its_own_is_a_change_apart_from_a_later_slowdown():
    """The drifting run on a busy host (tests/test_changes_e2e.py): the driver's own time
    up from step 16 (1.5 % of the step: a part's change, not the step's), its generation
    a third slower from step 26. Two changes: the slowdown's onset, the step it was found
    at and its alert's key are its own, not the earlier part's."""
    import random

    rng = random.Random(5)
    rows = []
    for s in range(1, 45):
        gen = 6.0 * (1 + rng.gauss(0, 0.01)) * (1.3 if s >= 26 else 1.0)
        other = 1.0 * (1 + rng.gauss(0, 0.01)) + (0.15 if 16 <= s <= 32 else 0.0)
        rows.append({"step": s, "duration_s": gen + other + 3.0, "other_s": other,
                     "roles": {"rollout": {"generate_s": gen}},
                     "phases": {"actor_update": 3.0}})
    found = [c.as_dict() for c in changes.analyze(rows).report()]
    assert [(c["signal"], c["first_onset_step"]) for c in found] == \
        [("other", 16), ("step_time", 26)], found
    slow = found[1]
    assert slow["detected_step"] >= 26 and slow["id"].endswith("@26"), slow
    assert {s["signal"] for s in slow["signals"]} == {"step_time", "generate:rollout"}
    assert slow["parts"][0]["part"] == "generate:rollout"


def test_a_part_that_held_a_change_stays_in_it_once_it_is_its_own_new_level():
    """The generation 2 s longer from step 20 (the driver's own time 2 s shorter: the
    step time steady), then 2 s more from step 30, the step time's change: the
    generation's regression becomes its own new level at step 69 while the step time's is
    open; measured from its new baseline it holds nothing, yet it held the change: it
    stays in it. (Before issue 56 a virtual run's generation dated 9 steps early, from
    step 21 for responses growing from 30, made this case; its onset is now 31.)"""
    import random

    rng = random.Random(7)
    rows = []
    for s in range(1, 76):
        gen = 5.0 + (2.0 if s >= 20 else 0.0) + (2.0 if s >= 30 else 0.0)
        other = 4.0 - (2.0 if s >= 20 else 0.0)
        r = row(s, (gen + other + 1.0) * (1 + rng.gauss(0, 0.005)), gen)
        r["other_s"] = other
        rows.append(r)
    (c,) = [c for c in changes.analyze(rows).report()
            if c.headline.signal == changes.STEP_TIME]
    assert {r.signal: r.end for r in c.regressions} == \
        {"step_time": None, "generate:rollout": "new_level"}


def test_too_small_a_change_is_none_however_sure():
    rows = steady(60, noise=0.001)
    for r in rows[30:]:
        r["duration_s"] *= 1.01  # 10 spreads, but 1 % of the step: not reported
    assert changes.analyze(rows).report() == []


def test_throughput_is_a_change_when_it_drops():
    rows = steady(60, seed=4)
    for r in rows:
        r["tokens_per_gpu_second"] = 300.0 * (0.8 if r["step"] > 35 else 1.0)
    found = changes.analyze(rows).report()
    assert [c.headline.signal for c in found] == [changes.THROUGHPUT]
    assert found[0].as_dict()["unit"] == "tokens/GPU-s"


def test_symptoms_rank_after_causes_and_the_trainers_scalar_before_the_engines_view():
    run = drifts.virtual_run(60, [drifts.parse("response-length:30")], seed=5)
    found = bench.analyze(run)
    ranked = found[0].candidates
    assert ranked[0]["name"] == "response_length/mean"
    roles = [c["role"] for c in ranked]
    assert roles == sorted(roles, key=lambda r: r != association.CAUSE)
    restating = association.Candidate("timing_s/gen", "scalar", {}, {},
                                      association.scalar_role("timing_s/gen"))
    assert restating.role == association.SYMPTOM


def test_the_report_reads_as_lines():
    run = drifts.virtual_run(60, [drifts.parse("kv-shrink:1:30")], seed=1)
    found = bench.analyze(run)
    text = changes.render({"project": "p", "experiment_name": "e", "source": "live",
                           "steps": 60, "changes": [c.as_dict() for c in found]})
    assert "1. step_time +" in text and "only on replica 1" in text
    assert "what moved with it:" in text and "[replica=1]" in text
    none = changes.render({"project": "p", "experiment_name": "e", "source": "live",
                           "steps": 9, "changes": []})
    assert "nothing" in none


def test_the_store_follows_rows_as_made_and_again_when_one_is_made_again():
    """Rows made again (a late lane) are analysed again from the anatomy's rows; a run
    the anatomy dropped is forgotten."""
    from rl_insight.anatomy.rows import RoleRow, StepRow
    from rl_insight.server.analyses.changes import ChangeStore

    run = drifts.virtual_run(50, [drifts.parse("kv-shrink:0:30")], seed=2)

    def as_row(d: dict) -> StepRow:
        return StepRow(step=d["step"], start_ns=int(d["step"] * 60e9),
                       end_ns=int((d["step"] + 1) * 60e9), duration_s=d["duration_s"],
                       generate_s=d["generate_s"], other_s=d["other_s"],
                       phases=d["phases"],
                       roles={"rollout": RoleRow(d["generate_s"], 4)})
    made = [as_row(d) for d in run.rows]
    held = list(made)
    clock = [1e9]
    store = ChangeStore(ChangesSettings(), lambda p, e: held, prom=None,
                        clock=lambda: clock[0])
    for r in made:
        store.observe(("p", "e"), [r])
    live = store.report("p", "e")
    # the first preempting step is 2.5 % slower (two spreads): the ramp's fit may start
    # at the step after it, within the two steps a creep's onset is held to
    onset = live["changes"][0]["onset_step"]
    assert [c["onset_step"] for c in live["changes"]] == [onset] and 32 <= onset <= 33
    held[20] = as_row({**run.rows[20], "duration_s": run.rows[20]["duration_s"] * 5})
    store.observe(("p", "e"), [held[20]])  # made again: analysed again from the rows
    assert store.report("p", "e")["changes"][0]["onset_step"] == onset
    families = {f.name: f for f in store.collect()}
    assert families["rl_insight_step_regression_seconds"].samples == []  # not ranked yet
    assert store.rank_due() == 1
    # nothing here moves with it (no Prometheus), and no step comes after the last: each
    # pass ranks it again, and its series waits, for EMPTY_WAIT_S (a stalled run)
    for _ in range(EMPTY_TRIES + 1):
        assert {f.name: f for f in store.collect()}[
            "rl_insight_step_regression_seconds"].samples == []
        assert store.rank_due() == 1
    clock[0] += EMPTY_WAIT_S
    assert store.rank_due() == 0  # said: no more passes for it until rank_every_steps
    families = {f.name: f for f in store.collect()}
    (sample,) = families["rl_insight_step_regression_seconds"].samples
    first = store.report("p", "e")["changes"][0]["first_onset_step"]
    assert sample.labels["onset_step"] == str(first) and sample.value > 0
    store.forget(lambda key: False)
    assert store.report("p", "e") is None


def test_a_change_on_one_rank_names_it_in_its_scope_the_alerts_series_and_the_report():
    """Issue 49: a rank half again as slow from step 30 (its phase ends with the others'
    at each all-reduce) is the change's scope, the regression series' `rank` label (the
    StepTimeRegressed alert keeps it) and a line of `report --changes` that says why."""
    from rl_insight.anatomy.rows import RoleRow, StepRow
    from rl_insight.server.analyses.changes import ChangeStore

    run = drifts.virtual_run(45, [drifts.parse("rank-slow:1:30")], seed=5)
    rows = []
    for d in run.rows:
        rows.append(StepRow(
            step=d["step"], start_ns=int(d["step"] * 60e9), end_ns=int((d["step"] + 1) * 60e9),
            duration_s=d["duration_s"], generate_s=d["generate_s"], other_s=d["other_s"],
            phases=d["phases"], roles={"rollout": RoleRow(d["generate_s"], 4)},
            ranks=d["ranks"], rank_median=d["rank_median"], rank_count=d["rank_count"],
            culprit=d["culprit"], rank_evidence=d["rank_evidence"]))
    store = ChangeStore(ChangesSettings(), lambda p, e: rows, prom=None)
    last = len(rows) - EMPTY_TRIES + 1
    for r in rows[:last]:
        store.observe(("p", "e"), [r])
    assert store.rank_due() == 1
    # no candidate moves here (no Prometheus): ranked again as each step comes, its
    # series goes out once tried at EMPTY_TRIES steps
    for r in rows[last:]:
        assert not {f.name: f for f in store.collect()}[
            "rl_insight_step_regression_seconds"].samples
        store.observe(("p", "e"), [r])
        assert store.rank_due() == 1
    (sample,) = {f.name: f for f in store.collect()}[
        "rl_insight_step_regression_seconds"].samples
    assert sample.labels["rank"] == "1", sample.labels
    assert sample.labels["scope"] == "rank 1 (actor, node node-0, GPU 1)", sample.labels
    report = store.report("p", "e")
    (change,) = report["changes"]
    assert (change["onset_step"], change["kind"]) == (30, "shift"), change
    text = changes.render(report)
    assert "only on rank 1 (actor, node node-0, GPU 1)" in text
    assert "why: it computed" in text and "longer in actor_update while the other 3 ranks" \
        in text, text
