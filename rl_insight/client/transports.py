"""Where a process's batches go. Inside Ray: metric events to the hub, lane events to
the lane actors, one actor call per batch and actor. Without Ray: the same collector
cores run in-process and talk to the server directly, and the process takes the
profiles of the rank lanes it sent itself (no node lane actor exists to take them)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from rl_insight.client import self_profile
from rl_insight.collector.hub import HubCore
from rl_insight.collector.lanes import LaneCore
from rl_insight.collector.loop import Periodic
from rl_insight.collector.profiling import PY_SPY, Captures
from rl_insight.collector.push import Sender
from rl_insight.config import ClientSettings
from rl_insight.wire import laneid
from rl_insight.wire.events import Batch, Exposition, Identity, Metric, Span, StateChange

log = logging.getLogger(__name__)
HUB = "__hub__"
MAX_RANK_LANES = 1024  # (run, rank lane) pairs a process remembers having sent


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
            "lane_exit_grace_s": settings.lane_exit_grace_s,
            "forget_after_s": settings.forget_after_s,
            "namespace": settings.ray_namespace,
            "metrics_host": settings.metrics_host, "metrics_port": settings.metrics_port,
            "resend_max_events": settings.resend_max_events,
            "profile_poll_s": settings.profile_poll_s,
            "profile_method": settings.profile_method}


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


class Transport(Protocol):
    """What the client hands its batches to. ``DirectTransport`` here (no Ray);
    ``rl_insight.ray.transport.RayTransport`` inside Ray. The client imports neither
    Ray nor the actors: it asks ``rl_insight.ray`` for its transport when Ray is up."""

    in_ray: bool

    def export(self, identity: Identity | None, items: list, dropped: int) -> list: ...

    def register_run(self, identity: Identity) -> None: ...

    def upkeep(self) -> None: ...

    def finish(self, identity: Identity, timeout: float) -> None: ...

    def close(self, timeout: float) -> None: ...


class DirectTransport:
    """The hub and one lane core in this process, for code that runs outside Ray
    (``torchrun``, ``torch.multiprocessing.spawn``): it also asks the server for
    profiles of the rank lanes this process sent, as a node's lane actor does inside
    Ray, and captures them on the lane core's thread (py-spy on itself, or its own
    stacks sampled where py-spy cannot read it or ``client.profile_method=self``)."""

    in_ray = False

    def upkeep(self) -> None:
        """Nothing to settle: the cores run here."""

    def __init__(self, config: dict[str, Any], process: str) -> None:
        self.process = process
        sender = Sender(config["server_url"], config["token"], otlp_url=config["otlp_url"])
        buckets = config.get("buckets") or None
        self.hub = HubCore(sender, config["max_series_per_run"],
                           {"default": buckets} if buckets else None, name=process,
                           forget_after_s=config["forget_after_s"])
        self.lanes = LaneCore(sender, f"process_{process}",
                              config["lane_max_pending_spans"], config["lane_batch_size"],
                              config["forget_after_s"])
        # platform mode has no server to ask; a request per process every poll, and only
        # once this process sent a rank lane
        self.captures = Captures(sender, f"process_{process}",
                                 config.get("profile_poll_s", 5.0), self.lanes.process_of,
                                 config.get("profile_method", PY_SPY)) \
            if config["server_url"] else None
        self._rank_lanes: set[tuple[Identity, str]] = set()
        self.hub_loop = Periodic(config["push_interval_s"], self.hub.tick,
                                 "rl-insight-push").start()
        self.lane_loop = Periodic(config["lane_flush_interval_s"], self._lane_tick,
                                  "rl-insight-spans").start()
        self.metrics_server = None
        if not config["server_url"]:  # platform mode: serve metrics ourselves
            from rl_insight.collector.runs import merge_expositions
            from rl_insight.collector.serve import MetricsServer

            try:  # every interface: the node's address and loopback
                self.metrics_server = MetricsServer(
                    lambda: merge_expositions([self.hub.runs.render_all(),
                                               self.lanes.runs.render_all()]),
                    config["metrics_host"] or "0.0.0.0", config["metrics_port"],
                    token=config["token"])
            except OSError as exc:  # monitoring never stops training
                log.error("rl-insight: cannot serve metrics on port %s (%s); this "
                          "process's metrics reach no Prometheus", config["metrics_port"],
                          exc)

    def register_run(self, identity: Identity) -> None:
        pass

    def _lane_tick(self) -> bool:
        """The lane core's tick, then profiles: ask, capture, answer (on this thread and
        the capture's own, never the caller's)."""
        backlog = self.lanes.tick()
        captures = self.captures
        if captures is not None:
            try:
                captures.tick(bool(self.lanes.rank_process))
                for ask in captures.asks_for(self.process):  # py-spy could not read it
                    self_profile.answer(ask, self._sampled)
            except Exception:  # never the spans' loss
                log.warning("rl-insight: profiles of this process's ranks", exc_info=True)
        return backlog

    def _sampled(self, pid: str, outcome: dict) -> None:
        """This process's own samples, answered at the next tick (now)."""
        self.captures.answered(pid, outcome)
        self.lane_loop.wake()

    def export(self, identity: Identity | None, items: list, dropped: int) -> list:
        ident = identity or Identity("default", "default")
        metrics, by_lane = split(items)
        if metrics or dropped:
            self.hub.ingest(Batch(ident, "", self.process, metrics, dropped))
        lane_items = [it for its in by_lane.values() for it in its
                      if type(it) in (Span, StateChange, Exposition)]
        # a rank lane's first span goes at once: the server profiles only the lanes it
        # has heard of (rl-insight profile answered 404 for a lane_flush_interval_s)
        first = False
        for it in lane_items:
            if type(it) is Span and it.ends_state and it.lane is not None and \
                    (ident, it.lane) not in self._rank_lanes and laneid.is_rank(it.lane):
                if len(self._rank_lanes) >= MAX_RANK_LANES:
                    self._rank_lanes.clear()  # a first span again: one more early tick
                self._rank_lanes.add((ident, it.lane))
                first = True
        if lane_items and (self.lanes.ingest(ident, self.process, lane_items) or first):
            self.lane_loop.wake()
        return []

    def finish(self, identity: Identity, timeout: float) -> None:
        """Within ``timeout`` in all, however slow the server: the last pushes run on a
        daemon thread that is left behind at the deadline."""
        end = time.monotonic() + timeout
        self.lanes.finish(identity)
        last = _started(lambda: self.hub.finish(identity), "rl-insight-finish")  # its own
        self.lane_loop.run_now(timeout)  # tick pushes the rest; the spans meanwhile
        last.join(max(0.0, end - time.monotonic()))

    def close(self, timeout: float) -> None:
        """Stop both loops, each running once more, within ``timeout`` in all (their last
        pushes may wait on a slow server: they run on a daemon thread)."""
        def stop() -> None:
            end = time.monotonic() + timeout
            self.lane_loop.stop(timeout)
            self.hub_loop.stop(max(0.0, end - time.monotonic()))

        _started(stop, "rl-insight-close").join(timeout)


def _started(fn: Callable[[], object], name: str) -> threading.Thread:
    """``fn`` on a daemon thread: a caller with a deadline joins it for what is left and
    leaves it behind (a push waiting on a slow server) rather than wait past it."""
    t = threading.Thread(target=fn, daemon=True, name=name)
    t.start()
    return t
