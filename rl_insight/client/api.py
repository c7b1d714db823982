"""The client API (the names and signatures existing training code calls).

Off unless a server URL or OTLP endpoint is configured: then every call is an attribute
read and a return. On: a call builds a plain event and appends it to the buffer.
No call raises into the caller; failures are counted and logged once. What the process
holds between calls is one object, rl_insight/client/runtime.py's ``RUNTIME``;
``trace_state`` lives in rl_insight/client/states.py, ``trace_op`` in
rl_insight/client/ops.py, both re-exported here (the path upstream code imports).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rl_insight.client.arguments import _NO_DOC, _ONE, _REQUIRED
from rl_insight.client.arguments import attributes_of as _attrs
from rl_insight.client.arguments import labels_of as _labels
from rl_insight.client.arguments import split_params as _params
from rl_insight.client.configuration import ClientConfig, environ_key, resolve
from rl_insight.client.handover import child_env
from rl_insight.client.ops import trace_op
from rl_insight.client.registration import (
    ROLLOUT_JOBS,
    TQ_JOB,
    check_rollout_stats,
    register_targets,
)
from rl_insight.client.runtime import RUNTIME as _rt
from rl_insight.client.states import default_lane, trace_state
from rl_insight.client.steps import WATCHED
from rl_insight.wire import attributes as attr
from rl_insight.wire import naming
from rl_insight.wire.events import COUNTER, GAUGE, HISTOGRAM, Identity, Metric, Span

__all__ = ["child_env", "configuration", "default_lane", "enable", "enabled", "finish",
           "flush", "init", "is_platform_mode", "log_config", "metric_count", "metric_gauge",
           "metric_histogram", "register_rollout_replicas", "register_transfer_queue",
           "trace_op", "trace_span", "trace_state", "update_prometheus_config"]

log = logging.getLogger(__name__)

_failed = _rt.failed  # every failure counted and said once (rl_insight/client/runtime.py)
# Events are built with tuple.__new__ (all fields given): a NamedTuple's own __new__ is a
# Python function, and these are built on every call.
_tnew = tuple.__new__


def enable(config: ClientConfig) -> bool:
    """Monitoring on with ``config`` (rl_insight.ray.attach's), unless it is on already;
    whether it is on. Never raises."""
    try:
        return _rt.enable(config) is not None
    except Exception:
        _failed("enabling monitoring")
        return False


def enabled() -> bool:
    """Whether monitoring is on in this process (the environment looked at on the first
    call). Never raises."""
    return _rt.get() is not None


def is_platform_mode() -> bool:
    """True when this process reports in platform mode: spans straight to
    ``RL_INSIGHT_OTLP_ENDPOINT`` (or ``otel.exporter.endpoint``), metrics served for the
    platform's own Prometheus, no RL-Insight server (a server URL wins). verl skips its
    scrape-target registrations then (the platform scrapes by its own rule); calling
    ``update_prometheus_config`` anyway is a no-op that says so. Never raises."""
    try:
        c = _rt.get()
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
    rt = _rt
    if project is None and experiment_name is None and not config and (
            rt.client is not None or (rt.checked and rt.off is not None and
                                      rt.off.environ_key == environ_key())):
        return  # nothing new to start: monitoring is on, or off with the same environment
    try:
        c = rt.client
        if c is None or config:
            resolved = resolve(init_config=config)
            if c is None:
                c = rt.enable(resolved)
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
    c = _rt.client or _rt.get()
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
    return _rt.configuration()


def finish() -> None:
    """Hand over everything buffered; in the process that named the run, mark it
    finished so the server can expire its pushed groups later."""
    c = _rt.client
    if c is None:
        return
    try:
        c.finish(c.settings.exit_flush_timeout_s)
    except Exception:
        _failed("finish")


def flush(timeout: float = 5.0) -> bool:
    """Hand over everything buffered within ``timeout``; True when all was taken."""
    c = _rt.client
    if c is None:
        return True
    try:
        return c.flush(timeout)
    except Exception:
        _failed("flush")
        return False


def _metric(kind: str, name: str, value: Any, documentation: str,
            labels: Mapping[str, Any]) -> None:
    c = _rt.client
    if c is None:
        c = _rt.get()
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
    if _rt.client is None and _rt.checked:  # monitoring is off: nothing to do
        return
    name, amount, documentation = _params(name, amount, documentation, labels, "amount")
    _metric(COUNTER, name, amount, documentation, labels)


def metric_gauge(name: str = _REQUIRED, value: float = _REQUIRED, documentation: str = _NO_DOC, /,
                 **labels: Any) -> None:
    """Set a gauge (exported as ``rl_insight_monitor_<name>``)."""
    if _rt.client is None and _rt.checked:  # monitoring is off: nothing to do
        return
    name, value, documentation = _params(name, value, documentation, labels, "value")
    _metric(GAUGE, name, value, documentation, labels)


def metric_histogram(name: str = _REQUIRED, value: float = _REQUIRED,
                     documentation: str = _NO_DOC, /, **labels: Any) -> None:
    """Observe one value into a histogram (``_bucket``, ``_sum``, ``_count``)."""
    if _rt.client is None and _rt.checked:  # monitoring is off: nothing to do
        return
    name, value, documentation = _params(name, value, documentation, labels, "value")
    _metric(HISTOGRAM, name, value, documentation, labels)


def trace_span(*, name: str, start_time_ns: int, end_time_ns: int,
               attributes: Mapping[str, Any] | None = None) -> None:
    """Record a span that already happened (e.g. measured by another component). As
    upstream: the caller's attributes win over the run's and the process's (a
    ``state_name`` of its own too), sequences go out as OTLP arrays; ``state_lane_id``
    puts the span on that lane of the timeline."""
    c = _rt.client or _rt.get()
    if c is None:
        return
    try:
        attributes = dict(attributes or {})
        lane = attributes.pop(attr.LANE_ATTR, None)
        c.add(Span(str(name), int(start_time_ns), int(end_time_ns),
                   str(lane) if lane is not None else None, _attrs(attributes)))
    except Exception:
        _failed("trace_span")


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
    c = _rt.client or _rt.get()
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
