"""Everything the running server holds, wired together: the supervised services, the
target, experiment and push stores, and the trace relay. Routes only read and call it."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from rl_insight.common import netaddr
from rl_insight.common.version import __version__
from rl_insight.config import Settings, duration_seconds
from rl_insight.runconfig.diff import diff as config_diff
from rl_insight.server.analyses.anatomy import AnatomyStore
from rl_insight.server.analyses.changes import ChangeStore, Prom
from rl_insight.server.analyses.comparison import Comparison
from rl_insight.server.analyses.profiles import ProfileError, ProfileStore
from rl_insight.server.endpoints import prometheus_auth, prometheus_url, relay_url
from rl_insight.server.ingest.engine_requests import RequestMetrics
from rl_insight.server.ingest.experiments import ExperimentStore
from rl_insight.server.ingest.intake import Batches
from rl_insight.server.ingest.lane_stats import LaneStats
from rl_insight.server.ingest.pushstore import PushStore
from rl_insight.server.ingest.recent import RecentSpans
from rl_insight.server.ingest.relay import Relay
from rl_insight.server.ingest.runconfigs import RunConfigStore
from rl_insight.server.ingest.spool import Spool
from rl_insight.server.ingest.store import Store
from rl_insight.server.ingest.targets import LocalTargetLog, TargetStore
from rl_insight.server.services.base import ServiceInfo
from rl_insight.server.services.prometheus import Prometheus
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.threads import supervised
from rl_insight.wire import paths
from rl_insight.wire import runconfig as config_wire

log = logging.getLogger(__name__)
# the server's full garbage collections run here, on a clock, rather than whenever
# allocations add up (lifecycle.GC_THRESHOLDS): a pause of up to 0.25 s every 10 s
# instead of every 2 s under 1,000 GPUs' lane traffic, and cyclic garbage never
# older than 10 s
FULL_GC_EVERY_S = 10.0


# a burst of registrations is written to the discovery files once, this long after its
# first change (targets.py start_writer); Prometheus re-reads them every 5 s anyway
DISCOVERY_DELAY_S = 0.2


class ServerState:
    def __init__(self, settings: Settings, supervisor: Supervisor,
                 services: dict[str, ServiceInfo] | None = None,
                 advertise_host: str = "", advertise_reason: str = "") -> None:
        self.settings = settings
        self.supervisor = supervisor
        self.services = services or {}
        self.advertise_host = advertise_host or "127.0.0.1"
        self.advertise_reason = advertise_reason
        self.other_addresses = netaddr.interface_addresses()  # once: every report has it
        self.started_at = time.time()
        state = settings.state_dir
        state.mkdir(parents=True, exist_ok=True)
        # raises StoreError (which says what to do) if damaged
        self.store = Store(state, sync=settings.server.sync_commits)
        self.experiments = ExperimentStore(self.store, legacy_file=state / "experiments.json")
        self.targets = TargetStore(self.store, Prometheus().targets_dir(settings),
                                   hidden=self.experiments.is_archived,
                                   unbound_grace_s=settings.server.unbound_target_grace_s,
                                   legacy_dir=state)
        self.local_targets = LocalTargetLog()
        self.configs = RunConfigStore(self.store, hidden=self.experiments.is_archived)
        self.pushes = PushStore(settings.push, self.store,
                                refuse=self.experiments.archived_reason,
                                legacy_dir=state / "groups")
        self.spool = Spool(self.store, settings.traces.spool_max_bytes,
                           legacy_dir=state / "spool")
        self.relay = Relay(settings.traces, self.spool, relay_url(settings))
        self.lanes = LaneStats(settings.traces.max_lanes)
        self.recent = RecentSpans()
        self.anatomy = AnatomyStore(settings.anatomy, finished=self.run_ended)
        self.changes = ChangeStore(
            settings.changes, self.anatomy.rows,
            Prom(prometheus_url(settings), prometheus_auth(settings),
                 duration_seconds(settings.prometheus.scrape_interval) or 15.0)
            if settings.prometheus.enabled else None,
            settings.anatomy.max_runs, finished=self.run_ended)
        self.anatomy.listener = self.changes.observe
        # run against run: the anatomy's rows, or Prometheus', and what changes gathers
        self.comparison = Comparison(self.anatomy.rows, self.changes.rows_from_prometheus,
                                     self.changes.gather, self._configs_diff)
        self.requests = RequestMetrics()  # rl_insight_request_*
        self.profiles = ProfileStore(settings.profiles, state / "profiles",
                                     known_lane=self.lanes.has)
        from rl_insight.server.analyses.selfmetrics import ServerMetrics

        self.metrics = ServerMetrics(self)
        self.pushes.reserved = lambda: self.metrics.types
        self._stop = threading.Event()
        self._forgotten_runs: set[tuple[str, str]] = set()  # past their grace at the last look
        self._thread = supervised("rl-insight-maintain", self._maintain, self._stop)
        self._ranking = supervised("rl-insight-changes", self._rank, self._stop)
        self._discovery: threading.Thread | None = None
        # the intake's work, in arrival order, off the event loop (server/ingest/intake.py)
        self.intake_pool = ThreadPoolExecutor(1, thread_name_prefix="rl-insight-intake")
        # every write of a request to the store (pushes, spans, registrations, bindings)
        # in the intake's group commit: one commit per batch, no request behind another's
        self.writes = Batches(self)
        # seconds between full collections: set by the server process, which tunes its
        # collector for them (lifecycle._tune_gc); a state embedded elsewhere leaves the
        # collector of its host alone
        self.full_gc_every_s: float | None = None

    def remembered(self, project: str, experiment_name: str) -> bool:
        """Not forgotten: active, or finished less than ``push.finished_ttl_s`` ago (what
        the server holds per run in memory; archived runs' it does not)."""
        e = self.experiments.get(project, experiment_name)
        if e is None or e.status == "active":
            return True
        return e.status == "finished" and e.finished_at is not None and \
            e.finished_at >= time.time() - self.settings.push.finished_ttl_s

    def _configs_diff(self, a: tuple[str, str], b: tuple[str, str]) -> dict | None:
        """Two runs' configurations told apart, where the server keeps both."""
        ra, rb = self.configs.get(*a), self.configs.get(*b)
        if ra is None or rb is None:
            return None
        return config_diff(ra[config_wire.VALUES], rb[config_wire.VALUES],
                           cut_a=ra[config_wire.CUT], cut_b=rb[config_wire.CUT])

    def run_ended(self, project: str, experiment_name: str) -> bool:
        """Finished or archived: nothing more of it is waited for."""
        e = self.experiments.get(project, experiment_name)
        return e is not None and e.status != "active"

    def open(self) -> None:
        """Recover what was persisted, then start the relay and housekeeping."""
        n_exp = self.experiments.load()
        n_targets = self.targets.load()
        n_groups = self.pushes.load()
        self.profiles.load()
        self.configs.load(live=self.remembered)
        log.info("recovered %d experiments, %d targets, %d pushed groups, %d spooled spans",
                 n_exp, n_targets, n_groups, self.spool.spans)
        self.relay.start()
        self._thread.start()
        if self.settings.changes.enabled:
            self._ranking.start()
        self._discovery = self.targets.start_writer(self._stop, DISCOVERY_DELAY_S)

    def close(self) -> None:
        self.intake_pool.shutdown(wait=True, cancel_futures=True)
        self._stop.set()
        self._thread.join(timeout=5)
        if self._ranking.is_alive():
            self._ranking.join(timeout=15)
        if self._discovery is not None:
            self._discovery.join(timeout=5)
            self.targets.write_sd()  # what the writer had not written yet
        self.relay.stop()
        self.persist()
        self.store.close()

    def persist(self) -> None:
        self.pushes.persist()
        self.experiments.persist()
        self.store.checkpoint()

    def forget_finished(self, now: float) -> None:
        """What the server keeps per lane and span of a run is dropped once the run has
        been finished for ``push.finished_ttl_s`` (as its pushed groups are): a server
        that lives for weeks of runs keeps what the live ones need."""
        runs = self.experiments.finished_before(now - self.settings.push.finished_ttl_s)
        if runs - self._forgotten_runs:  # some run's grace ended since the last look
            self.lanes.forget(runs)
            self.recent.forget(runs)
            self.requests.forget(runs)
            self.profiles.forget(runs)
            self.configs.forget(runs)
        # a finished run's changes are asked again from Prometheus (report --changes)
        self.changes.forget(lambda key: key not in runs and self.anatomy.has(key))
        # as a set: a run restored in the round another finished changes no count
        self._forgotten_runs = runs

    def _rank(self) -> None:
        """What moved with each open change, ranked from Prometheus off the request
        path (rl_insight/server/analyses/changes.py)."""
        while not self._stop.wait(self.settings.changes.rank_interval_s):
            self.anatomy.update()
            self.changes.rank_due()
            self.auto_profiles()

    def auto_profiles(self) -> None:
        """A change that lives on one rank has that rank's code profiled, once per change
        (profiles.auto; the store's rate limits hold as for any request)."""
        if not (self.settings.profiles.auto and self.settings.profiles.enabled):
            return
        on_rank = [(key, change, ranked.scope) for key, change, ranked in
                   self.changes.open_changes()
                   if ranked and ranked.scope and ranked.scope.get("rank") is not None]
        if not on_rank:
            return
        asked = {p["reason"] for p in self.profiles.list()}
        for (project, experiment), change, scope in on_rank:
            reason = f"change {change.id}"
            if reason in asked:
                continue
            try:
                self.profiles.request(project, experiment, str(scope["rank"]), reason=reason)
            except ProfileError as exc:
                log.info("no profile of rank %s of %s/%s for %s: %s", scope["rank"],
                         project, experiment, reason, exc)

    def _maintain(self) -> None:
        """Every persist_interval_s from one round's start to the next: a round that took
        seconds (a checkpoint on a slow disk, a full collection) does not hold a finished
        run's lanes for those seconds more."""
        next_gc = time.monotonic()
        every_s = self.settings.push.persist_interval_s
        started = time.monotonic()
        while not self._stop.wait(max(0.0, started + every_s - time.monotonic())):
            started = time.monotonic()
            try:
                self.pushes.expire(time.time(), self.experiments.finished_at)
                self.targets.publish_due()
                self.persist()
                self.forget_finished(time.time())
                every = self.full_gc_every_s
                if every and time.monotonic() >= next_gc:  # see lifecycle.GC_THRESHOLDS
                    next_gc = time.monotonic() + every
                    gc.collect()
            except Exception:  # housekeeping must never stop the server
                log.exception("periodic persistence failed")

    def set_experiment_status(self, project: str, experiment_name: str, status: str):
        e = self.experiments.set_status(project, experiment_name, status)
        self.targets.write_sd()  # archived targets leave (or restored ones rejoin) discovery
        return e

    # -- reports ---------------------------------------------------------------------
    def client_urls(self) -> dict[str, str]:
        base = netaddr.http_url(self.advertise_host, self.settings.server.port)
        return {  # Tempo listens on loopback only: spans come through the server
            "server_url": base,
            "metrics_push": base + paths.PUSH_JOB,
            "otlp_traces": base + paths.TRACES,
            "address_reason": self.advertise_reason,
            "other_addresses": self.other_addresses,
        }

    def services_report(self) -> dict:
        """Plain data for `status`: one entry per service, and whether all are ready."""
        from dataclasses import asdict

        running = {c.name: c for c in self.supervisor.status()}
        out = []
        for info in self.services.values():
            entry = asdict(info)
            child = running.get(info.name)
            if child is not None:
                entry.update(asdict(child))
            else:
                entry.update(state="disabled" if not info.enabled else "not installed",
                             pid=None, ready=False, restarts=0, last_exit_code=None,
                             port=None, log="")
            out.append(entry)
        needed = [e for e in out if e["state"] not in ("disabled", "not installed")]
        return {
            "server": {
                "version": __version__,
                "pid": os.getpid(),
                "port": self.settings.server.port,
                "ready": True,
                "uptime_s": round(time.time() - self.started_at, 1),
                "auth": bool(self.settings.server.token),
            },
            "services": out,
            "clients": self.client_urls(),
            "traces": {"relay_url": self.relay.url, "relay_up": self.relay.up,
                       "spooled_spans": self.spool.spans,
                       "last_error": self.relay.last_error},
            "all_ready": all(e["ready"] for e in needed),
            "local_targets": self.local_targets.report(),
            **self.upstream_keys(),
        }

    def upstream_keys(self) -> dict:
        """What upstream rl-insight 0.3.0's client reads from this answer (its
        server/http_api.py ``services``): ``otlp_port`` is where its hub exports spans,
        this server's own port here (it relays them to Tempo)."""
        s = self.settings
        return {"status": "ok", "otlp_port": s.server.port,
                "prometheus_port": s.prometheus.port if s.prometheus.enabled else None,
                "grafana_port": s.grafana.port if s.grafana.enabled else None}
