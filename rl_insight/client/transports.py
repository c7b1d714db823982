"""Where a process's batches go. Inside Ray: metric events to the hub, lane events to
the lane actors, one actor call per batch and actor. Without Ray: the same collector
cores run in-process and talk to the server directly."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from rl_insight.collector.ack import Unconfirmed
from rl_insight.collector.hub import HubCore
from rl_insight.collector.lanes import LaneCore
from rl_insight.collector.loop import Periodic
from rl_insight.collector.push import Sender
from rl_insight.config import ClientSettings
from rl_insight.events import Batch, Identity, Metric, Span, StateChange

log = logging.getLogger(__name__)
HUB = "__hub__"


def actor_config(settings: ClientSettings, server_url: str, token: str,
                 otlp_url: str) -> dict[str, Any]:
    """The plain-data configuration the hub and lane actors are created with."""
    buckets = [float(x) for x in settings.histogram_buckets.split(",") if x.strip()]
    return {"server_url": server_url, "token": token, "otlp_url": otlp_url,
            "push_interval_s": settings.hub_push_interval_s,
            "max_series_per_run": settings.max_series_per_run, "buckets": buckets,
            "lane_flush_interval_s": settings.lane_flush_interval_s,
            "lane_batch_size": settings.lane_batch_size,
            "lane_max_pending_spans": settings.lane_max_pending_spans,
            "lane_pool_size": settings.lane_pool_size,
            "namespace": settings.ray_namespace,
            "metrics_host": settings.metrics_host, "metrics_port": settings.metrics_port,
            "resend_max_events": settings.resend_max_events}


def ray_ready() -> bool:
    """True when this process is connected to Ray (without importing Ray otherwise)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())


def split(items: list) -> tuple[list, dict[str | None, list]]:
    metrics, lanes = [], {}
    for it in items:
        if type(it) is Metric:
            metrics.append(it)
        else:
            lanes.setdefault(it.lane, []).append(it)
    return metrics, lanes


class RayTransport:
    def __init__(self, config: dict[str, Any], process: str) -> None:
        from rl_insight.ray import actors

        self.actors = actors
        self.config = config
        self.process = process
        self.hub = actors.get_hub(config)
        self.lanes: dict[str, Any] = {}
        self.job_id = ""
        try:
            import ray

            self.job_id = ray.get_runtime_context().get_job_id()
        except Exception:
            pass
        self._identity_cache: Identity | None = None
        self._next_lookup = 0.0
        budget = config["resend_max_events"]
        self.unconfirmed: dict[str, Unconfirmed] = {}
        self._budget = budget
        self._next_settle = 0.0

    def register_run(self, identity: Identity) -> None:
        self.hub.register_run.remote(self.job_id, identity.project, identity.experiment_name)

    def resolve(self, identity: Identity | None) -> Identity | None:
        """A process without its own identity takes its job's, as the driver told the hub."""
        if identity is not None:
            return identity
        if self._identity_cache is None and time.monotonic() >= self._next_lookup:
            import ray

            self._next_lookup = time.monotonic() + 5.0
            try:
                found = ray.get(self.hub.identity_for_job.remote(self.job_id), timeout=5)
            except Exception:
                found = None
            if found:
                self._identity_cache = Identity(*found)
        return self._identity_cache

    def _lane(self, name: str):
        handle = self.lanes.get(name)
        if handle is None:
            handle = self.lanes[name] = self.actors.get_lane(name, self.config)
            self.hub.note_lanes.remote([name])
        return handle

    def _pending(self, name: str) -> Unconfirmed:
        u = self.unconfirmed.get(name)
        if u is None:
            u = self.unconfirmed[name] = Unconfirmed(self._budget)
        return u

    def export(self, identity: Identity | None, items: list, dropped: int) -> list:
        """Hand the items to the actors; returns the calls' refs (for flush to await)."""
        ident = self.resolve(identity)
        metrics, by_lane = split(items)
        refs = []
        hub_log = self._pending(HUB)
        dropped += hub_log.overflow - getattr(self, "_overflow_reported", 0)
        self._overflow_reported = hub_log.overflow
        if metrics or dropped:
            batch = Batch(ident, self.job_id, self.process, metrics, dropped)
            seq = hub_log.add(len(metrics), batch)
            refs.append(self.hub.ingest.remote(batch, seq))
        lane_ident = ident or Identity("default", self.job_id or "unknown")
        grouped: dict[str, list] = {}
        pool = self.config["lane_pool_size"]
        for lane, its in by_lane.items():
            name = self.actors.lane_actor_name(lane if lane is not None else self.process,
                                               pool)
            grouped.setdefault(name, []).extend(its)
        for name, its in grouped.items():
            args = (lane_ident, self.process, its)
            seq = self._pending(name).add(len(its), args)
            refs.append(self._lane(name).ingest.remote(*args, seq))
        self.settle()
        return refs

    def settle(self, force: bool = False) -> None:
        """At most once a second: forget what the actors confirmed; send again what a
        restarted actor lost."""
        import ray

        if not force and time.monotonic() < self._next_settle:
            return
        self._next_settle = time.monotonic() + 1.0
        names = [n for n, u in self.unconfirmed.items() if u.items]
        handles = [self.hub if n == HUB else self._lane(n) for n in names]
        refs = [h.confirmed.remote(self.process) for h in handles]
        for name, handle, ref in zip(names, handles, refs, strict=True):
            try:
                incarnation, confirmed = ray.get(ref, timeout=2)
            except Exception:  # restarting: try again next time
                continue
            for seq, args in self.unconfirmed[name].settle(incarnation, confirmed):
                if name == HUB:
                    handle.ingest.remote(args, seq)
                else:
                    handle.ingest.remote(*args, seq)

    def finish(self, identity: Identity, timeout: float) -> None:
        import ray

        refs = [h.flush.remote(timeout) for h in self.lanes.values()]
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
        ray.get(self.hub.finish_run.remote(identity.project, identity.experiment_name),
                timeout=timeout)

    def close(self, timeout: float) -> None:
        pass


