"""The hub and lane actors: thin Ray wrappers around the collector cores.

The hub is one detached actor per cluster, ``rl_insight_hub`` in namespace
``rl_insight``; lanes are ``rl_insight_lane_<lane>`` for replica and rank lanes and
``rl_insight_lane_pool_<i>`` for all others. All are detached (they outlive a crashing
driver), restarted by Ray, reserve no CPU, and are created race-free with
``get_if_exists``.
"""

from __future__ import annotations

import logging
import zlib
from typing import Any

import ray

from rl_insight.collector.hub import HubCore
from rl_insight.collector.lanes import LaneCore, is_dedicated
from rl_insight.collector.loop import Periodic
from rl_insight.collector.push import Sender
from rl_insight.events import Batch, Identity

log = logging.getLogger(__name__)

HUB_NAME = "rl_insight_hub"
# the hub's calls that wait on a push run in a concurrency group of their own, so a slow
# server never holds up ingest and confirmed (the default group, one at a time)
WAITING = "waiting"
NAMESPACE = "rl_insight"
LANE_PREFIX = "rl_insight_lane_"


def _sender(config: dict[str, Any]) -> Sender:
    return Sender(config["server_url"], config["token"],
                  otlp_url=config["otlp_url"])


class HubActor:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        buckets = config.get("buckets") or None
        self.core = HubCore(_sender(config), config["max_series_per_run"],
                            {"default": buckets} if buckets else None)
        self.core.recover()  # a restarted hub continues its runs' counters
        self.loop = Periodic(config["push_interval_s"], self.core.tick,
                             "rl-insight-hub-push").start()
        self.metrics_server = None
        if not config["server_url"]:  # external OTLP mode: serve metrics ourselves
            from rl_insight.collector.serve import MetricsServer

            self.metrics_server = MetricsServer(self.core.runs.render_all,
                                                config["metrics_host"],
                                                config["metrics_port"])
        log.info("rl-insight hub up; pushing to %s every %.1fs", config["server_url"],
                 self.loop.interval)

    def ingest(self, batch: Batch, seq: int = 0) -> None:
        self.core.ingest(batch, seq)

    def confirmed(self, process: str) -> tuple[str, int]:
        """(incarnation, the highest batch number of ``process`` that has left)."""
        return self.core.marks.confirmed(process)

    def configure(self, config: dict[str, Any]) -> None:
        """Point the hub at another server (a later attach with a different URL)."""
        if config["server_url"] != self.config["server_url"] or \
                config["token"] != self.config["token"]:
            log.warning("rl-insight hub: server changes from %s to %s",
                        self.config["server_url"], config["server_url"])
            self.config.update(config)
            self.core.sender = _sender(self.config)

    def register_run(self, job_id: str, project: str, experiment_name: str) -> None:
        self.core.register_run(job_id, Identity(project, experiment_name))

    def identity_for_job(self, job_id: str) -> tuple[str, str] | None:
        with self.core._lock:
            ident = self.core.jobs.get(job_id)
        return tuple(ident) if ident else None

    def note_lanes(self, names: list[str]) -> None:
        self.core.note_lanes(names)

    @ray.method(concurrency_group=WAITING)
    def flush(self, timeout: float = 10.0) -> dict:
        """Push everything now (the end of a run, tests)."""
        self.loop.run_now(timeout)
        return self.core.stats()

    @ray.method(concurrency_group=WAITING)
    def finish_run(self, project: str, experiment_name: str) -> bool:
        self.loop.run_now(10.0)
        return self.core.finish(Identity(project, experiment_name))

    def stats(self) -> dict:
        out = {**self.core.stats(), **process_info()}
        if self.metrics_server is not None:
            out["metrics_address"] = self.metrics_server.address
        return out


class LaneActor:
    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.core = LaneCore(_sender(config), name,
                             config["lane_max_pending_spans"],
                             config["lane_batch_size"])
        self.loop = Periodic(config["lane_flush_interval_s"], self.core.tick,
                             f"rl-insight-{name}").start()

    def ingest(self, identity: Identity, process: str, items: list, seq: int = 0) -> None:
        if self.core.ingest(identity, process, items, seq):
            self.loop.wake()

    def confirmed(self, process: str) -> tuple[str, int]:
        return self.core.marks.confirmed(process)

    def flush(self, timeout: float = 10.0) -> dict:
        self.loop.run_now(timeout)
        return self.stats()

    def stats(self) -> dict:
        return {**self.core.stats(), **process_info()}


def process_info() -> dict:
    """The actor's pid and resident memory, for status and benchmarks."""
    import os

    import psutil

    return {"pid": os.getpid(), "rss_bytes": psutil.Process().memory_info().rss}


def lane_actor_name(lane: str, pool_size: int) -> str:
    if is_dedicated(lane):
        return LANE_PREFIX + lane
    return f"{LANE_PREFIX}pool_{zlib.crc32(lane.encode()) % max(1, pool_size)}"


def _options(name: str, namespace: str) -> dict[str, Any]:
    return dict(name=name, namespace=namespace, lifetime="detached", get_if_exists=True,
                max_restarts=-1, max_task_retries=-1, num_cpus=0, max_concurrency=1)


def head_node_id() -> str | None:
    """The head node's id (the node holding Ray's ``node:__internal_head__`` resource)."""
    try:
        for n in ray.nodes():
            if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {}):
                return n["NodeID"]
    except Exception:  # an old Ray without the resource, or a state API hiccup
        return None
    return None


def get_hub(config: dict[str, Any]):
    """The cluster's hub, created by whichever process asks first, on the head node (as
    Ray Serve places its controller): losing a worker node never loses it, and Ray
    restarts it there. It reserves nothing, so the head can always take it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    namespace = config["namespace"]
    options = _options(HUB_NAME, namespace)
    head = head_node_id()
    if head:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(head, soft=False)
    hub_class = ray.remote(concurrency_groups={WAITING: 2})(HubActor)
    return hub_class.options(**options).remote(config)


def get_lane(name: str, config: dict[str, Any]):
    namespace = config["namespace"]
    return ray.remote(LaneActor).options(**_options(name, namespace)).remote(name, config)


def find_hub(namespace: str = NAMESPACE):
    """The hub if it exists, else None (no creation)."""
    try:
        return ray.get_actor(HUB_NAME, namespace=namespace)
    except ValueError:
        return None
