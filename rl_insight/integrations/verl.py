"""verl (0.9.1): its own ``RLInsightLogger`` (``verl/utils/tracking.py``) calls this
package; what it does not hand over is the run's configuration. verl's ``Tracking``
gives the logger the whole config (``RLInsightLogger(project_name, experiment_name,
config)``, as it gives wandb's ``config=``), and the logger passes ``init`` only
``config.trainer.rl_insight``. Patched here, with verl unchanged, the logger hands the
whole config over as well (``rl_insight.log_config``: flattened, secrets masked, kept with
the run on the server).

The patch is the table's ``on_import`` (rl_insight/frameworks/verl.py): the job's worker
setup hook (``rl-insight ray-env``, ``RAY_RUNTIME_ENV_HOOK``) patches
``verl.utils.tracking`` when a process (verl's ``TaskRunner``) imports it. In a job
without the hook, verl's logger names the run by calling ``init`` itself: the client then
patches the modules already imported (``onimport.apply_imported``), and the config of
the call in progress is read from that call, found by its code object.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

SOURCE = "verl"
PATCHED = "_rl_insight_config"
FRAMES = 32  # how far up the stack the call in progress is looked for


def hand_over(config: Any) -> None:
    import rl_insight

    rl_insight.log_config(config, source=SOURCE)


def patch_tracking(module: Any) -> bool:
    """Wrap ``RLInsightLogger.init`` (once) so that the run's config is handed over when
    the logger names the run; a call in progress (this patch applied from inside it)
    hands its config over now. Returns whether the class was found."""
    cls = getattr(module, "RLInsightLogger", None)
    init = getattr(cls, "init", None)
    if cls is None or not callable(getattr(init, "__func__", None)):
        log.warning("rl-insight: %s has no RLInsightLogger.init; verl's config is not "
                    "handed over (read against verl 0.9.1)", getattr(module, "__name__", ""))
        return False
    if getattr(cls, PATCHED, False):
        return True
    original = init.__func__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_and_hand_over(klass, *args, **kwargs):
        out = original(klass, *args, **kwargs)  # verl's call, exactly as it was made
        try:
            given = signature.bind(klass, *args, **kwargs).arguments
        except TypeError:
            return out
        config = given.get("config")
        if config is not None and given.get("project_name") is not None and \
                getattr(klass, "_init_done", False):
            hand_over(config)
        return out

    cls.init = classmethod(init_and_hand_over)
    setattr(cls, PATCHED, True)
    in_progress = _call_in_progress(original.__code__)
    if in_progress is not None:
        hand_over(in_progress)
    return True


def _call_in_progress(code: Any) -> Any:
    """The ``config`` of a call of ``code`` on this thread's stack (verl's logger naming
    the run, which called ``init``, which applied this patch), or None."""
    frame = sys._getframe(1)
    for _ in range(FRAMES):
        if frame is None:
            return None
        if frame.f_code is code:
            f_locals = frame.f_locals
            if f_locals.get("project_name") is None:
                return None
            return f_locals.get("config")
        frame = frame.f_back
    return None
