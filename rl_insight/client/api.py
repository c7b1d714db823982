"""The client API (the names and signatures existing training code calls).

Off unless a server URL or OTLP endpoint is configured: then every call is a global
lookup and a return. On: a call builds a plain event and appends it to the buffer.
No call raises into the caller; failures are counted and logged once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rl_insight.client import engine_spans
from rl_insight.client.arguments import _NO_DOC, _ONE, _REQUIRED
from rl_insight.client.arguments import attributes_of as _attrs
from rl_insight.client.arguments import labels_of as _labels
from rl_insight.client.arguments import split_params as _params
from rl_insight.client.configuration import ClientConfig, environ_key, resolve
from rl_insight.client.core import Client
from rl_insight.client.registration import (
    ROLLOUT_JOBS,
    TQ_JOB,
    check_rollout_stats,
    register_targets,
)
from rl_insight.client.spancontext import _current, _new_id, _restore
from rl_insight.client.steps import WATCHED
from rl_insight.wire import attributes as attr
from rl_insight.wire import naming
from rl_insight.wire.events import COUNTER, GAUGE, HISTOGRAM, Identity, Metric, Span, StateChange

log = logging.getLogger(__name__)

_client: Client | None = None
_env_checked = False
_errors = 0


# Events are built with tuple.__new__ (all fields given): a NamedTuple's own __new__ is a
# Python function, and these are built on every call.
_tnew = tuple.__new__


def _failed(what: str) -> None:
    global _errors
    _errors += 1
    if _errors == 1 or _errors % 10_000 == 0:
        log.warning("rl-insight: %s failed (%d failures so far); training continues",
                    what, _errors, exc_info=_errors == 1)


# the configuration resolved when monitoring was last found off: a bare init() resolves
# again only when the variables that turn it on changed (three lookups, where resolving
# reads the config file), as Uni-Agent calls init() before every metric
_off: ClientConfig | None = None


def _enable(config: ClientConfig | None = None) -> Client | None:
    """Create the client from ``config`` (else resolved from the environment and the
    config file) when it names an endpoint."""
    global _client, _env_checked, _off
    _env_checked = True
    if _client is not None:
        return _client
    config = config or resolve()
    if not config.enabled:
        _off = config
        return None
    c = Client(config)
    if not c.delivers:  # the push backend alone, and none of its sinks could be built
        c.discard()
        _off = config
        return None
    _off, _client = None, c
    return _client


def enable(config: ClientConfig) -> bool:
    """Monitoring on with ``config`` (rl_insight.ray.attach's), unless it is on already;
    whether it is on. Never raises."""
    try:
        return _enable(config) is not None
    except Exception:
        _failed("enabling monitoring")
        return False


def _get() -> Client | None:
    c = _client
    if c is None and not _env_checked:
        try:
            c = _enable()
        except Exception:
            _failed("enabling monitoring")
            return None
    return c


def enabled() -> bool:
    return _get() is not None


def is_platform_mode() -> bool:
    """True when this process reports in platform mode: spans straight to
    ``RL_INSIGHT_OTLP_ENDPOINT`` (or ``otel.exporter.endpoint``), metrics served for the
    platform's own Prometheus, no RL-Insight server (a server URL wins). verl skips its
    scrape-target registrations then (the platform scrapes by its own rule); calling
    ``update_prometheus_config`` anyway is a no-op that says so. Never raises."""
    try:
        c = _get()
        return c is not None and not c.server_url and bool(c.otlp_url)
    except Exception:
        return False


def init(project: str | None = None, experiment_name: str | None = None,
         config: Mapping[str, Any] | None = None) -> None:
    """Start monitoring in this process. Idempotent, and cheap to repeat (Uni-Agent calls
    ``init()`` before every metric it emits). Give both identity names or neither:
    without them, a worker inherits its run from the environment or the hub. ``config``:
    the framework's ``rl_insight`` mapping (rl_insight/client/options.py), resolved with
    the environment in the order rl_insight/client/configuration.py gives."""
    global _env_checked
    if project is None and experiment_name is None and not config and (
            _client is not None or (_env_checked and _off is not None and
                                    _off.environ_key == environ_key())):
        return  # nothing new to start: monitoring is on, or off with the same environment
    try:
        c = _client
        if c is None or config:
            resolved = resolve(init_config=config)
            if c is None:
                c = _enable(resolved)
                endpoint = resolved.server_url or resolved.otlp_url
                if c is not None and config and endpoint not in environ_key()[:2]:
                    log.info("rl-insight: endpoint from init(config): %s", endpoint)
            else:  # a newer configuration for the running client, taken whole
                c.reconfigure(resolved)
        if (project is None) != (experiment_name is None):
            log.warning("rl-insight: init() needs both project and experiment_name, or "
                        "neither; ignoring the identity given")
            return
        if c is None:
            return
        if project is not None:
            c.set_identity(Identity(str(project), str(experiment_name)))
    except Exception:
        _failed("init")


def log_config(config: Any, *, source: str | None = None) -> None:
    """Hand this run's configuration (a mapping, a dataclass, a namespace, an OmegaConf
    config: what a framework hands its tracker) to the server, which keeps it with the
    run for comparison: flattened, secrets masked and bounded off the caller's thread
    (rl_insight/client/runconfig.py), sent once and again when it changed, held until
    ``init`` names the run. Returns at once; never raises."""
    c = _client or _get()
    if c is None or config is None:
        return
    try:
        from rl_insight.client import runconfig

        runconfig.hand_over(c, config, source or "")
    except Exception:
        _failed("log_config")


def configuration() -> ClientConfig | None:
    """The configuration monitoring runs with in this process (None while off), with
    the run it names now."""
    c = _client
    if c is None:
        return None
    from dataclasses import replace

    return replace(c.config, identity=c.identity)


def finish() -> None:
    """Hand over everything buffered; in the process that named the run, mark it
    finished so the server can expire its pushed groups later."""
    c = _client
    if c is None:
        return
    try:
        c.finish(c.settings.exit_flush_timeout_s)
    except Exception:
        _failed("finish")


def flush(timeout: float = 5.0) -> bool:
    """Hand over everything buffered within ``timeout``; True when all was taken."""
    c = _client
    if c is None:
        return True
    try:
        return c.flush(timeout)
    except Exception:
        _failed("flush")
        return False


def _metric(kind: str, name: str, value: Any, documentation: str,
            labels: Mapping[str, Any]) -> None:
    c = _client
    if c is None:
        c = _get()
        if c is None:
            return
    try:
        if name is _REQUIRED:
            raise TypeError("a metric needs a name (first argument, or name=)")
        exported, changed = naming.metric_name(name, kind)
        lab = _labels(labels)
        if changed:
            lab = tuple(sorted(lab + ((naming.KEY_LABEL, str(name)),)))
        buckets = c.buckets_for(str(name)) if kind == HISTOGRAM else None
        value = float(value)
        c.add(_tnew(Metric, (kind, exported, value, lab, documentation, buckets)))
        if exported in WATCHED and kind == GAUGE:  # the trainer's step: a step mark
            c.steps.observe(exported, value)
    except Exception:
        _failed(f"recording metric {name!r}")


def metric_count(name: str = _REQUIRED, amount: float = _ONE, documentation: str = _NO_DOC, /,
                 **labels: Any) -> None:
    """Add ``amount`` (default 1) to a counter (``rl_insight_monitor_<name>_total``)."""
    if _client is None and _env_checked:  # monitoring is off: nothing to do
        return
    name, amount, documentation = _params(name, amount, documentation, labels, "amount")
    _metric(COUNTER, name, amount, documentation, labels)


def metric_gauge(name: str = _REQUIRED, value: float = _REQUIRED, documentation: str = _NO_DOC, /,
                 **labels: Any) -> None:
    """Set a gauge (exported as ``rl_insight_monitor_<name>``)."""
    if _client is None and _env_checked:  # monitoring is off: nothing to do
        return
    name, value, documentation = _params(name, value, documentation, labels, "value")
    _metric(GAUGE, name, value, documentation, labels)


def metric_histogram(name: str = _REQUIRED, value: float = _REQUIRED,
                     documentation: str = _NO_DOC, /, **labels: Any) -> None:
    """Observe one value into a histogram (``_bucket``, ``_sum``, ``_count``)."""
    if _client is None and _env_checked:  # monitoring is off: nothing to do
        return
    name, value, documentation = _params(name, value, documentation, labels, "value")
    _metric(HISTOGRAM, name, value, documentation, labels)


def default_lane() -> str:
    return f"process_{os.getpid()}"


# Open state intervals of this process, per (lane, state, thread): [open blocks, span
# context (trace id, span id), parent span id, start, labels of the first block, blocks
# with an error, blocks in all, last error]. Same-state blocks that overlap on a lane
# (hundreds of concurrent generate requests on a replica's event loop) are one busy
# interval: one StateChange when the first opens, one span when the last closes. Each
# thread keeps its own intervals, so no block takes a lock (the GIL makes each dict
# operation atomic; only the thread that opened an interval counts its blocks): blocks
# of one lane in two threads at once are two intervals, which the lane stacks.
_open: dict[tuple[str, str, int], list] = {}
_stamped: set[str] = set()  # lanes whose engine spans this process has stamped
_INTERVAL = ((attr.SEGMENT_ATTR, attr.STATE_INTERVAL),)
_REQUEST = ((attr.SEGMENT_ATTR, attr.REQUEST_SEGMENT),)
_thread_id = threading.get_ident


def _reset_open() -> None:
    _open.clear()
    _stamped.clear()


os.register_at_fork(after_in_child=_reset_open)


class trace_state:  # noqa: N801 - the public name is a function-like context manager
    """``with trace_state("vllm_generate", state_lane_id="replica_0"):`` marks the lane
    as being in that state for the block's duration; blocks of the same state that
    overlap on a lane form one interval (one span). Also a decorator, sync or async."""

    __slots__ = ("state", "lane", "labels", "start", "token", "entry", "client", "key")

    def __init__(self, state_name: str, *, state_lane_id: str | None = None,
                 **labels: Any) -> None:
        self.state = state_name if type(state_name) is str else str(state_name)
        self.lane = state_lane_id if type(state_lane_id) is str or state_lane_id is None \
            else str(state_lane_id)
        self.labels = labels
        self.client = None

    def __enter__(self) -> trace_state:
        c = _client
        if c is None:
            c = _get()
            if c is None:
                return self
        try:
            lane = self.lane or default_lane()
            key = self.key = (lane, self.state, _thread_id())
            entry = _open.get(key)
            if entry is None:  # the interval opens: a child of the caller's span, if any
                span_id = _new_id()
                parent = _current.get()
                start = time.time_ns()
                entry = _open[key] = [
                    1, (span_id << 64 | span_id, span_id) if parent is None else
                    (parent[0], span_id), 0 if parent is None else parent[1], start,
                    self.labels, 0, 1, None]
                c.add(_tnew(StateChange, (lane, key[1], start, True, span_id)))
                if lane not in _stamped:  # an engine here: its request spans too
                    _stamped.add(lane)
                    engine_spans.stamp(lane, c.identity_pair)
            else:
                entry[0] += 1
                entry[6] += 1
            self.entry = entry
            self.token = _current.set(entry[1])
            self.client = c
            if c.settings.per_request_spans:
                self.start = time.time_ns()
        except Exception:
            self.client = None
            _failed("trace_state")
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        c = self.client
        if c is None:
            return
        self.client = None  # a block closes once
        try:
            end = time.time_ns()
            entry, key = self.entry, self.key
            # a consumer closing its stream (GeneratorExit) is no failure; the count first
            failed = exc_type is not None and exc_type is not GeneratorExit
            entry[0] -= 1
            if failed:
                entry[5] += 1
                entry[7] = exc_type.__name__
            last = entry[0] == 0
            if last:  # only the thread that opened it makes one for its key again
                _open.pop(key, None)
            try:
                _current.reset(self.token)
            except (ValueError, RuntimeError):  # see _restore
                pass
            trace_id, span_id = entry[1]
            if c.settings.per_request_spans:  # each block as a child of its interval
                attrs = (_attrs(self.labels) if self.labels else ()) + _REQUEST + \
                    ((attr.LANE_ATTR, key[0]),)
                if failed:
                    attrs += (("error", exc_type.__name__),)
                c.add(_tnew(Span, (key[1], self.start, end, None, attrs, trace_id,
                                   _new_id(), span_id, False)))
            if not last:
                return
            attrs = _attrs(entry[4]) + _INTERVAL if entry[4] else _INTERVAL
            if entry[6] > 1:
                attrs += (("blocks", entry[6]),)
            if entry[5]:
                attrs += (("error", entry[7]), ("errors", entry[5]))
            c.add(_tnew(Span, (key[1], entry[3], end, key[0], attrs, trace_id, span_id,
                               entry[2], True)))
        except Exception:
            _failed("trace_state")

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


def trace_span(*, name: str, start_time_ns: int, end_time_ns: int,
               attributes: Mapping[str, Any] | None = None) -> None:
    """Record a span that already happened (e.g. measured by another component). As
    upstream: the caller's attributes win over the run's and the process's (a
    ``state_name`` of its own too), sequences go out as OTLP arrays; ``state_lane_id``
    puts the span on that lane of the timeline."""
    c = _client or _get()
    if c is None:
        return
    try:
        attributes = dict(attributes or {})
        lane = attributes.pop(attr.LANE_ATTR, None)
        c.add(Span(str(name), int(start_time_ns), int(end_time_ns),
                   str(lane) if lane is not None else None, _attrs(attributes)))
    except Exception:
        _failed("trace_span")


def trace_op(name: str | Callable | None = None, *,
             extra_labels: Callable[[Any], Mapping[str, Any]] | None = None,
             **static_labels: Any):
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
            c = _client or _get()
            if c is None:
                return None
            labels = dict(self.static)
            if self.extra is not None and args:
                try:
                    labels.update(self.extra(args[0]) or {})
                except Exception:
                    _failed(f"extra_labels of {self.name}")
            parent = _current.get()
            span_id = _new_id()
            trace_id = parent[0] if parent else (span_id << 64 | _new_id())
            token = _current.set((trace_id, span_id))
            return (c, token, trace_id, span_id, parent[1] if parent else 0, labels,
                    time.time_ns())
        except Exception:
            _failed(f"trace_op {self.name}")
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
            _failed(f"trace_op {self.name}")


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


def update_prometheus_config(server_addresses: Sequence[str] | str,
                             job_name: str | None = None,
                             labels: Mapping[str, Any] | Sequence[Mapping[str, Any] | None]
                             | None = None,
                             project: str | None = None,
                             experiment_name: str | None = None) -> None:
    """Register scrape targets with the server, for this run unless told otherwise.
    ``labels``: one mapping for all addresses, or a list with one mapping (or None) per
    address. Returns at once; a background thread deduplicates and retries. Targets
    registered before the run is named join it when ``init`` names it (here or in another
    process of the same Ray job).

    Raises ValueError (as upstream 0.3.0 does) when ``labels`` is a list whose length
    differs from the addresses': a caller's mistake, caught even with monitoring off."""
    if isinstance(labels, (list, tuple)) and not isinstance(server_addresses, str) and \
            len(labels) != len(server_addresses):
        raise ValueError("labels length must match server_addresses length: "
                         f"{len(labels)} != {len(server_addresses)}")
    c = _client or _get()
    if c is None:
        return
    try:
        register_targets(c, server_addresses, job_name, labels, project, experiment_name)
    except Exception:
        _failed("update_prometheus_config")


def register_rollout_replicas(server_addresses: Sequence[str], backend: str = "vllm", *,
                              disable_log_stats: bool = False,
                              replica_ids: Sequence[int] | None = None,
                              **labels: Any) -> None:
    """Register each rollout replica's engine /metrics (job ``vllm`` or ``sglang``,
    label ``replica``). Raises RolloutStatsDisabled when the engine keeps no statistics:
    a configuration error worth stopping for, unlike a monitoring failure."""
    check_rollout_stats(disable_log_stats, backend)
    ids = list(replica_ids) if replica_ids is not None else list(range(len(server_addresses)))
    job = ROLLOUT_JOBS.get(backend, backend)
    update_prometheus_config(list(server_addresses), job,
                             [{"replica": str(i), **labels} for i in ids])


def register_transfer_queue(address: str, **labels: Any) -> None:
    """Register the TransferQueue controller's metrics endpoint (job ``transfer_queue``);
    its storage units' endpoints are found and registered too (``transfer_queue_storage``)."""
    update_prometheus_config([address], TQ_JOB, labels or None)
