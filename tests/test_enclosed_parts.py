"""A part that encloses another is not a second cause (issue 56, 0(b)): NeMo-RL's async
GRPO logs its refit bubble, a wait that holds the weight sync it waits on, beside the
weight sync itself. Its timing keys replayed as its ``async_grpo_train`` logs them, through
its logger and our adapter to the server's rows: the bubble counts only its own share, the
step's parts add up to the step, and a weight sync that grows is the one cause, in
``report --step N`` and in what changed. Each table's nesting is read from its source."""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

import pytest

import rl_insight
from rl_insight import config, frameworks
from rl_insight.anatomy import changes, explain
from rl_insight.collector.otlp_encode import encode
from rl_insight.frameworks import phases, table
from rl_insight.server.ingest import intake
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire.events import Identity, Span

STAND_INS = Path(__file__).resolve().parent / "frameworks" / "stand_ins"
PROTOBUF = "application/x-protobuf"
BUBBLE = "wait:timing/train/idle/refit_bubble"
SYNC = "phase:update_weights"
STEPS, GROWS_FROM = 30, 16  # the weight sync 12 % longer a step from this step


@pytest.fixture
def state(tmp_path):
    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})
    st = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    st.open()
    st.relay.stop()
    yield st
    st.close()


@pytest.fixture
def spans(monkeypatch):
    """The spans the adapter's tracker hands the client (its step marks and timing
    records), as the lane actors would send them on."""
    from rl_insight.client import api

    got: list[Span] = []

    def trace_span(*, name, start_time_ns, end_time_ns, attributes):
        got.append(Span(name, start_time_ns, end_time_ns, None, tuple(attributes.items())))
    for where in (rl_insight, api):
        monkeypatch.setattr(where, "enabled", lambda: True)
        monkeypatch.setattr(where, "init", lambda *a, **k: None)
        monkeypatch.setattr(where, "metric_gauge", lambda *a, **k: None)
        monkeypatch.setattr(where, "trace_span", trace_span)
    return got


class Timer:
    """NeMo-RL's Timer as async_grpo_train uses it (nemo_rl/utils/timer.py, 7ea279ab), on a
    virtual clock: ``time(label)`` blocks, ``start``/``stop``, each label's timings summed
    for the step (``get_timing_metrics(reduction_op="sum")``, grpo.py l.5286)."""

    def __init__(self) -> None:
        self.now, self.open, self.sums = 0.0, {}, {}

    def start(self, label: str) -> None:
        self.open[label] = self.now

    def stop(self, label: str) -> None:
        self.sums[label] = self.sums.get(label, 0.0) + self.now - self.open.pop(label)

    def work(self, seconds: float) -> None:
        self.now += seconds

    def time(self, label: str, seconds: float, inside=()) -> None:
        """A ``with timer.time(label)`` block that works ``seconds`` around ``inside``
        (blocks of its own, timed inside it)."""
        self.start(label)
        self.work(seconds)
        for args in inside:
            self.time(*args)
        self.stop(label)


def async_grpo_step(step: int, rng: random.Random) -> dict[str, float]:
    """One step of NeMo-RL's async GRPO (grpo.py async_grpo_train, 7ea279ab, a
    non-colocated engine, no checkpoint or validation this step): its timing dict as it
    logs it. The weight sync grows 12 % a step from GROWS_FROM; the refit bubble holds it
    and the wait for the generation in flight before it."""
    def n(seconds: float) -> float:
        return seconds * math.exp(rng.gauss(0.0, 0.02))

    timer = Timer()
    sync = 2.0 * 1.12 ** max(0, step - GROWS_FROM + 1)
    starving = step % 7 == 3  # the buffer short of groups: two 0.5-s polls (l.4618)
    timer.start("total_step_time")  # l.4523
    # sampling from the replay buffer (l.4528-4654), its starvation sleeps inside
    timer.time("exposed_generation", n(1.5), [("idle/buffer_starvation", 0.5)] * (
        2 if starving else 0))
    timer.time("reward_calculation", n(0.4))  # l.4683
    timer.time("data_processing", n(0.3), [("overlong_filter", 0.01),  # l.4710-4724
                                           ("mask_sample_filter", 0.01)])
    timer.time("logprob_inference_prep", n(0.2))  # l.4779
    timer.time("policy_and_reference_logprobs", n(2.0))  # l.4783
    timer.time("advantage_calculation", n(0.1))  # l.4832
    timer.time("training_prep", n(0.3))  # l.4888
    timer.time("policy_training", n(6.0))  # l.4893
    timer.start("idle/refit_bubble")  # l.4942
    timer.time("exposed_generation", n(0.4))  # l.4946: the generation in flight finishes
    timer.work(0.05)  # l.4952-4955: the generation's logger metrics
    timer.time("weight_sync", n(sync))  # l.4959-4974
    timer.stop("idle/refit_bubble")  # l.4976
    timer.work(n(0.2))  # logging, buffer statistics: the step's own, no timer
    timer.stop("total_step_time")
    metrics = dict(timer.sums)
    metrics["valid_tokens_per_sec_per_gpu"] = 812.0  # l.5346
    return metrics


