"""The hub and lane actors: thin Ray wrappers around the collector cores.

The hub is one detached actor per cluster, ``rl_insight_hub`` in namespace
``rl_insight``. Lane actors are ``rl_insight_lane_<replica lane>``, one per rollout replica
of any role (``rl_insight_lane_replica_0``, ``rl_insight_lane_teacher_x_replica_2``),
and ``rl_insight_lane_node_<node>``, one per Ray node for every other lane of the
processes on it (trainer ranks, per-request and per-trajectory lanes): requests to the
server grow with replicas and nodes, never with ranks. All are detached (they outlive a
crashing driver), restarted by Ray, reserve no CPU, and are created race-free with
``get_if_exists``; a lane actor exits once every job that used it has ended
(``client.lane_exit_grace_s`` later), so none outlives its jobs by more than a minute.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from rl_insight.collector.hub import HubCore
from rl_insight.collector.lanes import LaneCore
from rl_insight.collector.lifetime import JobLifetime
from rl_insight.collector.loop import Periodic
from rl_insight.collector.profiling import Captures
from rl_insight.collector.push import Sender
from rl_insight.ray import raymetrics
from rl_insight.ray.raymetrics import RayGauges
from rl_insight.wire import laneid
from rl_insight.wire.events import Batch, Identity

log = logging.getLogger(__name__)

HUB_NAME = "rl_insight_hub"
# the hub's calls that wait on a push run in a concurrency group of their own, so a slow
# server never holds up ingest and confirmed (the default group, one at a time)
WAITING = "waiting"
NAMESPACE = "rl_insight"
LANE_PREFIX = "rl_insight_lane_"
NODE_LANES = LANE_PREFIX + "node_"
JOB_CHECK_S = 10.0  # how often a lane actor asks Ray whether its jobs have ended


def _sender(config: dict[str, Any]) -> Sender:
    return Sender(config["server_url"], config["token"],
                  otlp_url=config["otlp_url"])


class HubActor:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = dict(config)
        buckets = config.get("buckets") or None
        self.core = HubCore(_sender(config), config["max_series_per_run"],
                            {"default": buckets} if buckets else None,
                            forget_after_s=config["forget_after_s"])
        self.core.recover()  # a restarted hub continues its runs' counters
        self.ray_gauges = RayGauges("rl_insight_hub", raymetrics.HUB, "rl_insight_hub")
        self.loop = Periodic(config["push_interval_s"], self._tick,
                             "rl-insight-hub-push").start()
        self.metrics_server = None
        if not config["server_url"]:  # platform mode: serve metrics ourselves
            from rl_insight.collector.serve import MetricsServer

            try:  # on the node's address, as upstream's hub (a platform's rule finds it)
                self.metrics_server = MetricsServer(
                    self.core.exposition, config["metrics_host"] or node_address(),
                    config["metrics_port"], token=config["token"])
            except OSError as exc:  # monitoring never stops training
                log.error("rl-insight hub: cannot serve metrics on %s:%s (%s); this run's "
                          "metrics reach no Prometheus. Set prometheus.metrics_report_port "
                          "to a free port.", config["metrics_host"] or node_address(),
                          config["metrics_port"], exc)
        log.info("rl-insight hub up; pushing to %s every %.1fs", config["server_url"],
                 self.loop.interval)

    def __repr__(self) -> str:
        """What Ray's dashboard and `ray list actors` show (Ray takes it once, when the
        actor starts: the run that started it, and the runs a restarted hub recovered)."""
        s = self.core.stats()
        runs = sorted({f"{i.project}/{i.experiment_name}" for i in self.core.runs.identities()}
                      | ({self.config["run"]} if self.config.get("run") else set()))
        return (f"HubActor(runs {runs[:5]}{' ...' if len(runs) > 5 else ''}: "
                f"{s['events_received']} events, {s['pushes']} pushes, "
                f"{s['push_failures']} failed, server {'ok' if s['server_ok'] else 'down'})")

    def _tick(self) -> bool | None:
        try:
            return self.core.tick()
        finally:
            self.ray_gauges.update(self.core.stats())

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

    def put_groups(self, groups: list) -> list[bool]:
        """Platform mode: a lane actor's series (what it would push to the server),
        served on this hub's /metrics."""
        return self.core.served.put(groups)

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


