"""The client's transport inside Ray: metric events to the hub, lane events to the lane
actors (a replica's own, or the one of this process's node), one actor call per batch
and actor; what an actor has not confirmed is kept and sent again when it restarts, or
to its successor when it had exited. Implements
``rl_insight.client.transports.Transport``."""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from rl_insight.client import self_profile
from rl_insight.client.transports import HUB, split
from rl_insight.collector.ack import Unconfirmed
from rl_insight.collector.parking import PARK_S
from rl_insight.ray import actors
from rl_insight.wire.events import Batch, Identity

log = logging.getLogger(__name__)


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
        self._first_lookup: float | None = None
        budget = config["resend_max_events"]
        self.unconfirmed: dict[str, Unconfirmed] = {}
        self._budget = budget
        self._next_settle = 0.0

    def register_run(self, identity: Identity) -> None:
        self.hub.register_run.remote(self.job_id, identity.project, identity.experiment_name)

    def resolve(self, identity: Identity | None) -> Identity | None:
        """A process without its own identity takes its job's, as the driver told the hub.
        Asked without waiting (a busy hub answers late), the answer taken by a later call;
        until then the hub and the lane actors file the events by job (collector/parking.py)."""
        if identity is not None:
            return identity
        if self._identity_cache is not None:
            return self._identity_cache
        if self._lookup is not None and ray.wait([self._lookup], timeout=0)[0]:
            ref, self._lookup = self._lookup, None
            try:
                found = ray.get(ref, timeout=0)
            except Exception:  # the hub restarting: asked again
                found = None
            if found:
                self._identity_cache = Identity(*found)
        if self._lookup is None and self._identity_cache is None and \
                time.monotonic() >= self._next_lookup:
            now = time.monotonic()
            if self._first_lookup is None:
                self._first_lookup = now
            # every 5 s while the receivers hold the job's events for its name, then as
            # often as they wait (a job that names no run: 1,000 ranks, not 200 calls a second)
            self._next_lookup = now + (5.0 if now - self._first_lookup < PARK_S else PARK_S)
            self._lookup = self.hub.identity_for_job.remote(self.job_id)
        return self._identity_cache

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
        refs = []
        hub_log = self._pending(HUB)
        dropped += hub_log.overflow - getattr(self, "_overflow_reported", 0)
        self._overflow_reported = hub_log.overflow
        if metrics or dropped:
            batch = Batch(ident, self.job_id, self.process, metrics, dropped)
            seq = hub_log.add(len(metrics), batch)
            refs.append(self.hub.ingest.remote(batch, seq))
        grouped: dict[str, list] = {}
        for lane, its in by_lane.items():
            name = self.actors.lane_actor_name(lane or "", self.node_id)
            grouped.setdefault(name, []).extend(its)
        for name, its in grouped.items():
            args = (ident, self.process, its)  # None: the lane actor files it by job
            seq = self._pending(name).add(len(its), args)
            refs.append(self._lane(name).ingest.remote(*args, seq, self.job_id))
        self.settle()
        return refs

    def upkeep(self) -> None:
        """Between batches: settle what the actors have not confirmed yet."""
        if any(u.items for u in self.unconfirmed.values()):
            self.settle()

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
                got = ray.get(ref, timeout=2)
                incarnation, confirmed = got[0], got[1]
                for ask in got[2] if len(got) > 2 else ():  # profile yourself (py-spy
                    self_profile.answer(ask, handle.profile_answer.remote)  # could not)
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
