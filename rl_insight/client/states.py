"""``trace_state``: a lane's busy intervals, the client call on every rollout request and
every rank's phase (rl_insight/client/api.py re-exports it, the public path).

A lane holds one state at a time: the blocks of one state that overlap on a lane are
one busy interval (rl_insight/client/runtime.py's ``Interval``), one StateChange when the
first opens and one span when the last closes. Each thread keeps its own intervals, so no
block takes a lock (the GIL makes each dict operation atomic).
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from rl_insight.client import engine_spans
from rl_insight.client.arguments import attributes_of as _attrs
from rl_insight.client.runtime import RUNTIME as _rt
from rl_insight.client.runtime import Interval
from rl_insight.client.spancontext import _current, _new_id
from rl_insight.wire import attributes as attr
from rl_insight.wire.events import Span, StateChange

_INTERVAL = ((attr.SEGMENT_ATTR, attr.STATE_INTERVAL),)
_REQUEST = ((attr.SEGMENT_ATTR, attr.REQUEST_SEGMENT),)
_thread_id = threading.get_ident
# Events are built with tuple.__new__ (all fields given): a NamedTuple's own __new__ is a
# Python function, and these are built on every call.
_tnew = tuple.__new__
_new = object.__new__


def default_lane() -> str:
    """The lane of a block that names none: its process's."""
    return f"process_{os.getpid()}"


class trace_state:  # noqa: N801 - the public name is a function-like context manager
    """``with trace_state("vllm_generate", state_lane_id="replica_0"):`` marks the lane
    as being in that state for the block's duration; blocks of the same state that
    overlap on a lane form one interval (one span). Also a decorator, sync or async."""

    __slots__ = ("state", "lane", "labels", "start", "token", "interval", "client", "key")

    def __init__(self, state_name: str, *, state_lane_id: str | None = None,
                 **labels: Any) -> None:
        self.state = state_name if type(state_name) is str else str(state_name)
        self.lane = state_lane_id if type(state_lane_id) is str or state_lane_id is None \
            else str(state_lane_id)
        self.labels = labels
        self.client = None

    def __enter__(self) -> trace_state:
        c = _rt.client
        if c is None:
            c = _rt.get()
            if c is None:
                return self
        try:
            lane = self.lane or default_lane()
            key = self.key = (lane, self.state, _thread_id())
            iv = _rt.open.get(key)
            if iv is None:  # the interval opens: a child of the caller's span, if any
                span_id = _new_id()
                parent = _current.get()
                start = time.time_ns()
                iv = _rt.open[key] = _new(Interval)  # its fields set here: no __init__ call
                iv.depth = iv.blocks = 1
                iv.errors = 0
                iv.last_error = ""
                if parent is None:
                    iv.ids, iv.parent = (span_id << 64 | span_id, span_id), 0
                else:
                    iv.ids, iv.parent = (parent[0], span_id), parent[1]
                iv.start = start
                iv.labels = self.labels
                c.add(_tnew(StateChange, (lane, key[1], start, True, span_id)))
                if lane not in _rt.stamped:  # an engine here: its request spans too
                    _rt.stamped.add(lane)
                    engine_spans.stamp(lane, c.identity_pair)
            else:
                iv.depth += 1
                iv.blocks += 1
            self.interval = iv
            self.token = _current.set(iv.ids)
            self.client = c
            # a span of its own per block (client.per_request_spans): its start, else 0
            self.start = time.time_ns() if c.config.settings.client.per_request_spans \
                else 0
        except Exception:
            self.client = None
            _rt.failed("trace_state")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        c = self.client
        if c is None:
            return
        self.client = None  # a block closes once
        try:
            end = time.time_ns()
            iv, key = self.interval, self.key
            # a consumer closing its stream (GeneratorExit) is no failure; the count first
            failed = exc_type is not None and exc_type is not GeneratorExit
            iv.depth -= 1
            if failed:
                iv.errors += 1
                iv.last_error = exc_type.__name__
            last = iv.depth == 0
            if last:  # only the thread that opened it makes one for its key again
                _rt.open.pop(key, None)
            try:
                _current.reset(self.token)
            except (ValueError, RuntimeError):  # see spancontext._restore
                pass
            trace_id, span_id = iv.ids
            if self.start:  # each block as a child of its interval
                attrs = (_attrs(self.labels) if self.labels else ()) + _REQUEST + \
                    ((attr.LANE_ATTR, key[0]),)
                if failed:
                    attrs += (("error", exc_type.__name__),)
                c.add(_tnew(Span, (key[1], self.start, end, None, attrs, trace_id,
                                   _new_id(), span_id, False)))
            if not last:
                return
            attrs = _attrs(iv.labels) + _INTERVAL if iv.labels else _INTERVAL
            if iv.blocks > 1:
                attrs += (("blocks", iv.blocks),)
            if iv.errors:
                attrs += (("error", iv.last_error), ("errors", iv.errors))
            c.add(_tnew(Span, (key[1], iv.start, end, key[0], attrs, trace_id, span_id,
                               iv.parent, True)))
        except Exception:
            _rt.failed("trace_state")

    def __call__(self, fn: Callable) -> Callable:
        """``@trace_state("actor_update", state_lane_id="rank_0")``: every call is a block;
        of a generator (a streaming engine's response), its whole iteration."""
        state, lane, labels = self.state, self.lane, self.labels
        if inspect.isasyncgenfunction(fn):
            @functools.wraps(fn)
            async def agen_wrapper(*args, **kwargs):
                gen = fn(*args, **kwargs)
                with trace_state(state, state_lane_id=lane, **labels):
                    try:
                        async for item in gen:
                            yield item
                    finally:
                        await gen.aclose()
            return agen_wrapper
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                with trace_state(state, state_lane_id=lane, **labels):
                    return (yield from fn(*args, **kwargs))
            return gen_wrapper
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                with trace_state(state, state_lane_id=lane, **labels):
                    return await fn(*args, **kwargs)
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with trace_state(state, state_lane_id=lane, **labels):
                return fn(*args, **kwargs)
        return wrapper
