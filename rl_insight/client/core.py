"""The per-process client: identity, the event buffer, and the transport it feeds.

Every public call builds a plain event and appends it to the buffer; the buffer's
thread hands batches to the transport and, with the push backend, to the user's sinks
(rl_insight/client/push/). Nothing here waits on Ray or the network in the caller's
thread, and nothing raises into it.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections import deque

from rl_insight.client import rank_evidence
from rl_insight.client.buffer import EventBuffer
from rl_insight.client.configuration import (
    ENABLE_ENV,
    EXPERIMENT_ENV,
    OTLP_ENV,
    PROJECT_ENV,
    SERVER_URL_ENV,
    ClientConfig,
    endpoints,
    env_identity,
    load_settings,
)
from rl_insight.client.options import parse_buckets
from rl_insight.client.steps import StepClock
from rl_insight.client.transports import (
    DirectTransport,
    Transport,
    actor_config,
    ray_ready,
)
from rl_insight.config import ClientSettings
from rl_insight.wire.events import Identity

log = logging.getLogger(__name__)

__all__ = ["ENABLE_ENV", "EXPERIMENT_ENV", "OTLP_ENV", "PROJECT_ENV", "SERVER_URL_ENV",
           "Client", "endpoints", "env_identity", "load_settings", "parse_buckets"]


class Client:
    """One process's client, for one resolved configuration (``resolve``), which it takes
    whole and never changes; ``reconfigure`` swaps in a newer one. Where it sends, with
    what credential and its settings are read from the configuration it holds, never
    copied out of it."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        settings = config.client
        self.identity: Identity | None = config.identity
        self.owner = False  # this process called init() with the identity: it finishes
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self.errors = 0
        self._transport: Transport | None = None
        self._transport_lock = threading.Lock()
        self.buffer = EventBuffer(self._export, settings.buffer_max_events,
                                  settings.batch_size, settings.flush_interval_s,
                                  idle=self._upkeep)
        self.default_buckets = parse_buckets(settings.histogram_buckets)
        # per metric name: the configuration's, and what a caller's module sets for its
        # own metrics where the configuration names none (the agent loop's)
        self.bucket_map: dict[str, tuple[float, ...] | None] = dict(config.bucket_map)
        self._registrar = None
        # a run's configuration handed over before the run was named (client/runconfig.py)
        self.held_config: tuple[object, str] | None = None
        self._exit_deadline: float | None = None  # set by finish(): exit waits no longer
        self.add = self.buffer.add  # what every API call does: one O(1) append
        self.steps = StepClock(self.buffer.add)
        atexit.register(self.at_exit)
        self._recent_refs: deque = deque(maxlen=256)  # acknowledgements flush awaits
        self.fanout = None  # the push backend's sinks (push.fanout.Fanout)
        self.scrape_targets: list[tuple[list[str], object]] = []  # for a later poller
        self._start_push()
        os.register_at_fork(after_in_child=self._after_fork)

    @property
    def server_url(self) -> str:
        return self.config.server_url

    @property
    def otlp_url(self) -> str:
        return self.config.otlp_url

    @property
    def token(self) -> str:
        return self.config.token

    @property
    def settings(self) -> ClientSettings:
        """The client's settings, as its configuration holds them."""
        return self.config.settings.client

    @property
    def delivers(self) -> bool:
        """Whether events reach anything: a server, an OTLP endpoint or a sink."""
        return self.sends or self.fanout is not None

    def discard(self) -> None:
        """Undo what creating a client that delivers nothing set up (its exit hook)."""
        atexit.unregister(self.at_exit)
        self._close_push(0.0)

    @property
    def sends(self) -> bool:
        """Whether batches go to a server or an OTLP endpoint (not only to sinks)."""
        return bool(self.server_url or self.otlp_url)

    def _start_push(self) -> None:
        """The push backend's sinks and poller, when the configuration names them and
        none run; the targets registered before join the poller. Never raises."""
        if self.config.push is None or (self.fanout is not None and not self.fanout.closed):
            return
        try:
            from rl_insight.client.push import poller

            self.fanout = poller.start(self.config.push)
            if self.fanout is not None and self.fanout.poller is not None:
                for addresses, labels in self.scrape_targets:
                    self.fanout.poller.add(addresses, labels)
        except Exception:
            log.warning("rl-insight: the push backend could not start", exc_info=True)

    def _close_push(self, timeout: float) -> None:
        f = self.fanout
        if f is not None:
            try:
                f.close(timeout)
            except Exception:
                log.warning("rl-insight: closing the push sinks failed", exc_info=True)

    def reconfigure(self, config: ClientConfig) -> None:
        """A newer configuration (a later ``init(config=...)``), taken whole in place of
        the one held: its settings and bounds, handed to the buffer and the histograms
        made from them. Where it sends stays: the transport is running."""
        from dataclasses import replace

        old = self.config
        self.config = replace(config, server_url=old.server_url, otlp_url=old.otlp_url,
                              token=old.token)
        s = self.settings
        self.default_buckets = parse_buckets(s.histogram_buckets)
        self.bucket_map.update(config.bucket_map)
        self.buffer.configure(s.buffer_max_events, s.batch_size, s.flush_interval_s)
        self._start_push()  # sinks named now (the trainer's init(config) after a worker's)

    def _after_fork(self) -> None:
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self._transport = None

    def identity_pair(self) -> tuple[str, str] | None:
        """(project, experiment_name) of this process's run, when it knows it."""
        i = self.identity
        return (i.project, i.experiment_name) if i is not None else None

    def buckets_for(self, name: str) -> tuple[float, ...] | None:
        return self.bucket_map.get(name, self.default_buckets)

    def registrar(self):
        if self._registrar is None:
            from rl_insight.client.registration import Registrar

            self._registrar = Registrar(self.server_url, self.token,
                                        self.settings.registration_retry_max_s)
        return self._registrar

    # -- transport ------------------------------------------------------------------
    def transport(self) -> Transport:
        with self._transport_lock:
            want_ray = ray_ready()
            t = self._transport
            if t is None or t.in_ray != want_ray:
                if t is not None:
                    t.close(1.0)
                cfg = actor_config(self.settings, self.server_url, self.token, self.otlp_url)
                if self.identity is not None:  # named in the hub's repr, if it starts it
                    cfg["run"] = f"{self.identity.project}/{self.identity.experiment_name}"
                if want_ray:  # Ray's side of the boundary, loaded only when Ray is up
                    from rl_insight.ray.transport import RayTransport as kind
                else:
                    kind = DirectTransport
                t = self._transport = kind(cfg, self.process)
                if self.owner and self.identity is not None:
                    t.register_run(self.identity)
            return t

    def _upkeep(self) -> None:
        t = self._transport
        if t is not None:
            t.upkeep()

    def _export(self, items: list, dropped: int) -> None:
        f = self.fanout
        if f is not None:  # the sinks, on this (the buffer's) thread
            try:
                f.feed(self.identity, items)
            except Exception:  # never the server's loss
                log.warning("rl-insight: feeding the push sinks failed", exc_info=True)
        if not self.sends:
            return
        try:  # a rank's phases carry where it runs and its collectives' arrivals
            items = rank_evidence.enrich(items)
        except Exception:  # never the batch's loss
            log.debug("rl-insight: rank evidence not added", exc_info=True)
        self._recent_refs.extend(self.transport().export(self.identity, items, dropped))

    # -- what the API calls ----------------------------------------------------------

    def owner_key(self) -> str:
        """What this process's registrations carry, so the server can bind them to the
        run named later, by this process or another of its Ray job: the job (cluster
        session and job id: job ids repeat across clusters) inside Ray, else the process."""
        if ray_ready():
            try:
                import ray

                ctx = ray.get_runtime_context()
                return f"ray:{ctx.get_session_name()}:{ctx.get_job_id()}"
            except Exception:  # an old Ray, or not connected after all
                pass
        return f"proc:{self.process}"

    def set_identity(self, identity: Identity) -> None:
        named = identity != self.identity or not self.owner  # a run named here, anew
        self.identity = identity
        self.owner = True
        self._exit_deadline = None  # a new run: its finish() has its own deadline
        # the environment stays as it was given: children get the run explicitly
        # (rl_insight/client/handover.py: child_env, Ray's runtime_env, the site hook)
        if named:  # a run after finish(): its sinks again
            self._start_push()
        if self.sends and (self._transport is not None or ray_ready()):
            self.transport().register_run(identity)  # an actor call; it does not wait
        if self.server_url:  # targets registered before the run was named join it
            from rl_insight.wire.paths import BIND

            self.registrar().submit({"owner": self.owner_key(), "project": identity.project,
                                     "experiment_name": identity.experiment_name},
                                    BIND)
        if named:  # verl's logger names its run itself, maybe where no hook patched it
            try:
                from rl_insight.integrations import onimport

                onimport.apply_imported(onimport.framework_patches())
            except Exception:  # the run is named all the same
                log.warning("rl-insight: patching the frameworks imported here failed",
                            exc_info=True)
        held, self.held_config = self.held_config, None
        if held is not None:  # handed over before the run had its name
            from rl_insight.client import runconfig

            runconfig.hand_over(self, *held)

    def wait_registrations(self, timeout: float) -> bool:
        r = self._registrar
        return r is None or r.wait(timeout)

    def flush(self, timeout: float) -> bool:
        """Hand everything buffered to the hub and lanes within ``timeout``; inside Ray,
        also wait (within the same deadline) until they acknowledged it."""
        end = time.monotonic() + timeout
        self.steps.flush()
        ok = self.buffer.flush(timeout)
        refs = list(self._recent_refs)
        if ok and refs:
            import ray

            left = max(0.0, end - time.monotonic())
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
            ok = len(ready) == len(refs)
        return ok

    def finish(self, timeout: float) -> None:
        """Flush, registrations and the run's end within one ``timeout``, however slow
        or absent the server; interpreter exit then waits only for what is left of it."""
        if self._exit_deadline is None:  # calls after the first share its deadline
            self._exit_deadline = time.monotonic() + timeout
        end = self._exit_deadline

        def left() -> float:
            return max(0.0, end - time.monotonic())

        self.flush(left())
        self._close_push(left())  # as upstream's finish(): the poller stops, sinks close
        if not self.wait_registrations(left()):
            log.warning("rl-insight: target registrations were not delivered within %.1fs; "
                        "is the server at %s reachable? (if it is busy, raise "
                        "RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S)", timeout, self.server_url)
        if self.sends and self.owner and self.identity is not None and left() > 0:
            try:
                self.transport().finish(self.identity, left())
            except Exception as exc:
                log.warning("rl-insight: finishing the run failed: %s", exc)

    def at_exit(self) -> None:
        try:
            budget = self.settings.exit_flush_timeout_s
            if self._exit_deadline is not None:  # finish() ran: its deadline holds here too
                budget = min(budget, max(0.0, self._exit_deadline - time.monotonic()))
            end = time.monotonic() + budget

            def left() -> float:
                return max(0.0, end - time.monotonic())

            self.steps.flush()
            if not self.buffer.shutdown(budget):
                log.warning("rl-insight: not every event was handed over within the %.1f s "
                            "exit deadline; the rest is lost. If the server at %s is busy, "
                            "raise RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S", budget,
                            self.server_url)
            self._close_push(left())
            if not self.wait_registrations(left()):
                log.warning("rl-insight: target registrations were not delivered before "
                            "exit; is the server at %s reachable? (if it is busy, raise "
                            "RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S)", self.server_url)
            if isinstance(self._transport, DirectTransport):
                self._transport.close(left())
        except Exception:
            pass
