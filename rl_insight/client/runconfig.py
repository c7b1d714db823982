"""A run's configuration handed to the server: what the framework hands its tracker
(verl's ``Tracking(config=)``, TRL's ``args``, NeMo-RL's ``master_config``, ...), kept
with the run so that two runs' configurations can be set side by side and diffed.

The caller's thread only queues it: the registrar's thread (the one that registers
scrape targets, rl_insight/client/registration.py) flattens, masks and bounds it
(rl_insight/runconfig/) and sends it, retrying while the server is away. A configuration
handed over before the run is named waits for its name; one the server already has is
not sent again. Platform mode (no server) keeps none.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import Any

from rl_insight.client.options import reads_as_options
from rl_insight.runconfig.flatten import flatten
from rl_insight.runconfig.section import options_section
from rl_insight.wire.runconfig import CONFIG_PATH, CUT, MAX_SOURCE_CHARS, SOURCE

log = logging.getLogger(__name__)
DEFAULT_SOURCE = "log_config"
LAST_KEPT = 64  # runs whose last configuration this process remembers sending
# per run, the last configuration sent (made on the registrar's thread only)
_last: OrderedDict[tuple[str, str], str] = OrderedDict()
_said_platform = False


def hand_over(c: Any, config: Any, source: str = "") -> None:
    """Queue ``config`` for the run client ``c`` names (or the one it names next);
    returns at once."""
    global _said_platform
    if config is None:
        return
    identity = c.identity
    if identity is None:  # sent when init() names the run (Client.set_identity)
        c.held_config = (config, source)
        return
    if not c.server_url:
        if not _said_platform:
            _said_platform = True
            log.info("rl-insight: platform mode (no RL-Insight server): the run's "
                     "configuration is kept nowhere")
        return
    project, experiment = identity
    c.registrar().submit(lambda: body(project, experiment, config, source), CONFIG_PATH)


def body(project: str, experiment_name: str, config: Any, source: str = "") -> dict | None:
    """The hand-over's JSON body (rl_insight/wire/runconfig.py), on the registrar's
    thread; None when the run's last one held the same configuration, whoever handed it
    over (verl's logger and a user's ``log_config`` alike)."""
    flat = flatten(config).body()
    digest = json.dumps(flat, sort_keys=True)
    run = (project, experiment_name)
    if _last.get(run) == digest:
        return None
    if any(flat[CUT].values()):
        cut = flat[CUT]
        log.warning("rl-insight: the configuration of %s/%s was cut to its bounds "
                    "(rl_insight/wire/runconfig.py): %d keys left out, %d values cut "
                    "short, %d containers not entered", project, experiment_name,
                    cut["keys"], cut["values"], cut["depth"])
    _last[run] = digest
    _last.move_to_end(run)
    while len(_last) > LAST_KEPT:
        _last.popitem(last=False)
    return {"project": project, "experiment_name": experiment_name,
            SOURCE: (source or DEFAULT_SOURCE)[:MAX_SOURCE_CHARS], **flat}


def split(config: Any) -> tuple[Any, Any]:
    """``Tracking(project, experiment_name, config)``'s ``config`` as (the
    ``init(config=...)`` options, the run's configuration). A mapping of option keys only
    is the options, as before (upstream's callers); anything else is the run's
    configuration, as verl's and wandb's trackers take it, with the options where verl
    keeps them (``trainer.rl_insight``)."""
    if config is None:
        return None, None
    if reads_as_options(config):
        return config, None
    return options_section(config), config