def replay(spans: list[Span]) -> None:
    """The logger's calls of each step, in async_grpo_train's order (l.5393-5403):
    performance, train, the efficiency summary, then timing/train with step_finished."""
    sys.path.insert(0, str(STAND_INS))
    try:
        from nemo_rl.utils.logger import Logger
    finally:
        sys.path.remove(str(STAND_INS))
    import rl_insight.integrations.nemo_rl as rl_nemo

    logger = Logger({})
    rl_nemo.attach(logger, {"logger": {"wandb": {"project": "p", "name": "e"}}})
    rng = random.Random(56)
    for s in range(1, STEPS + 1):
        logger.log_metrics({"tokens_per_sec": 2950.0}, s, prefix="performance")
        logger.log_metrics({"loss": 0.01, "buffer_size": 64}, s, prefix="train")
        logger.log_metrics({"efficiency/idle_fraction": 0.1}, s, prefix="")
        logger.log_metrics(async_grpo_step(s, rng), s, prefix="timing/train",
                           step_finished=True)


def rows_of(state: ServerState, sent: list[Span]) -> list[dict]:
    now = time.time_ns()
    body = encode([(Identity("p", "e"), "x", s._replace(start_ns=now + i, end_ns=now + i))
                   for i, s in enumerate(sent)])
    intake.accept_spans(state, body, PROTOBUF, "")
    state.anatomy.update(now / 1e9 + 10)
    return [r.as_dict() for r in state.anatomy.rows("p", "e")]


def test_a_refit_bubble_is_no_second_cause_of_the_weight_sync_it_holds(state, spans):
    replay(spans)
    rows = rows_of(state, spans)
    assert [r["step"] for r in rows] == list(range(1, STEPS)), rows  # the last: no later
    for r in rows:  # every second of the step counted once: the parts add up to it
        assert r["source"] == "timing_keys"
        assert sum(explain.parts(r).values()) == pytest.approx(r["duration_s"]), r
        assert r["overlap_s"] == 0.0, r
    last = STEPS - 1
    e = explain.explain(rows, last)
    first, *rest = e["contributions"]
    bubble = next((c for c in e["contributions"] if c["part"] == BUBBLE), None)
    # the weight sync is the cause, with all of the step's time over its baseline
    assert first["part"] == SYNC, e["contributions"]
    assert first["over_s"] == pytest.approx(e["over_baseline_s"], rel=0.1), e
    # the bubble holds nothing of its own beyond the sync and the generation in flight
    assert bubble is None or abs(bubble["over_s"]) < 0.05 * first["over_s"], bubble
    found = changes.analyze(rows).report()
    assert len(found) == 1, [c.as_dict() for c in found]
    change = found[0].as_dict()
    assert change["signal"] == "step_time", change
    # the weight sync first, with most of the step time's change; no part beside it
    assert [p["part"] for p in change["parts"]] == [SYNC], change
    assert change["parts"][0]["share"] > 0.5, change
    assert BUBBLE not in {p["part"] for p in change["parts"]}, change
    assert BUBBLE not in {s["signal"] for s in change["signals"]}, change


def test_a_starving_buffer_is_its_own_wait_not_also_the_generation(state, spans):
    """The sampling's exposed_generation holds the starvation sleeps: the generation
    counts what it holds beyond them, the wait names them."""
    replay(spans)
    rows = {r["step"]: r for r in rows_of(state, spans)}
    starving = rows[3]
    assert starving["waits"]["timing/train/idle/buffer_starvation"] == pytest.approx(1.0)
    calm = [r["roles"]["rollout"]["generate_s"] for s, r in rows.items() if s % 7 != 3]
    assert starving["roles"]["rollout"]["generate_s"] < max(calm), starving


def test_each_tables_enclosed_keys_are_its_parts_and_only_their_own_share_counts():
    for fw in frameworks.FRAMEWORKS.values():
        for outer, inner in fw.encloses.items():
            for key in (outer, *inner):
                assert fw.timing(key) is not None, (fw.name, key)  # a part, no container
            assert outer not in inner, fw.name
    nemo = frameworks.named("nemo_rl")
    got = table.parts(nemo, {"timing/train/total_step_time": 20.0,
                             "timing/train/idle/refit_bubble": 5.5,
                             "timing/train/weight_sync": 5.0,
                             "timing/train/exposed_generation": 2.0})
    # the bubble's 0.5 s beyond its sync are within the generation's 2 s: none its own
    assert (got.waits, got.weight_update_s, got.generate_s) == \
        ({"timing/train/idle/refit_bubble": 0.0}, 5.0, 2.0), got
    slime = frameworks.named("slime")
    got = table.parts(slime, {"perf/save_model_time": 30.0, "perf/wake_up_time": 4.0,
                              "perf/sleep_time": 2.0})
    assert got.phases == {phases.CHECKPOINT: 24.0, phases.OFFLOAD: 6.0}, got