class HubSink(Sender):
    """Platform mode's sender for a lane actor: spans to the OTLP endpoint as always, the
    lane series to the hub, which serves them on its /metrics (no server to push to)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__("", config["token"], otlp_url=config["otlp_url"])
        self.namespace = config["namespace"]
        self._hub = None

    def push_groups(self, groups) -> list[bool]:
        if not groups:
            return []
        try:
            hub = self._hub or find_hub(self.namespace)
            if hub is None:  # not started yet: the groups stay dirty for the next tick
                return [False] * len(groups)
            self._hub = hub
            done = ray.get(hub.put_groups.remote(
                [(job, dict(grouping), text, replace)
                 for job, grouping, text, replace in groups]), timeout=self.timeout)
            return self._note(True, "lane series to the hub") and list(done)
        except Exception as exc:  # a restarting hub: keep them, try again next tick
            self._hub = None
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._note(False, "lane series to the hub")
            return [False] * len(groups)


REFRESH_S = 600.0  # platform mode: every lane group is sent again this often (served.py)


class LaneActor:
    def __init__(self, name: str, config: dict[str, Any]) -> None:
        self.name = name
        self.platform = not config["server_url"]
        self._refresh_at = time.monotonic() + REFRESH_S
        self.core = LaneCore(HubSink(config) if self.platform else _sender(config), name,
                             config["lane_max_pending_spans"],
                             config["lane_batch_size"], config["forget_after_s"])
        self.lifetime = JobLifetime(config.get("lane_exit_grace_s", 20.0))
        self._next_check = time.monotonic() + JOB_CHECK_S
        self.exiting = False
        self.namespace = config["namespace"]
        self._asking: dict[str, Any] = {}  # job -> the hub's answer on its way
        self._hub = None  # looked up once, again after a failed answer
        self.ray_gauges = RayGauges("rl_insight_lanes", raymetrics.LANES, name)
        self.captures = None if self.platform else Captures(
            self.core.sender, name, config.get("profile_poll_s", 5.0), self.core.process_of,
            config.get("profile_method", "py-spy"))
        self.loop = Periodic(config["lane_flush_interval_s"], self._tick,
                             f"rl-insight-{name}").start()

    def __repr__(self) -> str:  # what Ray's dashboard and `ray list actors` show
        s = self.core.stats()
        return (f"LaneActor({self.name}: {s['lanes']} lanes, {s['spans_sent']} spans sent, "
                f"{s['spans_pending']} pending, jobs {sorted(self.lifetime.jobs)})")

    def ingest(self, identity: Identity | None, process: str, items: list, seq: int = 0,
               job_id: str = "") -> None:
        self.lifetime.seen(job_id)
        if self.core.ingest(identity, process, items, seq, job_id):
            self.loop.wake()

    def _name_jobs(self) -> None:
        """Ask the hub, without waiting, which run each job with held events is: one
        question per job at a time, its answer taken at a later tick."""
        for job in self.core.unnamed_jobs():
            ref = self._asking.get(job)
            if ref is None:
                self._hub = self._hub or find_hub(self.namespace)
                if self._hub is not None:
                    self._asking[job] = self._hub.identity_for_job.remote(job)
                continue
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self._asking[job]
            try:
                found = ray.get(ref, timeout=0)
            except Exception:  # the hub restarting: found again and asked next tick
                found, self._hub = None, None
            if found:
                self.core.name_job(job, Identity(*found))
        unnamed = set(self.core.unnamed_jobs())
        self._asking = {j: r for j, r in self._asking.items() if j in unnamed}

    def _tick(self) -> bool:
        self._name_jobs()
        if self.platform and time.monotonic() >= self._refresh_at:
            self._refresh_at = time.monotonic() + REFRESH_S
            self.core.runs.mark_all_dirty()  # the hub forgets a group an hour unrefreshed
        backlog = self.core.tick()
        if self.captures is not None:  # profiles of the ranks this node's actor serves
            try:
                self.captures.tick(bool(self.core.rank_process))
            except Exception:  # never the lanes' loss
                log.warning("rl-insight lane actor %s: profiles", self.name, exc_info=True)
        self.ray_gauges.update(self.core.stats())
        if time.monotonic() >= self._next_check and not backlog:
            self._next_check = time.monotonic() + JOB_CHECK_S
            if self.lifetime.over(ended_jobs()) and self.core.idle():
                self._exit()
        return backlog

    def _exit(self) -> None:
        """Every job that used this actor has ended and its spans are out: go, for good
        (Ray would restart a crash; this is no crash)."""
        log.info("rl-insight lane actor %s: its jobs have ended; exiting", self.name)
        self.exiting = True
        try:
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        except Exception as exc:  # an old Ray: stay, harmless
            log.warning("rl-insight lane actor %s could not exit: %s", self.name, exc)

    def confirmed(self, process: str) -> tuple:
        """(incarnation, the highest batch of ``process`` that has left[, what it is asked
        to profile of itself: only while there is something, so a client of an earlier
        version reads the pair it knows])."""
        got = self.core.marks.confirmed(process)
        asks = self.captures.asks_for(process) if self.captures is not None else []
        return (*got, asks) if asks else got

    def profile_answer(self, pid: str, outcome: dict) -> None:
        """A process's own samples, asked for where py-spy could not read it."""
        if self.captures is not None:
            self.captures.answered(pid, outcome)
            self.loop.wake()

    def flush(self, timeout: float = 10.0, finished: list[str] | None = None) -> dict:
        """Push everything now; ``finished`` ([project, experiment]) ended, to be forgotten
        after client.forget_after_s."""
        if finished:
            self.core.finish(Identity(*finished))
        self.loop.run_now(timeout)
        return self.stats()

    def stats(self) -> dict:
        return {**self.core.stats(), **process_info(), "jobs": sorted(self.lifetime.jobs)}


