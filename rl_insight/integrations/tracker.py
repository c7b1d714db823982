"""The logging backend every framework adapter is: the client's ``Tracking`` with the
framework's table (rl_insight/frameworks/), so one dict per step becomes gauges (as
verl's ``rl_insight`` logger), the step comes from the framework's own step key, and the
step's timing keys go to the server as one record, from which it cuts the step into its
parts when no lane tells it (rl_insight/frameworks/table.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rl_insight.client.tracking import Tracking
from rl_insight.frameworks.table import Framework

STEP_GAUGE = Tracking.STEP_METRIC  # rl_insight_monitor_step: the step marks


class FrameworkTracker(Tracking):
    """``FrameworkTracker(framework, project, experiment_name, config)``;
    ``log(data, step)``; ``finish()``. ``framework`` names a table
    (``rl_insight.frameworks.FRAMEWORKS``); a name without one logs scalars only.
    ``run_config``: what the framework hands its own trackers as the run's
    configuration, handed to the server."""

    def __init__(self, framework: str | Framework, project: str | None = None,
                 experiment_name: str | None = None,
                 config: Mapping[str, Any] | None = None, marks: bool = True,
                 run_config: Any = None) -> None:
        super().__init__(project, experiment_name, config, framework=framework, marks=marks,
                         run_config=run_config)
