"""A ROLL RLVR run replayed in ROLL's order (alibaba/ROLL 8eb27cc2:
roll/pipeline/base_pipeline.py, roll/pipeline/rlvr/rlvr_pipeline.py run(),
roll/utils/telemetry.py, roll/distributed/scheduler/decorator.py), with
``track_with: rl_insight`` and ``system_envs: {ROLL_OTEL_ENABLED: "1"}``.

ROLL does not install here: ``roll.utils.tracking`` comes from a FAKE stand-in
(tests/frameworks/stand_ins/roll: its registry and ``create_tracker``, as ROLL has them).
What ROLL's tracing writes is made with the real OpenTelemetry SDK, one TracerProvider per
ROLL process (the driver, service ``driver``; each ``actor_train`` and ``reference``
rank, service the cluster's name, ``service.instance.id`` ``{cluster}-{rank}-G{gpus}``;
its scopes ``driver`` and ``worker``), each process's spans going where ROLL's collector
puts them: one OTLP/JSON export a line in ``<otlp_output_dir>/traces/traces.jsonl``, ids
in hex (roll/utils/otel_receiver.py). The ranks' spans are children of the driver's
phase, as ROLL's context injection makes them; here they share one process, which the
file does not show.

Per step, as rlvr_pipeline.run: ``pipeline_step{global_step}`` around ``model_update``,
``generate``, ``ref_log_probs`` (each reference rank's ``worker.compute_log_probs``),
``old_log_probs_and_values`` (each actor rank's), ``compute_advantage`` and ``train``
(each actor rank's ``worker.train_step``), then ``tracker.log(values=..., step=...)``
inside ``pipeline_step`` with ROLL's raw keys (``@sum`` tags, ``system/step``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from google.protobuf import json_format
from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

HERE = Path(__file__).resolve().parent
STAND_INS = HERE / "stand_ins"  # FAKE roll.utils.tracking (on the path in main only)


class CollectorFile(SpanExporter):
    """Where ROLL's collector puts an export: one OTLP/JSON line, ids in hex."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans) -> SpanExportResult:
        data = json_format.MessageToDict(encode_spans(spans))
        for rs in data.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    for k in ("traceId", "spanId", "parentSpanId"):
                        if sp.get(k):
                            import base64

                            sp[k] = base64.b64decode(sp[k]).hex()
        with self.path.open("a") as f:
            f.write(json.dumps(data) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def provider(service: str, path: Path, instance: str | None = None) -> TracerProvider:
    attrs = {"service.name": service}
    if instance:
        attrs["service.instance.id"] = instance
    p = TracerProvider(resource=Resource.create(attrs))  # + OTEL_RESOURCE_ATTRIBUTES
    p.add_span_processor(SimpleSpanProcessor(CollectorFile(path)))
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="roll-replay")
    ap.add_argument("--experiment-name", default="roll-run")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--slow-step", type=int, default=-1, help="this step's generate "
                    "takes three times as long")
    ap.add_argument("--workdir", default=".")
    ap.add_argument("--truth", metavar="FILE")
    a = ap.parse_args(argv)
    out = Path(a.workdir) / "output" / "otlp"
    traces = out / "traces" / "traces.jsonl"
    sys.path.insert(0, str(STAND_INS))
    from roll.utils.tracking import create_tracker

    import rl_insight.integrations.roll  # noqa: F401  the entry script's one line

    # BaseConfig.to_dict(): what create_tracker hands the tracker
    config = {"exp_name": a.experiment_name, "seed": 42, "max_steps": a.steps,
              "track_with": "rl_insight",
              "tracker_kwargs": {"project": a.project, "experiment_name": a.experiment_name},
              "system_envs": {"ROLL_OTEL_ENABLED": "1"}, "otlp_output_dir": str(out)}
    tracker = create_tracker(config["track_with"], config, **config["tracker_kwargs"])
    driver = provider("driver", traces).get_tracer("driver")
    actors = [provider("actor_train", traces, f"actor_train-{r}-G{r}").get_tracer("worker")
              for r in range(a.ranks)]
    refs = [provider("reference", traces, f"reference-{r}-G{a.ranks + r}").get_tracer(
        "worker") for r in range(a.ranks)]
    steps, t_start = [], time.time()

    def phase(name: str, seconds: float, ranks=(), method: str = "") -> float:
        with driver.start_as_current_span(name):
            t0 = time.perf_counter()
            ctx = context.get_current()
            work = []
            for tracer in ranks:  # each rank, its own span under the driver's phase
                span = tracer.start_span(f"worker.{method}", context=ctx)
                work.append((span, tracer.start_span(
                    "exec", context=trace.set_span_in_context(span))))
            time.sleep(seconds)
            for span, child in work:
                child.end()
                span.end()
            return time.perf_counter() - t0

    for step in range(a.steps):
        truth = {"step": step}
        with driver.start_as_current_span("pipeline_step", attributes={"global_step": step}):
            t_step = time.perf_counter()
            truth["model_update"] = phase("model_update", 0.1)
            truth["generate"] = phase("generate", 0.5 * (3 if step == a.slow_step else 1))
            truth["ref_log_probs"] = phase("ref_log_probs", 0.15, refs, "compute_log_probs")
            truth["old_log_probs"] = phase("old_log_probs_and_values", 0.15, actors,
                                           "compute_log_probs")
            truth["compute_advantage"] = phase("compute_advantage", 0.02)
            truth["train"] = phase("train", 0.3, actors, "train_step")
            values = {"time/step_model_update": truth["model_update"],
                      "time/step_generate": truth["generate"],
                      "time/ref_log_probs_values": truth["ref_log_probs"],
                      "time/old_log_probs": truth["old_log_probs"],
                      "math_rule/time/compute_advantage": truth["compute_advantage"],
                      "time/step_train": truth["train"],
                      "time/step_total": steps[-1]["total"] if steps else 0.0,
                      "actor/pg_loss@sum": -0.003, "actor/kl_loss@sum": 0.0009,
                      "actor/clipfrac@sum": 0.012, "actor/ratio_max@max": 1.31,
                      "actor/lr": 1e-6, "actor_train/grad_norm": 0.27,
                      "critic/score/mean": 0.4 + 0.02 * step, "critic/rewards/mean": 0.4,
                      "token/response_length/mean": 1187.3, "system/global_step": step,
                      "system/step": step}
            tracker.log(values=values, step=step)
            truth["total"] = time.perf_counter() - t_step
        steps.append(truth)
    t_end = time.time()
    import rl_insight

    rl_insight.flush(10)  # the follower reads the file once more at exit
    if a.truth:
        Path(a.truth).write_text(json.dumps(steps))
    print("RUN " + json.dumps({"framework": "roll", "project": a.project,
                               "experiment_name": a.experiment_name, "t_start": t_start,
                               "t_end": t_end, "steps": a.steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