def ended_jobs() -> set[str]:
    """Ids (hex) of the cluster's jobs that have ended, from Ray's job table; empty when
    Ray cannot say (then nothing is taken for ended)."""
    try:
        from ray._private import state

        return {j["JobID"] for j in state.jobs() if j.get("IsDead")}
    except Exception as exc:  # the job table moved in another Ray version
        log.debug("rl-insight: cannot read Ray's job table: %s", exc)
        return set()


def process_info() -> dict:
    """The actor's pid and resident memory, for status and benchmarks."""
    import os

    import psutil

    return {"pid": os.getpid(), "rss_bytes": psutil.Process().memory_info().rss}


def lane_actor_name(lane: str, node_id: str) -> str:
    """A replica's own actor for a replica lane of any role; for every other lane, the
    actor of the node the sending process runs on."""
    if laneid.is_replica(lane):
        return LANE_PREFIX + lane
    return NODE_LANES + (node_id[:12] or "local")


def _options(name: str, namespace: str) -> dict[str, Any]:
    return dict(name=name, namespace=namespace, lifetime="detached", get_if_exists=True,
                max_restarts=-1, max_task_retries=-1, num_cpus=0, max_concurrency=1)


def node_address() -> str:
    """This Ray node's IP address (where a platform's scrape rule looks for the hub)."""
    try:
        return ray.util.get_node_ip_address()
    except Exception:
        return "0.0.0.0"


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


def get_lane(name: str, config: dict[str, Any], node_id: str = ""):
    """The lane actor of that name, created on ``node_id`` if Ray can (soft: a node
    without room still gets its lanes collected elsewhere)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options = _options(name, config["namespace"])
    if node_id:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=True)
    return ray.remote(LaneActor).options(**options).remote(name, config)


def find_hub(namespace: str = NAMESPACE):
    """The hub if it exists, else None (no creation)."""
    try:
        return ray.get_actor(HUB_NAME, namespace=namespace)
    except ValueError:
        return None
