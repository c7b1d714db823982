"""The client's transport inside Ray: metric events to the hub, lane events to the lane
actors (a replica's own, or the one of this process's node), one actor call per batch
and actor; what an actor has not confirmed is kept and sent again when it restarts, or
to its successor when it had exited. Implements
``rl_insight.client.transports.Transport``."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from rl_insight.client.transports import HUB, split
from rl_insight.collector.ack import Unconfirmed
from rl_insight.collector.hub import PARK_S
from rl_insight.events import Batch, Identity
from rl_insight.ray import actors

log = logging.getLogger(__name__)
PARK_LIMIT = 20_000  # lane events one process keeps while its run has no name


class RayTransport:
    in_ray = True

    def __init__(self, config: dict[str, Any], process: str) -> None:
        self.actors = actors
        self.config = config
        self.process = process
        self.hub = actors.get_hub(config)
        self.lanes: dict[str, Any] = {}
        self.job_id = self.node_id = ""
        try:
            ctx = ray.get_runtime_context()
            self.job_id, self.node_id = ctx.get_job_id(), ctx.get_node_id()
        except Exception:
            pass
        self._identity_cache: Identity | None = None
        self._lookup = None  # the hub's answer to "which run is this job?", on its way
        self._next_lookup = 0.0
        # lane events of a job whose run has no name yet, per lane actor: they wait for
        # it (PARK_S at most, PARK_LIMIT events) rather than go to a run of their own
        self._parked: dict[str, list] = {}
        self._parked_count = 0
        self._parked_since: float | None = None
        self._park_dropped = 0
        self._park_lock = threading.Lock()  # the buffer's thread and a flush's caller
        budget = config["resend_max_events"]
        self.unconfirmed: dict[str, Unconfirmed] = {}
        self._budget = budget
        self._next_settle = 0.0

    def register_run(self, identity: Identity) -> None:
        self.hub.register_run.remote(self.job_id, identity.project, identity.experiment_name)

    def resolve(self, identity: Identity | None) -> Identity | None:
        """A process without its own identity takes its job's, as the driver told the hub.
        Asked without waiting (a busy hub answers late): the answer is taken by a later
        call, and a job the hub cannot name yet is asked again 5 s later."""
        if identity is not None:
            return identity
        if self._identity_cache is None:
            self._ask_hub()
        return self._identity_cache

    def _ask_hub(self) -> None:
        with self._park_lock:
            self._ask_hub_locked()

    def _ask_hub_locked(self) -> None:
        if self._lookup is not None:
            ready, _ = ray.wait([self._lookup], timeout=0)
            if not ready:
                return
            ref, self._lookup = self._lookup, None
            try:
                found = ray.get(ref, timeout=0)
            except Exception:  # the hub restarting: ask again
                found = None
            if found:
                self._identity_cache = Identity(*found)
                return
        if self._lookup is None and time.monotonic() >= self._next_lookup:
            self._next_lookup = time.monotonic() + (5.0 if self._parking() else PARK_S)
            self._lookup = self.hub.identity_for_job.remote(self.job_id)

    def parked(self) -> int:
        """Lane events waiting for the run's name."""
        return self._parked_count

    def _parking(self) -> bool:
        """Lane events wait for the run's name: PARK_S from the first that waited."""
        return self._parked_since is None or \
            time.monotonic() - self._parked_since < PARK_S

    def _lane(self, name: str):
        handle = self.lanes.get(name)
        if handle is None:  # a replica's actor starts where the replica's server runs
            handle = self.lanes[name] = self.actors.get_lane(name, self.config, self.node_id)
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
        grouped: dict[str, list] = {}
        for lane, its in by_lane.items():
            name = self.actors.lane_actor_name(lane or "", self.node_id)
            grouped.setdefault(name, []).extend(its)
        if ident is None and grouped and self._parking():
            self._park(grouped)
            grouped = {}
        refs = []
        hub_log = self._pending(HUB)
        dropped += hub_log.overflow - getattr(self, "_overflow_reported", 0)
        self._overflow_reported = hub_log.overflow
        dropped, self._park_dropped = dropped + self._park_dropped, 0
        if metrics or dropped:
            batch = Batch(ident, self.job_id, self.process, metrics, dropped)
            seq = hub_log.add(len(metrics), batch)
            refs.append(self.hub.ingest.remote(batch, seq))
        refs += self._send_lanes(ident, grouped)
        self.settle()
        return refs

    def _park(self, grouped: dict[str, list]) -> None:
        with self._park_lock:
            self._park_locked(grouped)

    def _park_locked(self, grouped: dict[str, list]) -> None:
        if self._parked_since is None:
            self._parked_since = time.monotonic()
        for name, its in grouped.items():
            room = max(PARK_LIMIT - self._parked_count, 0)
            self._parked.setdefault(name, []).extend(its[:room])
            self._parked_count += min(room, len(its))
            self._park_dropped += max(len(its) - room, 0)  # counted as the client's loss

    def _send_lanes(self, ident: Identity | None, grouped: dict[str, list]) -> list:
        """Once the run is named (or PARK_S passed), what waited goes first, in order."""
        with self._park_lock:
            parked = {}
            if self._parked and (ident is not None or not self._parking()):
                parked, self._parked, self._parked_count = self._parked, {}, 0
        if parked:
            for name, its in grouped.items():
                parked.setdefault(name, []).extend(its)
            grouped = parked
            if ident is None:
                log.warning("rl-insight: Ray job %s named no run in %.0f s (no "
                            "rl_insight.init or Tracking in its driver); its lanes go to "
                            "project 'default', experiment '%s'", self.job_id, PARK_S,
                            self.job_id)
        lane_ident = ident or Identity("default", self.job_id or "unknown")
        refs = []
        for name, its in grouped.items():
            args = (lane_ident, self.process, its)
            seq = self._pending(name).add(len(its), args)
            refs.append(self._lane(name).ingest.remote(*args, seq, self.job_id))
        return refs

    def upkeep(self, wait: float = 0.0, final: bool = False) -> list:
        """Between batches: settle what the actors have not confirmed yet, and send the
        parked lane events once the hub names the run (waiting up to ``wait`` for it: a
        flush; ``final``: the process is going, unnamed they go to project default rather
        than nowhere). Returns the refs of what it sent."""
        refs = []
        if self._parked:
            end = time.monotonic() + wait
            while True:
                ident = self.resolve(None)
                if ident is not None or not self._parking() or time.monotonic() >= end:
                    break
                if self._lookup is not None:
                    ray.wait([self._lookup], timeout=min(1.0, end - time.monotonic()))
                else:
                    time.sleep(min(0.2, max(0.0, end - time.monotonic())))
            if final and ident is None:
                with self._park_lock:
                    self._parked_since = float("-inf")  # no more waiting for the name
            refs = self._send_lanes(ident, {})
        if not wait and any(u.items for u in self.unconfirmed.values()):
            self.settle()  # the buffer's thread, between batches (a flush has a deadline)
        return refs

    def settle(self, force: bool = False) -> None:
        """At most once a second: forget what the actors confirmed; send again what a
        restarted actor lost."""

        if not force and time.monotonic() < self._next_settle:
            return
        self._next_settle = time.monotonic() + 1.0
        names = [n for n, u in self.unconfirmed.items() if u.items]
        handles = [self.hub if n == HUB else self._lane(n) for n in names]
        refs = [h.confirmed.remote(self.process) for h in handles]
        for name, handle, ref in zip(names, handles, refs, strict=True):
            try:
                incarnation, confirmed = ray.get(ref, timeout=2)
            except ray.exceptions.ActorDiedError:  # a lane actor whose jobs had ended:
                self.lanes.pop(name, None)  # its successor gets what it had not sent
                continue
            except Exception:  # restarting: try again next time
                continue
            for seq, args in self.unconfirmed[name].settle(incarnation, confirmed):
                if name == HUB:
                    handle.ingest.remote(args, seq)
                else:
                    handle.ingest.remote(*args, seq, self.job_id)

    def finish(self, identity: Identity, timeout: float) -> None:
        """The lanes' flush and the hub's last push, within ``timeout`` in all."""
        end = time.monotonic() + timeout
        ident = [identity.project, identity.experiment_name]
        refs = [h.flush.remote(timeout, ident) for h in self.lanes.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
        ray.get(self.hub.finish_run.remote(identity.project, identity.experiment_name),
                timeout=max(0.0, end - time.monotonic()))

    def close(self, timeout: float) -> None:
        pass