class DirectTransport:
    """The hub and one lane core in this process, for code that runs outside Ray."""

    def __init__(self, config: dict[str, Any], process: str) -> None:
        self.process = process
        sender = Sender(config["server_url"], config["token"], otlp_url=config["otlp_url"])
        buckets = config.get("buckets") or None
        self.hub = HubCore(sender, config["max_series_per_run"],
                           {"default": buckets} if buckets else None, name=process)
        self.lanes = LaneCore(sender, f"process_{process}",
                              config["lane_max_pending_spans"], config["lane_batch_size"])
        self.hub_loop = Periodic(config["push_interval_s"], self.hub.tick,
                                 "rl-insight-push").start()
        self.lane_loop = Periodic(config["lane_flush_interval_s"], self.lanes.tick,
                                  "rl-insight-spans").start()
        self.metrics_server = None
        if not config["server_url"]:  # external OTLP mode: serve metrics ourselves
            from rl_insight.collector.runs import merge_expositions
            from rl_insight.collector.serve import MetricsServer

            self.metrics_server = MetricsServer(
                lambda: merge_expositions([self.hub.runs.render_all(),
                                           self.lanes.runs.render_all()]),
                config["metrics_host"], config["metrics_port"])

    def register_run(self, identity: Identity) -> None:
        pass

    def export(self, identity: Identity | None, items: list, dropped: int) -> list:
        ident = identity or Identity("default", "default")
        metrics, by_lane = split(items)
        if metrics or dropped:
            self.hub.ingest(Batch(ident, "", self.process, metrics, dropped))
        lane_items = [it for its in by_lane.values() for it in its
                      if type(it) in (Span, StateChange)]
        if lane_items and self.lanes.ingest(ident, self.process, lane_items):
            self.lane_loop.wake()
        return []

    def finish(self, identity: Identity, timeout: float) -> None:
        self.lane_loop.run_now(timeout)
        self.hub_loop.run_now(timeout)
        self.hub.finish(identity)

    def close(self, timeout: float) -> None:
        self.lane_loop.stop(timeout)
        self.hub_loop.stop(timeout)
