"""``trace_op``: a span per call of a decorated function, sync or async, a generator's
whole iteration (rl_insight/client/api.py re-exports it, the public path)."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from rl_insight.client.arguments import attributes_of as _attrs
from rl_insight.client.runtime import RUNTIME as _rt
from rl_insight.client.spancontext import _current, _new_id, _restore
from rl_insight.wire import attributes as attr
from rl_insight.wire.events import Span


def trace_op(name: str | Callable | None = None, *,
             extra_labels: Callable[[Any], Mapping[str, Any]] | None = None,
             **static_labels: Any) -> Callable:
    """Decorator: a span per call of a sync or async function. As upstream 0.3.0:
    ``extra_labels`` gets the call's first positional argument (often ``self``), before
    the call, and its labels override the static ones; a failing callback is logged and
    leaves the static labels."""
    if callable(name):  # used bare: @trace_op
        return trace_op()(name)

    def decorate(fn: Callable) -> Callable:
        qual = getattr(fn, "__qualname__", getattr(fn, "__name__", "op"))
        span_name = name or qual.rsplit("<locals>.", 1)[-1]  # Class.method or function
        return _wrap(fn, _Op(span_name, static_labels, extra_labels))

    return decorate


class _Op:
    """One decorated function's span: begun before a call, ended after it; neither
    raises into the caller."""

    __slots__ = ("name", "static", "extra")

    def __init__(self, name: str, static: Mapping[str, Any],
                 extra: Callable[[Any], Mapping[str, Any]] | None) -> None:
        self.name, self.static, self.extra = name, dict(static), extra

    def begin(self, args: tuple):
        try:
            c = _rt.client or _rt.get()
            if c is None:
                return None
            labels = dict(self.static)
            if self.extra is not None and args:
                try:
                    labels.update(self.extra(args[0]) or {})
                except Exception:
                    _rt.failed(f"extra_labels of {self.name}")
            parent = _current.get()
            span_id = _new_id()
            trace_id = parent[0] if parent else (span_id << 64 | _new_id())
            token = _current.set((trace_id, span_id))
            return (c, token, trace_id, span_id, parent[1] if parent else 0, labels,
                    time.time_ns())
        except Exception:
            _rt.failed(f"trace_op {self.name}")
            return None

    def end(self, state, error: BaseException | None) -> None:
        if state is None:
            return
        c, token, trace_id, span_id, parent_id, labels, start = state
        if isinstance(error, GeneratorExit):  # a consumer closed its stream
            error = None
        try:
            _restore(token)
            lane = labels.pop(attr.LANE_ATTR, None)
            attrs = _attrs(labels) + ((attr.SEGMENT_ATTR, attr.DURATION_SEGMENT),)
            if error is not None:
                attrs += (("error", type(error).__name__),)
            c.add(Span(self.name, start, time.time_ns(),
                       str(lane) if lane is not None else None, attrs,
                       trace_id, span_id, parent_id))
        except Exception:
            _rt.failed(f"trace_op {self.name}")


def _wrap(fn: Callable, op: _Op) -> Callable:
    """``fn`` in a span per call: a generator's or an async generator's whole iteration,
    however it ends; a coroutine's await; a plain call."""
    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def agen_wrapper(*args, **kwargs):
            state, gen, error = op.begin(args), fn(*args, **kwargs), None
            try:
                async for item in gen:
                    yield item
            except BaseException as e:
                error = e
                raise
            finally:
                try:
                    await gen.aclose()
                finally:
                    op.end(state, error)
        return agen_wrapper
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(*args, **kwargs):
            state, error = op.begin(args), None
            try:
                return (yield from fn(*args, **kwargs))
            except BaseException as e:
                error = e
                raise
            finally:
                op.end(state, error)
        return gen_wrapper
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            state = op.begin(args)
            try:
                result = await fn(*args, **kwargs)
            except BaseException as e:
                op.end(state, e)
                raise
            op.end(state, None)
            return result
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        state = op.begin(args)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            op.end(state, e)
            raise
        op.end(state, None)
        return result
    return wrapper
