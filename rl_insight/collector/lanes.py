"""What a lane actor does: keep each lane's current state, turn finished states into
spans for Tempo, and into metrics so a state timeline can be drawn from Prometheus alone:
the state a lane holds at each push as a gauge (one state per lane at every instant:
upstream's dashboards read it), the seconds each lane spent in each state as a counter
(the timeline's source: a state shorter than a push or a scrape still adds its seconds),
and durations as histograms.

Dedicated lanes (replica lanes of any role, ``replica_<r>`` or ``<role>_replica_<r>``, and
``rank_<r>``: :mod:`rl_insight.wire.laneid`) get per-lane state gauges (the timeline, the
stuck-state alert), each labelled with the lane's ``role`` (``rollout``, ``teacher_x``,
``ranks``: the timeline groups by it). State durations are histograms per replica lane;
trainer ranks' are summed per state into one histogram labelled ``state_lane_id="ranks"``: at 4,000
ranks, per-rank histograms were 300,000 of a run's 340,000 series (bench/scale_tier.py),
while the dashboards sum rank durations per state anyway (a rank's own time per state is
in its spans). Pooled lanes (per-request, per-trajectory: thousands of ids) are
summarised per state, so their number never multiplies series either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from itertools import groupby
from operator import itemgetter

from rl_insight.collector.ack import Watermarks
from rl_insight.collector.otlp_encode import encode
from rl_insight.collector.parking import Parking
from rl_insight.collector.push import OwnGroup, Sender
from rl_insight.collector.relayed import Relayed
from rl_insight.collector.runs import Runs
from rl_insight.config import ClientSettings
from rl_insight.wire import laneid
from rl_insight.wire.attributes import LANE_ATTR, STATE_ATTR
from rl_insight.wire.events import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    Exposition,
    Identity,
    Metric,
    Span,
    StateChange,
)

log = logging.getLogger(__name__)

LANE_JOB = "rl_insight_lanes"
STATE_GAUGE = "rl_insight_monitor_lane_state"
# when the lane entered its current state (unix seconds; 0 when not in it): how long a
# replica has been stuck is `time() - since`, which a 0/1 gauge cannot tell
STATE_SINCE = "rl_insight_monitor_lane_state_since_seconds"
# self seconds each dedicated lane spent in each state, the state holding the lane counted
# up to each push: the timeline shows each lane's state with the most seconds per interval
STATE_SECONDS = "rl_insight_monitor_lane_state_seconds_total"
STATE_SECONDS_DOC = ("Seconds the lane spent in the state (self time: not while a state "
                     "nested in it held the lane), the state it is in counted up to now")
IN_STATE = "rl_insight_monitor_lanes_in_state"
DURATION = "rl_insight_monitor_state_duration_seconds"
DURATION_DOC = ("Time spent in each state, per lane: self time, without the time of "
                "states nested in it on the same lane")
POOLED_LANE = "other"
LANE_IDLE_S = 3600.0  # a run never finished: longer than any step a replica sleeps through
RANK_LANES = "ranks"  # the duration histogram of every trainer rank lane
MAX_RANK_PROCESSES = 4096  # rank lanes whose process a node's actor remembers (a node: 8-16)


def duration_lane(lane: str) -> str:
    """The ``state_lane_id`` a lane's state durations are counted under."""
    kind = laneid.classify(lane).kind
    if kind in (laneid.REPLICA, laneid.DRIVER):
        return lane
    return RANK_LANES if kind == laneid.RANK else POOLED_LANE


class _Open:
    """An open state of a dedicated lane: its self time so far, and since when its clock
    runs (it holds the lane)."""

    __slots__ = ("token", "state", "self_ns", "since_ns")

    def __init__(self, token: int, state: str, since_ns: int) -> None:
        self.token, self.state, self.self_ns, self.since_ns = token, state, 0, since_ns

    def stop(self, now_ns: int) -> int:
        """Another state takes the lane (or this one ends): add the time it held it, and
        return that time (ns)."""
        took = self.running_ns(now_ns)
        self.self_ns += took
        return took

    def running_ns(self, now_ns: int) -> int:
        """Time since its clock last started: what it adds if it stopped now."""
        return max(now_ns - self.since_ns, 0)


