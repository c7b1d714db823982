"""Letting go of what a caught exception keeps alive.

A failed send through requests/urllib3 leaves a reference cycle behind: urllib3's
``urlopen`` frame holds the error it raises, whose traceback holds that frame, and with it
the request's body. Only a full garbage collection frees such a cycle, so a sender that
retries a 4 MiB batch against a peer that is down keeps every attempt's body until then
(the server's RSS rose 4 MB per failed relay to a dead Tempo and fell 8 every 10 s).
Clearing the frames of the exception's chain frees the body at once and breaks the cycle.
"""

from __future__ import annotations

import traceback


def release(exc: BaseException) -> None:
    """Clear the locals of every finished frame in ``exc``'s chain (its cause, context
    and the exceptions it wraps), so nothing the failed call held outlives it. Call it
    once the exception's traceback is no longer needed; frames still running are left."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
        # wrapped, not chained: requests' ConnectionError(MaxRetryError(reason=...))
        wrapped = [*e.args, getattr(e, "reason", None), e.__cause__, e.__context__]
        todo.extend(w for w in wrapped if isinstance(w, BaseException))
