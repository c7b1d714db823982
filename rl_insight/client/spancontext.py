"""Span ids and the span the current code runs in: ids from a per-process random start
(re-seeded in a forked child), the (trace, span) pair of the enclosing span, for
nesting. Pure; no client."""

from __future__ import annotations

import contextvars
import itertools
import os
import random

# span ids: a per-process random start below 2**62 (never 0), then a counter: cheaper than
# random bits, and 2**62 spans from reaching 64 bits; re-seeded in a forked child
_ids = itertools.count(random.SystemRandom().getrandbits(62) | 1)


def _new_id() -> int:
    return next(_ids)


def _reseed() -> None:
    global _ids
    _ids = itertools.count(random.SystemRandom().getrandbits(62) | 1)


os.register_at_fork(after_in_child=_reseed)


# (trace_id, span_id) of the span the current code runs in, for nesting
_current: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "rl_insight_span", default=None)


def _restore(token: contextvars.Token) -> None:
    """Undo a block's span context. A block that exits in another context (an async
    generator closed by the loop's finalizer after its consumer went away) has nothing
    to undo there; that is not an error."""
    try:
        _current.reset(token)
    except (ValueError, RuntimeError):
        pass
