"""The server's own metrics: request and push counters, and gauges read at scrape time
from the supervisor and the stores."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rl_insight.server.threads import RESTARTS

if TYPE_CHECKING:
    from rl_insight.server.analyses.anatomy import AnatomyStore
    from rl_insight.server.analyses.changes import ChangeStore
    from rl_insight.server.analyses.profiles import ProfileStore
    from rl_insight.server.ingest.engine_requests import RequestMetrics
    from rl_insight.server.ingest.experiments import ExperimentStore
    from rl_insight.server.ingest.lane_stats import LaneStats
    from rl_insight.server.ingest.pushstore import PushStore
    from rl_insight.server.ingest.relay import Relay
    from rl_insight.server.ingest.runconfigs import RunConfigStore
    from rl_insight.server.ingest.spool import Spool
    from rl_insight.server.ingest.targets import LocalTargetLog, TargetStore
    from rl_insight.server.services.supervisor import Supervisor


class Measured(Protocol):
    """The parts whose gauges are read at scrape time (the server's state provides
    them): what these metrics depend on, not the module that wires the server."""

    supervisor: Supervisor
    pushes: PushStore
    targets: TargetStore
    local_targets: LocalTargetLog
    relay: Relay
    spool: Spool
    lanes: LaneStats
    experiments: ExperimentStore
    anatomy: AnatomyStore
    changes: ChangeStore
    requests: RequestMetrics
    profiles: ProfileStore
    configs: RunConfigStore


class _StateCollector(Collector):
    def __init__(self, state: Measured) -> None:
        self.state = state

    def collect(self) -> Iterator:
        st = self.state
        up = GaugeMetricFamily("rl_insight_service_up",
                               "1 when the managed service's process runs", labels=["service"])
        ready = GaugeMetricFamily("rl_insight_service_ready",
                                  "1 when the managed service answers its readiness check",
                                  labels=["service"])
        restarts = CounterMetricFamily("rl_insight_service_restarts",
                                       "Times the supervisor restarted the service",
                                       labels=["service"])
        for s in st.supervisor.status():
            up.add_metric([s.name], 1.0 if s.pid else 0.0)
            ready.add_metric([s.name], 1.0 if s.ready else 0.0)
            restarts.add_metric([s.name], float(s.restarts))
        yield from (up, ready, restarts)
        yield GaugeMetricFamily("rl_insight_push_groups", "Pushed groups stored",
                                value=len(st.pushes.groups))
        yield GaugeMetricFamily("rl_insight_push_series", "Series in pushed groups",
                                value=st.pushes.total_series())
        yield GaugeMetricFamily("rl_insight_targets", "Registered scrape targets",
                                value=len(st.targets.list()))
        yield CounterMetricFamily("rl_insight_targets_rewritten",
                                  "Targets naming the caller's own machine (loopback, "
                                  "0.0.0.0, localhost), kept under the caller's address",
                                  value=st.local_targets.rewritten)
        yield CounterMetricFamily("rl_insight_targets_refused",
                                  "Registrations refused because a target named the "
                                  "caller's own machine and the caller was unknown",
                                  value=st.local_targets.refused)
        yield CounterMetricFamily("rl_insight_spans_received", "Spans accepted on /v1/traces",
                                  value=st.relay.received)
        yield CounterMetricFamily("rl_insight_spans_relayed", "Spans delivered to Tempo",
                                  value=st.relay.relayed)
        yield CounterMetricFamily("rl_insight_spans_replayed",
                                  "Spans delivered from the spool after an outage",
                                  value=st.relay.replayed)
        dropped = CounterMetricFamily("rl_insight_spans_dropped", "Spans dropped, by reason",
                                      labels=["reason"])
        for reason, n in st.relay.dropped.items():
            dropped.add_metric([reason], float(n))
        yield dropped
        yield GaugeMetricFamily("rl_insight_spool_spans", "Spans waiting in the spool",
                                value=st.spool.spans)
        yield GaugeMetricFamily("rl_insight_spool_bytes", "Bytes in the spool",
                                value=st.spool.bytes)
        yield GaugeMetricFamily("rl_insight_trace_relay_up",
                                "1 when the last send to Tempo succeeded",
                                value=1.0 if st.relay.up else 0.0)
        yield GaugeMetricFamily("rl_insight_lanes", "Lanes with statistics",
                                value=len(st.lanes))
        restarts = CounterMetricFamily("rl_insight_thread_restarts",
                                       "Background threads of the server restarted after "
                                       "an error (the log names it)", labels=["thread"])
        for name in ("rl-insight-relay", "rl-insight-maintain", "rl-insight-supervisor"):
            restarts.add_metric([name], float(RESTARTS[name]))
        yield restarts
        # what the alerting rules join on, so a finished or archived run stops alerting
        active = GaugeMetricFamily("rl_insight_experiment_active",
                                   "1 for every experiment whose status is active (finished "
                                   "and archived ones are absent)",
                                   labels=["project", "experiment_name"])
        for e in st.experiments.list():
            if e["status"] == "active":
                active.add_metric([e["project"], e["experiment_name"]], 1.0)
        yield active


class ServerMetrics:
    """One registry for everything the server says about itself."""

    def __init__(self, state: Measured) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self.requests = Counter("rl_insight_http_requests", "HTTP requests by route and code",
                                ["method", "route", "code"], registry=self.registry)
        self.pushes = Counter("rl_insight_pushes", "Metric pushes by method and result",
                              ["method", "result"], registry=self.registry)
        self.span_texts = Counter(
            "rl_insight_span_texts", "Span text attributes removed, redacted or cut by "
            "traces.text_policy (the policy applied)", ["policy"], registry=self.registry)
        self.intake_seconds = Histogram(
            "rl_insight_intake_duration_seconds", "Time to answer a push or span export, "
            "from its arrival (what a lane actor's flush waits for)", ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 10),
            registry=self.registry)
        self.framework_spans = Counter(
            "rl_insight_framework_spans", "A framework's own spans (not this package's) by "
            "what its table made of them: mapped to a lane, unmatched (no rule: kept in "
            "Tempo as they are), no_run (no project and experiment_name)",
            ["framework", "outcome"], registry=self.registry)
        self.intake_refused = Counter(
            "rl_insight_intake_refused", "Pushes and span exports answered 503 because "
            "server.max_intake_inflight were in progress (the senders send them again)",
            registry=self.registry)
        self.gc_pause = Histogram(
            "rl_insight_gc_pause_seconds", "The server's garbage collections by generation: "
            "every request waits while one runs", ["generation"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
            registry=self.registry)
        _watch_gc(self.gc_pause)
        self.registry.register(_StateCollector(state))
        self.registry.register(state.anatomy)  # rl_insight_step_*
        self.registry.register(state.changes)  # rl_insight_step_regression_*
        self.registry.register(state.requests)  # rl_insight_request_*
        self.registry.register(state.profiles)  # rl_insight_profile_*
        self.registry.register(state.configs)  # rl_insight_run_config_*
        self.types = {m.name: m.type for m in self.registry.collect()}


_GC: dict = {"histogram": None, "started": 0.0}  # one callback per process


def _watch_gc(histogram: Histogram) -> None:
    """Time every collection into the newest server's histogram (gc.callbacks run in
    the collecting thread, around the collection)."""
    if _GC["histogram"] is None:
        gc.callbacks.append(_gc_callback)
    _GC["histogram"] = histogram


def _gc_callback(phase: str, info: dict) -> None:
    if phase == "start":
        _GC["started"] = time.perf_counter()
    elif _GC["started"]:
        _GC["histogram"].labels(str(info["generation"])).observe(
            time.perf_counter() - _GC["started"])
