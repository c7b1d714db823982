"""ROLL (alibaba/ROLL): ``track_with: rl_insight``.

ROLL builds its one tracker in the pipeline's driver from ``roll.utils.tracking
.tracker_registry[track_with](config, **tracker_kwargs)`` (``create_tracker``, read at
8eb27cc2) and calls only ``log(values, step)``, never ``finish`` (the client's exit
hook hands the rest over). :func:`register` puts this tracker in the registry; importing
this module in the entry script does it, before the pipeline is built:

    import rl_insight.integrations.roll  # noqa: F401  (track_with: rl_insight)

With ``ROLL_OTEL_ENABLED=1`` ROLL's own collector writes every process's spans (OTLP
over gRPC, which this server does not take) to ``<otlp_output_dir>/traces/traces.jsonl``:
the tracker follows that file, so the driver's phases and each rank's work reach the
step anatomy and Tempo (rl_insight/frameworks/roll.py).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from rl_insight import frameworks
from rl_insight.integrations import kit
from rl_insight.integrations.tracker import FrameworkTracker

log = logging.getLogger(__name__)

NAME = "rl_insight"
FRAMEWORK = frameworks.named("roll")


def strip_tag(key: str) -> str:
    """ROLL's reducer tag off a key (``actor/pg_loss@sum``), as its own trackers do."""
    head, sep, tag = str(key).rpartition("@")
    return head if sep and head and "/" not in tag else str(key)


class RLInsightTracker:
    """``tracker_registry["rl_insight"]``: ``RLInsightTracker(config, **tracker_kwargs)``
    with ``log(values, step)`` and ``finish()``. The run: ``tracker_kwargs`` ``project``
    and ``experiment_name`` if given, else ``RL_INSIGHT_PROJECT`` /
    ``RL_INSIGHT_EXPERIMENT_NAME``, else project ``roll`` and ROLL's ``exp_name``. The
    pipeline's config (``to_dict()``, as ROLL hands its other trackers) is the run's
    configuration, handed over."""

    def __init__(self, config: Mapping[str, Any] | None = None, **tracker_kwargs: Any) -> None:
        config = dict(config or {})
        # ROLL replays its whole log history through the tracker when it resumes, from its
        # pipeline's executor thread (base_pipeline.py resume_metrics, 8eb27cc2 l.79-83),
        # while the pipeline logs its own steps from the thread that made the tracker
        self.thread = threading.get_ident()
        self.resuming = bool(config.get("resume_from_checkpoint"))
        self.replayed = 0
        project, experiment = kit.run_names((), (config.get("exp_name"),), "roll", "roll")
        self.project = kit.first(tracker_kwargs.get("project")) or project
        self.experiment_name = kit.first(tracker_kwargs.get("experiment_name")) or experiment
        self.tracker = FrameworkTracker(FRAMEWORK, self.project, self.experiment_name,
                                        tracker_kwargs.get("rl_insight") or {},
                                        run_config=config)
        self.config = config
        self.following = None
        atexit.register(self.finish)  # ROLL never calls finish: its end is the driver's

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if self.resuming and threading.get_ident() != self.thread:
            # a finished step of the run this one resumes: it keeps the time it was
            # logged at (its scalars, its step's mark and parts were sent then); sent
            # again now, every old step would be marked at the resume's time
            if not self.replayed:
                log.info("rl-insight: ROLL replays its log history on resume; its steps "
                         "keep the times they were first logged at and are not sent again")
            self.replayed += 1
            return
        if self.following is None:
            self.following = self._follow_traces()
            # its pipeline_step spans mark each step exactly: no marks of the tracker's
            self.tracker.marks = not self.following
        flat = {strip_tag(k): v for k, v in (values or {}).items()}
        if step is not None and "system/step" not in flat:
            flat["system/step"] = step
        self.tracker.log(flat, step)

    def _follow_traces(self) -> object:
        """ROLL's own span file, when its tracing is on (its collector writes it)."""
        envs = self.config.get("system_envs") or {}
        if "1" not in (envs.get("ROLL_OTEL_ENABLED"), os.environ.get("ROLL_OTEL_ENABLED")):
            return False
        from rl_insight.integrations import follow

        root = self.config.get("otlp_output_dir") or "./output/otlp"
        pattern = os.path.join(str(root), "traces", "traces*.jsonl")
        return follow.start(pattern, FRAMEWORK, self.project, self.experiment_name) or False

    def finish(self) -> None:
        self.tracker.finish()


def register() -> bool:
    """Put the tracker in ROLL's registry; False when ROLL is not importable."""
    try:
        from roll.utils import tracking
    except ImportError:
        return False
    tracking.tracker_registry[NAME] = RLInsightTracker
    return True


register()
