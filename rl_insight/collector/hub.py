"""What the hub does: take batches from every process, aggregate metrics per run, and
push each changed run to the server. Runs never mix: the group of a run is named by its
project and experiment_name."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from rl_insight.collector.ack import Watermarks
from rl_insight.collector.parking import Parking
from rl_insight.collector.push import OwnGroup, Sender
from rl_insight.collector.runs import Runs, merge_expositions
from rl_insight.collector.served import ServedGroups
from rl_insight.config import ClientSettings
from rl_insight.wire import paths
from rl_insight.wire.events import Batch, Identity, Metric

log = logging.getLogger(__name__)

RUN_JOB = "rl_insight"
HUB_JOB = "rl_insight_hub"


class HubCore:
    def __init__(self, sender: Sender, max_series: int = 20_000,
                 buckets: dict[str, Sequence[float]] | None = None, name: str = "hub",
                 forget_after_s: float = ClientSettings.forget_after_s) -> None:
        self.sender = sender
        self.name = name
        self.runs = Runs(max_series, buckets)
        self.jobs: dict[str, Identity] = {}
        self.received = 0
        self.dropped_by_clients = 0
        self.pushes = 0
        self.push_failures = 0
        self.batches = 0
        self.lanes: set[str] = set()
        # metrics of jobs whose run is not known yet, held until the driver names it
        self.parked = Parking(50_000)
        self.marks = Watermarks()
        # platform mode: the lane actors' series, served beside the runs' (served.py)
        self.served = ServedGroups()
        # a finished run's series, and processes silent this long, are forgotten: a hub
        # that lives for weeks of runs keeps the live ones only (client.forget_after_s)
        self.forget_after_s = forget_after_s
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        sender.on_server_restart.append(self.runs.mark_all_dirty)
        self.own = OwnGroup(sender)  # an idle hub sends nothing

    def recover(self) -> int:
        """A new hub takes the counters and gauges of every run from the server, so they
        continue across a hub restart rather than reset. Returns the series taken."""
        from prometheus_client.parser import text_string_to_metric_families

        text = self.sender.get_text(paths.METRICS)
        if not text:
            return 0
        per_run: dict[Identity, list[Metric]] = {}
        skip = {"job", "instance", "project", "experiment_name"}
        try:
            for fam in text_string_to_metric_families(text):
                if fam.type not in ("counter", "gauge"):
                    continue
                for s in fam.samples:
                    lab = s.labels
                    if lab.get("job") != RUN_JOB or not lab.get("project") or \
                            s.name.endswith("_created"):
                        continue
                    ident = Identity(lab["project"], lab.get("experiment_name", ""))
                    labels = tuple(sorted((k, v) for k, v in lab.items() if k not in skip))
                    per_run.setdefault(ident, []).append(
                        Metric(fam.type, s.name, s.value, labels, fam.documentation))
        except ValueError as exc:
            log.warning("rl-insight hub: could not read the server's metrics back: %s", exc)
            return 0
        for ident, metrics in per_run.items():
            self.runs.seed(ident, metrics)
        n = sum(len(m) for m in per_run.values())
        if n:
            log.info("rl-insight hub: continued %d series of %d runs from the server", n,
                     len(per_run))
        return n

    def register_run(self, job_id: str, identity: Identity) -> None:
        with self._lock:
            self.jobs[job_id] = identity
            parked = self.parked.take(job_id)
        if parked:
            self.runs.apply(identity, parked)

    def ingest(self, batch: Batch, seq: int = 0) -> None:
        self.marks.received(batch.process, seq)
        metrics = [m for m in batch.items if type(m) is Metric]
        ident = batch.identity
        with self._lock:
            self.batches += 1
            self.received += len(metrics)
            self.dropped_by_clients += batch.dropped
            if ident is not None and batch.job_id and batch.job_id not in self.jobs:
                self.jobs[batch.job_id] = ident  # learnt again after a hub restart
            if ident is None:
                ident = self.jobs.get(batch.job_id)
            if ident is None and metrics:  # hold them until the driver names the run
                self.dropped_by_clients += self.parked.hold(batch.job_id, metrics,
                                                            time.time())
                return
        if metrics:
            self.runs.apply(ident, metrics)

    def release_parked(self, now: float) -> None:
        """Metrics of jobs that never named their run go to ("default", <job id>)."""
        with self._lock:
            released = self.parked.expired(now)
        for job, metrics in released:
            log.warning("rl-insight hub: job %s never named its run; its metrics go to "
                        "project 'default', experiment '%s'", job, job)
            self.runs.apply(Identity("default", job or "unknown"), metrics)

    def note_lanes(self, names: Sequence[str]) -> None:
        with self._lock:
            self.lanes.update(names)

    def tick(self) -> None:
        """Push every run that changed; a failed push leaves the run dirty. When all went
        out, what was received before this tick is confirmed to its senders. One tick at a
        time (the periodic thread and a run's finish): a tick must not confirm what the
        other is still pushing."""
        with self._tick_lock:
            self._tick()

    def _tick(self) -> None:
        snapshot = self.marks.snapshot()
        self.release_parked(time.time())
        all_ok = True
        for ident, text in self.runs.take_dirty():
            ok = self.sender.push(RUN_JOB, {"project": ident.project,
                                            "experiment_name": ident.experiment_name}, text)
            with self._lock:
                self.pushes += ok
                self.push_failures += not ok
            if not ok:
                self.runs.mark_dirty(ident)
                all_ok = False
        if all_ok:
            self.marks.confirm(snapshot)
        self.forget(time.monotonic())
        own = self.own_metrics()
        if self.own.due(own) and \
                self.sender.push(HUB_JOB, {"hub": self.name}, own, replace=True):
            self.own.took(own)

    def forget(self, now: float) -> None:
        """Runs finished ``forget_after_s`` ago, their jobs and lane groups, and silent
        processes."""
        gone = set(self.runs.forget_finished(now, self.forget_after_s))
        if gone:
            with self._lock:
                self.jobs = {j: i for j, i in self.jobs.items() if i not in gone}
        self.served.forget(gone, now)
        self.marks.forget_idle(self.forget_after_s)

    def exposition(self) -> str:
        """What platform mode serves: every run's metrics and the lane actors' groups."""
        return merge_expositions([self.runs.render_all(), self.served.render()])

    def finish(self, identity: Identity) -> bool:
        """Push the run now and tell the server it finished (its groups then expire);
        the run is forgotten here ``forget_after_s`` later."""
        self.tick()
        self.runs.finish(identity, time.monotonic())
        return self.sender.post_json(paths.FINISH,
                                     {"project": identity.project,
                                      "experiment_name": identity.experiment_name})

    def stats(self) -> dict:
        runs = self.runs.stats()
        with self._lock:
            return {
                "events_received": self.received,
                "events_applied": self.runs.applied,
                "events_dropped": self.runs.dropped + self.dropped_by_clients,
                "events_dropped_by_clients": self.dropped_by_clients,
                "events_dropped_series_limit": runs["dropped_series_limit"],
                "batches": self.batches,
                "pushes": self.pushes,
                "push_failures": self.push_failures,
                "runs": runs["runs"],
                "series": runs["series"],
                "lanes": len(self.lanes),
                "jobs": len(self.jobs),
                "server_ok": self.sender.ok,
                "last_error": self.sender.last_error,
            }

    def own_metrics(self) -> str:
        s = self.stats()
        lines = []
        for key, kind, doc in (
                ("events_received", "counter", "Metric events received from processes"),
                ("events_applied", "counter", "Metric events applied to a run"),
                ("events_dropped", "counter", "Events dropped (full buffers, limits)"),
                ("pushes", "counter", "Successful pushes to the server"),
                ("push_failures", "counter", "Failed pushes to the server"),
                ("runs", "gauge", "Runs the hub aggregates"),
                ("series", "gauge", "Series the hub holds"),
                ("lanes", "gauge", "Lane actors the hub has seen")):
            name = f"rl_insight_hub_{key}" + ("_total" if kind == "counter" else "")
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name} {s[key]}"]
        return "\n".join(lines) + "\n"
