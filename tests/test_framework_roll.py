"""ROLL's agentic pipeline (issue 59, 4): alibaba/ROLL 8eb27cc2
roll/pipeline/agentic/agentic_pipeline.py ``AgenticPipeline.run()`` replayed in its order
(tests/frameworks/roll_agentic_run.py), through the adapter (``track_with: rl_insight``,
ROLL's ``create_tracker`` a FAKE stand-in) and, with its tracing on, through its spans as its
collector writes them (the real OpenTelemetry SDK), to the server's rows.

Its ``time/step_total`` is the step's own (unlike RLVR's, the step before's); its newer
timers (``time/step_shrink``, ``time/step_cal_response_level_mask``,
``time/step_compute_data_metrics``, ``time/step_log``, ``time/get_batch_cost_train`` inside
the rollout's) and spans (``shrink_sampler``, ``cal_response_level_mask``,
``cal_response_norm_rewards``, ``compute_data_metrics``, ``log``) are parts of its step.
"""

from __future__ import annotations

import sys

import pytest

from rl_insight import frameworks
from rl_insight.anatomy import explain
from rl_insight.frameworks import phases, table
from rl_insight.integrations.tracefiles import Follower, Run
from rl_insight.server.ingest import intake
from tests.frameworks import roll_agentic_run as agentic
from tests.frameworks.roll_run import STAND_INS, provider
from tests.test_enclosed_parts import PROTOBUF, rows_of, spans, state  # noqa: F401

ROLL = frameworks.named("roll")
STEPS, SLOW, SLOWER_BY = 6, 4, 2.0
UNTIMED_S = sum(s for name, key, s in agentic.STEP if key is None)


def _tracker():
    """The tracker as ROLL's driver makes it: ``create_tracker(track_with, config,
    **tracker_kwargs)`` once ``rl_insight.integrations.roll`` registered itself."""
    sys.path.insert(0, str(STAND_INS))
    try:
        from roll.utils.tracking import create_tracker

        import rl_insight.integrations.roll as adapter
        adapter.register()
    finally:
        sys.path.remove(str(STAND_INS))
    config = {"exp_name": "agentic", "track_with": "rl_insight",
              "tracker_kwargs": {"project": "p", "experiment_name": "e"}}
    return create_tracker(config["track_with"], config, **config["tracker_kwargs"])


def _check_parts(row: dict, truth: dict, transfer_in_rollout: bool) -> None:
    """A row's parts as the step's timers measured them; the batch's transfer is a part of
    its own where ROLL times it (its timing keys), the rollout's where only spans tell."""
    transfer = truth[agentic.TRANSFER]
    rollout = truth[agentic.ROLLOUT] - (0 if transfer_in_rollout else transfer)
    assert row["generate_s"] == pytest.approx(rollout, abs=1e-6), row
    assert row["weight_update_s"] == pytest.approx(truth["time/step_model_update"]), row
    want = {phases.OFFLOAD: truth["time/step_shrink"],
            phases.DATA: truth["time/step_cal_response_level_mask"] +
            truth["time/step_compute_data_metrics"] + (0 if transfer_in_rollout else transfer),
            phases.REWARD: truth["time/step_cal_norm_rewards"] +
            truth["time/step_cal_token_reward"],
            "logging": truth["time/step_log"],
            phases.ADVANTAGES: truth["time/step_adv"],
            phases.ACTOR_UPDATE: truth["time/step_train"]}
    for part, seconds in want.items():
        assert row["phases"].get(part) == pytest.approx(seconds, abs=1e-6), (part, row)


def test_an_agentic_step_is_its_own_step_total_and_each_timer_a_part(state, spans):  # noqa: F811
    """Through the tracker (ROLL's tracing off): the row's time is the step's own
    ``time/step_total``, every timer a part (the batch's transfer out of the rollout's
    time, which holds it), what ROLL does not time ``other``; a slow transfer is named
    first, as the data it is, not as generation."""
    truth = list(agentic.replay(_tracker(), None, STEPS, SLOW, SLOWER_BY))
    rows = rows_of(state, spans)
    assert [r["step"] for r in rows] == list(range(STEPS - 1)), rows  # the last: no later
    for row in rows:
        t = truth[row["step"]]
        assert row["source"] == "timing_keys" and row["framework"] == "roll", row
        assert row["duration_s"] == pytest.approx(t["time/step_total"]), row
        _check_parts(row, t, transfer_in_rollout=False)
        assert row["other_s"] == pytest.approx(UNTIMED_S, abs=1e-6), row
        assert row["overlap_s"] == 0.0, row
        assert sum(explain.parts(row).values()) == pytest.approx(row["duration_s"]), row
    first = explain.explain(rows, SLOW)["contributions"][0]
    assert first["part"] == f"phase:{phases.DATA}", first
    assert first["over_s"] == pytest.approx(SLOWER_BY, abs=1e-6), first


def test_rlvrs_step_total_is_the_step_befores_and_no_step_time():
    """RLVR logs the step before's time as its time/step_total (rlvr_pipeline.py l.476-496,
    l.842 at 8eb27cc2): its dicts, told by their time/step_generate, have no step time (the
    row's window is the step); the agentic pipeline's has."""
    rlvr = {"time/step_total": 31.0, "time/step_generate": 12.0, "time/step_train": 9.0}
    assert table.parts(ROLL, table.timing_values(ROLL, rlvr.items())).step_s is None
    mine = {"time/step_total": 14.0, "time/step_rollout": 6.0, "time/step_train": 3.0}
    assert table.parts(ROLL, table.timing_values(ROLL, mine.items())).step_s == 14.0


def test_an_agentic_steps_spans_are_its_driver_lanes_phases(state, tmp_path):  # noqa: F811
    """With ROLL's tracing on: its driver's spans, as its collector writes them, read as
    the tracker's follower reads them while the run goes on: every one mapped, the step
    from ``pipeline_step``, each block a phase of the driver's lane (the batch's transfer,
    which has no span, in the rollout's)."""
    path = tmp_path / "output" / "otlp" / "traces" / "traces.jsonl"
    driver = provider("driver", path).get_tracer("driver")
    follower = Follower(str(path.parent / "traces*.jsonl"), Run(ROLL, "p", "e"),
                        lambda body: bool(intake.accept_spans(state, body, PROTOBUF, "")))
    clock, truth = agentic.Clock(), []
    for measured in agentic.replay(None, driver, STEPS, SLOW, SLOWER_BY, clock):
        truth.append(measured)
        follower.poll()  # as the tracker's follower reads the file while the run goes on
        state.anatomy.update(clock.ns / 1e9)
    counted = state.metrics.framework_spans
    assert counted.labels("roll", "unmatched")._value.get() == 0
    assert counted.labels("roll", "mapped")._value.get() == follower.spans_sent == \
        STEPS * (1 + sum(1 for name, _, _ in agentic.STEP if name))
    state.anatomy.update(clock.ns / 1e9 + 3600)
    rows = {r.step: r.as_dict() for r in state.anatomy.rows("p", "e")}
    assert sorted(rows) == list(range(STEPS)), sorted(rows)
    for step, row in rows.items():
        assert row["source"] != "timing_keys", row
        assert row["duration_s"] == pytest.approx(truth[step]["time/step_total"]), row
        _check_parts(row, truth[step], transfer_in_rollout=True)
