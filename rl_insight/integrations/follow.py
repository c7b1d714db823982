"""``rl-insight import --follow`` inside a training process: a framework's trace files
read as they grow and sent to the server (or the platform's OTLP endpoint), on one
background thread that outlives its errors, with a last read at exit.

The framework adapters start one where the framework writes its own traces (ROLL's
collector file, AReaL's perf tracer), so the user sets nothing more.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import TYPE_CHECKING

from rl_insight.frameworks.table import Framework
from rl_insight.integrations.tracefiles import Follower, Run

if TYPE_CHECKING:
    from rl_insight.collector.loop import Periodic

log = logging.getLogger(__name__)

INTERVAL_S = 2.0
RETRY_S = 0.2  # between the exit's tries to send what the server did not take
_running: dict[str, object] = {}  # pattern -> its loop: one follower per file pattern


def start(pattern: str, framework: Framework, project: str, experiment_name: str,
          anchor_s: float | None = None, interval_s: float = INTERVAL_S) -> Follower | None:
    """Follow ``pattern`` for this run; None when monitoring is off, or it already runs.
    Never raises."""
    try:
        return _start(pattern, framework, project, experiment_name, anchor_s, interval_s)
    except Exception:
        log.warning("rl-insight: following %s failed to start; its spans stay in the "
                    "files (`rl-insight import` reads them later)", pattern, exc_info=True)
        return None


def _start(pattern: str, framework: Framework, project: str, experiment_name: str,
           anchor_s: float | None, interval_s: float) -> Follower | None:
    from rl_insight.client import api
    from rl_insight.collector.loop import Periodic
    from rl_insight.collector.push import Sender

    if pattern in _running:
        return None
    # the configuration monitoring runs with here (an endpoint init(config=...) gave, as
    # ROLL's tracker_kwargs do, included), never one read again
    config = api.configuration()
    if config is None or not config.enabled:
        return None
    sender = Sender(config.server_url, config.token, otlp_url=config.otlp_url)
    follower = Follower(pattern, Run(framework, project, experiment_name), sender.spans,
                        anchor_s)

    def poll() -> None:
        follower.poll()
        for path, why in list(follower.bad.items()):
            if why:
                log.warning("rl-insight: %s is not a trace file this reads (%s); skipped",
                            path, why)
                follower.bad[path] = ""

    loop = Periodic(interval_s, poll, f"rl-insight-follow-{os.path.basename(pattern)}")
    _running[pattern] = loop.start()
    # the last lines the framework wrote at its end, within the client's exit deadline
    atexit.register(last_read, loop, follower, config.settings.client.exit_flush_timeout_s)
    log.info("rl-insight: following %s (%s) for %s/%s", pattern, framework.title, project,
             experiment_name)
    return follower


def last_read(loop: Periodic, follower: Follower, budget_s: float) -> None:
    """At exit: the loop's last poll, then what the server did not take sent again until
    it is taken or ``budget_s`` passed (a busy server answering after the sender's
    timeout lost a run's last step to a single try); what is left is said."""
    end = time.monotonic() + budget_s
    try:
        loop.stop(budget_s)
        while follower.unsent and time.monotonic() < end:
            time.sleep(min(RETRY_S, max(0.0, end - time.monotonic())))  # a refusal is quick
            follower.poll()
        if follower.unsent:
            log.warning("rl-insight: %d exports of %s were not taken by the server before "
                        "exit; they stay in the files (`rl-insight import` reads them), or "
                        "raise RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", len(follower.unsent),
                        follower.pattern)
    except Exception:  # never the training's exit
        log.warning("rl-insight: the last read of %s failed", follower.pattern, exc_info=True)
