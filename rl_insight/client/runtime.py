"""The process's client state, in one object with named fields (``RUNTIME``), instead of
module globals spread over the API: whether monitoring is on (its client) or was found
off (with the configuration that said so), the failures counted, and the state
intervals open in this process. ``rl_insight/client/api.py`` and
``rl_insight/client/states.py`` read it on every call, so its fields are slots: one
attribute load each.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from rl_insight.client.configuration import ClientConfig, resolve
from rl_insight.client.core import Client

log = logging.getLogger(__name__)


class Interval:
    """One busy interval of a lane in one thread: the blocks of one state that overlap
    there (hundreds of concurrent generate requests on a replica's event loop) are one
    interval, one StateChange when the first opens and one span when the last closes.
    Only the thread that opened it counts its blocks, so no block takes a lock.
    ``trace_state`` makes it with ``object.__new__`` and sets every field in place: a
    Python ``__init__`` call was a twentieth of a block's cost."""

    __slots__ = {
        "depth": "blocks open now",
        "ids": "the interval span's (trace id, span id)",
        "parent": "the caller's span id when it opened, else 0",
        "start": "when it opened, ns of the wall clock",
        "labels": "the first block's labels",
        "blocks": "blocks in all",
        "errors": "blocks that ended in an exception",
        "last_error": "the last one's type name",
    }


class Runtime:
    """What this process's client API holds between calls."""

    __slots__ = ("client", "checked", "off", "errors", "open", "stamped")

    def __init__(self) -> None:
        self.client: Client | None = None  # monitoring on: the one client
        # the environment was looked at: monitoring found on (client) or off (off)
        self.checked = False
        # the configuration resolved when monitoring was last found off: a bare init()
        # resolves again only when the variables that turn it on changed (a few
        # lookups, where resolving reads the config file), as Uni-Agent calls init()
        # before every metric
        self.off: ClientConfig | None = None
        self.errors = 0  # calls that failed (each logged once, then every 10,000th)
        # open intervals per (lane, state, thread): blocks of one lane in two threads at
        # once are two intervals, which the lane stacks
        self.open: dict[tuple[str, str, int], Interval] = {}
        self.stamped: set[str] = set()  # lanes whose engine spans this process stamped

    def failed(self, what: str) -> None:
        """Count a failure and say so (once, then every 10,000th): never raised."""
        self.errors += 1
        n = self.errors
        if n == 1 or n % 10_000 == 0:
            log.warning("rl-insight: %s failed (%d failures so far); training continues",
                        what, n, exc_info=n == 1)

    def enable(self, config: ClientConfig | None = None) -> Client | None:
        """The client, created from ``config`` (else resolved from the environment and
        the config file) when it names somewhere to deliver; None when it names none."""
        self.checked = True
        if self.client is not None:
            return self.client
        config = config or resolve()
        if not config.enabled:
            self.off = config
            return None
        c = Client(config)
        if not c.delivers:  # the push backend alone, and none of its sinks could be built
            c.discard()
            self.off = config
            return None
        self.off, self.client = None, c
        return c

    def get(self) -> Client | None:
        """The client, the environment looked at on the first call. Never raises."""
        c = self.client
        if c is None and not self.checked:
            try:
                c = self.enable()
            except Exception:
                self.failed("enabling monitoring")
                return None
        return c

    def configuration(self) -> ClientConfig | None:
        """The configuration monitoring runs with (None while off), with the run it names
        now."""
        c = self.client
        return None if c is None else dataclasses.replace(c.config, identity=c.identity)

    def forget_intervals(self) -> None:
        """A forked child opens its own intervals and stamps its own engines."""
        self.open.clear()
        self.stamped.clear()


RUNTIME = Runtime()
os.register_at_fork(after_in_child=RUNTIME.forget_intervals)