class LaneCore:
    def __init__(self, sender: Sender, name: str, max_pending: int = 100_000,
                 batch_size: int = 512,
                 forget_after_s: float = ClientSettings.forget_after_s) -> None:
        self.sender = sender
        self.name = name
        self.batch_size = batch_size
        self.runs = Runs(max_series=50_000)
        self.pending: deque[tuple[Identity, str, Span]] = deque(maxlen=max_pending)
        # per dedicated lane, its open states, oldest first (the last holds the lane)
        self.current: dict[tuple[Identity, str], list[_Open]] = {}
        self.in_state: dict[tuple[Identity, str], int] = {}
        # (run, lane, state) -> self seconds of its ended holds; and the counter's value
        # last pushed (never lower: a state's end heard after a push counted it as open)
        self.seconds: dict[tuple[Identity, str, str], float] = {}
        self.counted: dict[tuple[Identity, str, str], float] = {}
        self.moved: set[tuple[Identity, str, str]] = set()  # seconds added since a push
        # dedicated lanes only: pooled ones (one per request or trajectory, 100,000s in a
        # run) are summarised per state, never kept one by one
        self.lanes: set[tuple[Identity, str]] = set()
        # the process that last sent each trainer rank lane (host:pid): the one a profile
        # of that rank samples (collector/profiling.py), never any other
        self.rank_process: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        # a run is forgotten this long after its finish (client.forget_after_s), or after
        # LANE_IDLE_S without events and with no lane in a state (no finish was heard)
        self.forget_after_s = forget_after_s
        self.spans_received = 0
        self.spans_sent = 0
        self.spans_dropped = 0
        self.marks = Watermarks()
        # events of jobs whose run is not named yet (collector/parking.py), and the runs
        # named, per Ray job (forgotten with their run)
        self.parked = Parking(20_000)
        self.jobs: dict[str, Identity] = {}
        self._lock = threading.Lock()
        sender.on_server_restart.append(self.runs.mark_all_dirty)
        self.own = OwnGroup(sender)  # an idle lane actor sends nothing
        self.relayed = Relayed()  # engines' expositions (collector/relayed.py)

    def ingest(self, identity: Identity | None, process: str, items: list, seq: int = 0,
               job_id: str = "") -> bool:
        """Apply state changes and spans; returns True when a batch is ready to send. A
        process that has not learnt its run (``identity`` None) gets its job's, once some
        process of the job names it (``name_job``); until then its events are held."""
        self.marks.received(process, seq)
        if identity is None:
            with self._lock:
                identity = self.jobs.get(job_id)
                if identity is None:
                    self.spans_dropped += self.parked.hold(
                        job_id, [(process, it) for it in items], time.monotonic())
                    return False
        return self._apply(identity, process, items)

    def name_job(self, job_id: str, identity: Identity) -> bool:
        """The hub knows the job's run: what the job's processes sent before joins it,
        ahead of what they send next (held again while this applies the last)."""
        ready = False
        while True:
            with self._lock:
                held = self.parked.take(job_id)
                if not held:
                    self.jobs[job_id] = identity
                    return ready
            ready |= self._apply_held(identity, held)

    def unnamed_jobs(self) -> list[str]:
        """Jobs whose events wait for their run's name."""
        with self._lock:
            return list(self.parked.jobs)

    def _release_unnamed(self, now: float) -> None:
        with self._lock:
            released = self.parked.expired(now)
        for job, items in released:
            log.warning("rl-insight lane actor %s: job %s named no run in %.0f s; its lanes "
                        "go to project 'default', experiment '%s'", self.name, job,
                        self.parked.seconds, job or "unknown")
            self._apply_held(Identity("default", job or "unknown"), items)

    def _apply_held(self, identity: Identity, held: list) -> bool:
        """Held (process, event) pairs, in the order they came, each process's in turn."""
        ready = False
        for process, pairs in groupby(held, key=itemgetter(0)):
            ready |= self._apply(identity, process, [it for _, it in pairs])
        return ready

    def _apply(self, identity: Identity, process: str, items: list) -> bool:
        metrics = []
        relayed = False
        with self._lock:
            for item in items:
                if type(item) is Exposition:
                    self.relayed.put(identity, item)
                    relayed = True
                elif type(item) is StateChange:
                    metrics += self._state(identity, item)[0]
                elif type(item) is Span:
                    own_ns = None
                    if item.ends_state and item.lane is not None:
                        changes, own_ns = self._state(identity, StateChange(
                            item.lane, item.name, item.end_ns, False, item.span_id))
                        metrics += changes
                    self.spans_received += 1
                    if len(self.pending) == self.pending.maxlen:
                        self.spans_dropped += 1
                    self.pending.append((identity, process, item))
                    if item.lane is not None:
                        self._note_lane(identity, item.lane)
                        if item.ends_state and laneid.is_rank(item.lane):
                            self._note_rank(identity, item.lane, process)
                        lane = duration_lane(item.lane)
                        took = item.end_ns - item.start_ns if own_ns is None else own_ns
                        metrics.append(_metric(HISTOGRAM, DURATION, took / 1e9,
                                               lane, item.name, DURATION_DOC))
            ready = len(self.pending) >= self.batch_size
        if metrics or relayed:  # a relayed engine's run is known, and forgotten, here too
            self.runs.apply(identity, metrics)
        return ready

    def _note_rank(self, identity: Identity, lane: str, process: str) -> None:
        key = (identity.project, identity.experiment_name, lane)
        self.rank_process[key] = process
        self.rank_process.move_to_end(key)
        while len(self.rank_process) > MAX_RANK_PROCESSES:
            self.rank_process.popitem(last=False)

    def process_of(self, project: str, experiment: str, lane: str) -> str | None:
        """The process that sent spans of that rank lane of that run here, if any."""
        with self._lock:
            return self.rank_process.get((project, experiment, lane))

    def _state(self, identity: Identity, ch: StateChange) -> tuple[list, int | None]:
        """A lane holds one state at a time. Nested or overlapping states on one lane
        stack: the newest open state is the lane's state; when it ends, the lane
        returns to the newest state still open. A state's time is its self time: while
        a state nested in it holds the lane, that one's clock runs, not its own (so a
        lane's state times add up to its busy time, as verl's actor_update around
        train_batch on one rank's lane). Returns the metrics that changed and, for an
        ending state, its self time (ns; None when its start was not seen)."""
        key = (identity, ch.lane)
        self._note_lane(identity, ch.lane)
        if not laneid.is_dedicated(ch.lane):
            sk = (identity, ch.state)
            n = max(self.in_state.get(sk, 0) + (1 if ch.entering else -1), 0)
            self.in_state[sk] = n
            return [_metric(GAUGE, IN_STATE, float(n), None, ch.state,
                            "Pooled lanes (per request or trajectory) in each state")], None
        stack = self.current.setdefault(key, [])
        top = stack[-1].state if stack else None
        own_ns = None
        if ch.entering:
            if stack:  # the state it interrupts stops its clock
                self._held(identity, ch.lane, stack[-1], ch.time_ns)
            stack.append(_Open(ch.token, ch.state, ch.time_ns))
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].state == ch.state and (not ch.token or stack[i].token == ch.token):
                    ended = stack.pop(i)
                    if i == len(stack):  # it held the lane: its clock ran until now
                        self._held(identity, ch.lane, ended, ch.time_ns)
                        if stack:  # the state it interrupted holds the lane again
                            stack[-1].since_ns = ch.time_ns
                    own_ns = ended.self_ns
                    break
            if not stack:
                del self.current[key]
        new_top = stack[-1].state if stack else None
        out = []
        if top != new_top:
            if top is not None:
                out.append(_metric(GAUGE, STATE_GAUGE, 0.0, ch.lane, top, ""))
                out.append(_metric(GAUGE, STATE_SINCE, 0.0, ch.lane, top, ""))
            if new_top is not None:
                out.append(_metric(GAUGE, STATE_GAUGE, 1.0, ch.lane, new_top,
                                   "1 while the lane is in the state, else 0: one state "
                                   "per lane at every push"))
                out.append(_metric(GAUGE, STATE_SINCE, ch.time_ns / 1e9, ch.lane, new_top,
                                   "When the lane entered the state it is in (unix "
                                   "seconds); 0 while it is in another"))
        return out, own_ns

    def _held(self, identity: Identity, lane: str, state: _Open, now_ns: int) -> None:
        """``state`` stops holding the lane at ``now_ns``: its seconds join its counter."""
        key = (identity, lane, state.state)
        self.seconds[key] = self.seconds.get(key, 0.0) + state.stop(now_ns) / 1e9
        self.moved.add(key)

    def _counters(self, now_ns: int) -> dict[Identity, list]:
        """The seconds counters that moved since the last push, the state holding each
        lane counted up to ``now_ns``; never lower than a value already pushed."""
        with self._lock:
            value = {k: self.seconds[k] for k in self.moved}
            self.moved = set()
            for (identity, lane), stack in self.current.items():
                if stack:
                    key = (identity, lane, stack[-1].state)
                    value[key] = self.seconds.get(key, 0.0) + \
                        stack[-1].running_ns(now_ns) / 1e9
            out: dict[Identity, list] = {}
            for key, v in value.items():
                last = self.counted.get(key)
                if last is not None and v <= last:
                    continue
                self.counted[key] = v
                identity, lane, state = key  # a counter's metric is its increment
                out.setdefault(identity, []).append(_metric(
                    COUNTER, STATE_SECONDS, v - (last or 0.0), lane, state, STATE_SECONDS_DOC))
        return out

    def _note_lane(self, identity: Identity, lane: str) -> None:
        if laneid.is_dedicated(lane):
            self.lanes.add((identity, lane))

    def finish(self, identity: Identity) -> None:
        """The run ended: its series and lanes go ``forget_after_s`` later."""
        self.runs.finish(identity, time.monotonic())

    def forget(self, now: float) -> list[Identity]:
        """Runs finished ``forget_after_s`` ago, and runs idle for LANE_IDLE_S whose lanes
        hold no state: their series, lanes and pooled counts go (a lane actor lives as
        long as its job, which may see many runs; the process-local core as long as its
        process)."""
        with self._lock:
            busy = {i for (i, _), stack in self.current.items() if stack}
        gone = set(self.runs.forget_finished(now, self.forget_after_s))
        gone |= set(self.runs.forget_idle(now, LANE_IDLE_S, keep=busy.__contains__))
        if gone:
            with self._lock:
                self.lanes = {k for k in self.lanes if k[0] not in gone}
                self.in_state = {k: v for k, v in self.in_state.items() if k[0] not in gone}
                self.current = {k: v for k, v in self.current.items() if k[0] not in gone}
                self.seconds = {k: v for k, v in self.seconds.items() if k[0] not in gone}
                self.counted = {k: v for k, v in self.counted.items() if k[0] not in gone}
                self.moved = {k for k in self.moved if k[0] not in gone}
                self.jobs = {k: v for k, v in self.jobs.items() if v not in gone}
            self.relayed.forget(gone)
        self.marks.forget_idle(LANE_IDLE_S)
        return sorted(gone, key=tuple)

    def send_spans(self) -> bool:
        """Send one batch of what is pending (at most ``batch_size`` spans, oldest first);
        keep it on failure (bounded, oldest first dropped and counted). Returns True when
        a full batch is still waiting (a backlog drains without waiting for the tick)."""
        with self._lock:
            batch = [self.pending.popleft()
                     for _ in range(min(self.batch_size, len(self.pending)))]
        if not batch:
            return False
        if self.sender.spans(encode(batch)):
            with self._lock:
                self.spans_sent += len(batch)
                return len(self.pending) >= self.batch_size
        with self._lock:  # put them back in front, in order
            room = self.pending.maxlen - len(self.pending)
            keep = batch[len(batch) - room:] if room < len(batch) else batch
            self.spans_dropped += len(batch) - len(keep)
            self.pending.extendleft(reversed(keep))
        return False

    def push_metrics(self) -> None:
        """Every run whose lane series changed (a lane in a state: its seconds did), and
        this actor's own counters, in one request; a group the server did not take stays
        dirty for the next tick."""
        for identity, counters in self._counters(time.time_ns()).items():
            self.runs.apply(identity, counters)
        dirty = self.runs.take_dirty()
        relayed = self.relayed.take_dirty()
        own = self.own_metrics()
        if not dirty and not relayed and not self.own.due(own):
            return  # nothing changed since the server took the last push
        groups = [(LANE_JOB, {"project": ident.project,
                              "experiment_name": ident.experiment_name,
                              "lane_actor": self.name}, text, False)
                  for ident, text in dirty]
        groups += [group for _, group in relayed]
        groups.append((LANE_JOB, {"lane_actor": self.name}, own, True))
        done = self.sender.push_groups(groups)
        if done and done[-1]:
            self.own.took(own)
        done = list(done) + [False] * (len(groups) - len(done))
        for (ident, _), ok in zip(dirty, done, strict=False):
            if not ok:
                self.runs.mark_dirty(ident)
        for (key, _), ok in zip(relayed, done[len(dirty):], strict=False):
            if not ok:
                self.relayed.again(key)

    def own_metrics(self) -> str:
        s = self.stats()
        lines = []
        for key, doc in (("spans_received", "Spans this lane actor received"),
                         ("spans_sent", "Spans delivered to the server or OTLP endpoint"),
                         ("spans_dropped", "Spans dropped because the backlog was full")):
            name = f"rl_insight_lane_{key}_total"
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name} {s[key]}"]
        lines += ["# HELP rl_insight_lane_spans_pending Spans waiting to be sent",
                  "# TYPE rl_insight_lane_spans_pending gauge",
                  f"rl_insight_lane_spans_pending {s['spans_pending']}"]
        return "\n".join(lines) + "\n"

    def tick(self) -> bool:
        """One batch of spans and one request of metrics; True when a backlog of spans
        is still waiting (the caller runs again at once rather than after its tick)."""
        snapshot = self.marks.snapshot()
        self._release_unnamed(time.monotonic())
        backlog = self.send_spans()
        self.push_metrics()
        with self._lock:
            delivered = not self.pending
        if delivered and not self.runs.any_dirty():  # all received before the tick left
            self.marks.confirm(snapshot)
        self.forget(time.monotonic())
        return backlog

    def idle(self) -> bool:
        """Nothing waits to be sent: no span, no changed series, no event held for a run's
        name (a lane actor whose jobs ended stays for them)."""
        with self._lock:
            return not self.pending and not self.runs.any_dirty() and \
                not self.relayed.any_dirty() and not self.parked.jobs

    def stats(self) -> dict:
        with self._lock:
            return {"name": self.name, "lanes": len(self.lanes),
                    "spans_received": self.spans_received, "spans_sent": self.spans_sent,
                    "spans_dropped": self.spans_dropped, "spans_pending": len(self.pending),
                    "current": {f"{i.project}/{i.experiment_name}/{lane}": s[-1].state
                                for (i, lane), s in self.current.items() if s}}


def _metric(kind: str, name: str, value: float, lane: str | None, state: str,
            doc: str) -> Metric:
    """A lane series: its lane and state, and the lane's role (a replica's role, ``ranks``
    for the rank lanes' pooled durations; none for the pooled ``other`` lanes)."""
    if lane is None:
        return Metric(kind, name, value, ((STATE_ATTR, state),), doc)
    role = laneid.RANKS if lane == RANK_LANES else laneid.role_of(lane)
    labels = (("role", role), (LANE_ATTR, lane), (STATE_ATTR, state)) if role \
        else ((LANE_ATTR, lane), (STATE_ATTR, state))
    return Metric(kind, name, value, labels, doc)
