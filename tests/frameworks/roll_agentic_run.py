"""A ROLL agentic run replayed in ROLL's order: alibaba/ROLL 8eb27cc2
roll/pipeline/agentic/agentic_pipeline.py ``AgenticPipeline.run()`` (l.223-628) in its
partial-GPU mode (the sampler shrunk off the training GPUs), with ``track_with: rl_insight``,
on a virtual clock (each block's time given: no sleeps).

Its calls, as run() makes them: per step, the driver's span ``pipeline_step{global_step}``
(l.236-239) around one span per timed block (``tracer.start_as_current_span(name)`` beside
each ``Timer``), each block's seconds in ``metrics["time/<key>"]``, the untimed blocks
between them (offloads, loads, checkpoint); after the step's ``with``, ``time/step_total``
(the step's own ``pipeline_step_total`` timer, l.616) and ``tracker.log(values=metrics,
step=global_step)`` (l.617), outside the step's span. The tracker comes from ROLL's
``create_tracker`` (FAKE stand-in, tests/frameworks/stand_ins/roll); the spans from the real
OpenTelemetry SDK, written as ROLL's collector writes them (tests/frameworks/roll_run.py's
``provider``), where a tracer is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

# run()'s blocks in order: (span, timing key, seconds); no key: a block ROLL does not time
STEP = (
    (None, None, 0.2),  # l.241-252: the trainer's states offloaded, the scheduler suspended
    ("model_update", "time/step_model_update", 0.8),  # l.255-258
    (None, None, 0.1),  # l.261-264: the engines' and reward's states loaded
    ("rollout", "time/step_rollout", 6.0),  # l.297-312, the batch's transfer its last part
    ("shrink_sampler", "time/step_shrink", 0.4),  # l.343-358 (partial-GPU mode)
    (None, None, 0.05),  # l.360-363: discounted returns, the batch adjusted
    ("cal_ref_log_probs", "time/step_ref_log_probs_values_reward", 1.0),  # l.366-412
    ("cal_old_log_probs_values", "time/step_old_log_probs_values", 1.2),  # l.415-467
    ("cal_response_level_mask", "time/step_cal_response_level_mask", 0.05),  # l.470-475
    ("cal_response_norm_rewards", "time/step_cal_norm_rewards", 0.1),  # l.478-486
    ("cal_token_reward", "time/step_cal_token_reward", 0.1),  # l.488-494
    ("compute_advantage", "time/step_adv", 0.05),  # l.496-510
    ("train", "time/step_train", 3.0),  # l.518-550
    ("compute_data_metrics", "time/step_compute_data_metrics", 0.2),  # l.552-556
    (None, None, 0.1),  # l.561-564: the state kept, do_checkpoint
    ("log", "time/step_log", 0.3),  # l.567-614
)
ROLLOUT = "time/step_rollout"
# the batch's transfer, inside the rollout's timer: from the scheduler's return
# (rollout_scheduler.py l.692) to the driver's (agentic_pipeline.py l.304-305)
TRANSFER, TRANSFER_S = "time/get_batch_cost_train", 0.3
NS = 1_000_000_000


@dataclass
class Clock:
    """The replay's time, in nanoseconds since the epoch."""

    ns: int = 1_700_000_000 * NS

    def advance(self, seconds: float) -> None:
        self.ns += int(round(seconds * NS))


def replay(tracker: Any, tracer: Any, steps: int, slow_step: int = -1,
           slow_transfer_s: float = 0.0, clock: Clock | None = None) -> Iterator[dict]:
    """run()'s calls for ``steps`` steps (``tracer`` None: ROLL's tracing off); at
    ``slow_step`` the batch's transfer takes ``slow_transfer_s`` more. Yields what each
    step measured, its timing dict as logged, once the step is logged."""
    clock = clock or Clock()
    for global_step in range(steps):
        metrics: dict[str, float] = {}
        t_step = clock.ns
        step_span = tracer.start_span("pipeline_step", start_time=t_step, attributes={
            "global_step": global_step}) if tracer else None
        ctx = trace.set_span_in_context(step_span) if step_span else None
        for name, key, seconds in STEP:
            if key == ROLLOUT:
                transfer = TRANSFER_S + (slow_transfer_s if global_step == slow_step else 0)
                metrics[TRANSFER] = transfer
                seconds += transfer - TRANSFER_S
            start = clock.ns
            clock.advance(seconds)
            if tracer and name:
                tracer.start_span(name, context=ctx, start_time=start).end(end_time=clock.ns)
            if key:
                metrics[key] = (clock.ns - start) / NS
        if step_span:
            step_span.end(end_time=clock.ns)
        metrics["time/step_total"] = (clock.ns - t_step) / NS  # l.616
        if tracker is not None:  # l.617, with the step's scalars
            tracker.log(values={**metrics, "system/tps": 1843.0,
                                "actor/pg_loss@sum": -0.002, "critic/score/mean": 0.3},
                        step=global_step)
        clock.advance(0.01)  # the loop's own logging before the next step
        yield metrics
