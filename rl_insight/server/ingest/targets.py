"""Registered scrape targets: validated, persisted with atomic writes, and written out as
Prometheus file-based service discovery (one file per job), so they survive restarts
of the server and of Prometheus alike."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rl_insight.common import netaddr
from rl_insight.common.files import migrated, read_state_json, write_atomic
from rl_insight.server.ingest.store import Store
from rl_insight.wire import laneid

RESERVED_LABELS = ("project", "experiment_name", "job")
# the discovery files are written at most this often during a long burst of changes
# (start_writer); Prometheus re-reads them every 5 s (services/prometheus.py)
WRITE_GAP_S = 1.0
HARDWARE_JOBS = ("node-exporter", "dcgm-exporter", "npu-exporter")
OWNER_RE = re.compile(r"^[a-zA-Z0-9_.:@/+-]{1,256}$")
JOB_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$")
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
                         r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$")


class TargetError(ValueError):
    """Invalid registration; the message names the offending field. ``status`` is the
    HTTP answer (the server's one handler for these errors uses it)."""

    status = 400


class TargetRefused(TargetError):
    """Well-formed, but the server cannot keep it as it is (what to send instead)."""

    status = 422


class TargetNotAllowed(TargetError):
    """Outside server.allowed_networks."""

    status = 403


@dataclass(frozen=True, slots=True)  # slots: one object the collector walks, not two
class Target:
    job_name: str
    target: str
    labels: tuple[tuple[str, str], ...]
    project: str = ""
    experiment_name: str = ""
    # who registered it (``ray:<session>:<job>`` or ``proc:<host>:<pid>``): a target
    # registered before its run was named is bound to the run its owner names later
    owner: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.job_name, self.target, self.project, self.experiment_name)

    def sd_labels(self) -> dict[str, str]:
        """The labels Prometheus attaches: job, identity, then the target's own; an
        engine's ``replica`` also names its ``role`` (verl registers the policy's replicas
        as ``{"replica": 0}``, a teacher's as ``{"replica": "teacher_x_0"}``), so the
        dashboards show a teacher's engines apart from the policy's."""
        out = {"job": self.job_name}
        if self.project:
            out["project"] = self.project
        if self.experiment_name:
            out["experiment_name"] = self.experiment_name
        own = dict(self.labels)
        if "replica" in own and "role" not in own:
            role = laneid.engine_role(own["replica"])
            if role:
                out["role"] = role
        out.update(own)
        return out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = dict(self.labels)
        return d


def validate_hostport(text: str) -> str:
    """``host:port`` (IPv6 in brackets); nothing else: no scheme, path or credentials."""
    if not isinstance(text, str) or not text:
        raise TargetError(f"target {text!r}: expected 'host:port'")
    if "://" in text or "/" in text or "@" in text or "?" in text or "#" in text:
        raise TargetError(f"target {text!r}: only host:port is allowed (no scheme, path, "
                          "query or credentials)")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise TargetError(f"target {text!r}: expected '[ipv6]:port'")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise TargetError(f"target {text!r}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port = text.rpartition(":")
        if not sep or not host:
            raise TargetError(f"target {text!r}: expected 'host:port'")
        if ":" in host:
            raise TargetError(f"target {text!r}: put an IPv6 address in brackets, "
                              "'[addr]:port'")
        if not HOSTNAME_RE.match(host):
            raise TargetError(f"target {text!r}: {host!r} is not a valid host name or address")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise TargetError(f"target {text!r}: the port must be a number 1..65535")
    return text


@dataclass(frozen=True)
class Resolution:
    registered: str  # what the caller sent
    target: str  # what is kept
    peer: str


def resolve_local(targets: Sequence[Target], peer: str | None, proxied: bool
                  ) -> tuple[list[Target], list[Resolution]]:
    """Targets that name the registering machine itself (127.0.0.1, ::1, 0.0.0.0,
    localhost) are kept as they are when that machine is the server's (Prometheus runs
    here), and rewritten to the peer's address when the caller is elsewhere: the engine
    listens on the caller's host. Refused when the peer address is not the caller's (a
    proxy in between) or unknown, with what to register instead."""
    out, notes = [], []
    peer_ip = None
    if peer:
        try:
            peer_ip = ipaddress.ip_address(peer.split("%")[0])
        except ValueError:
            peer_ip = None
    for t in targets:
        host, port = netaddr.split_host_port(t.target)
        if not netaddr.is_local_host(host) or (peer_ip is not None and peer_ip.is_loopback
                                       and not proxied):
            out.append(t)
            continue
        if peer_ip is None or proxied or peer_ip.is_unspecified:
            raise TargetRefused(
                f"target {t.target!r} names the registering machine itself, and the server "
                "cannot tell which machine that is (the request came through a proxy or "
                "from an unknown address); register the address Prometheus on the "
                "monitoring host can reach, e.g. the node's IP (ray.util.get_node_ip_"
                "address()) with the port")
        resolved = netaddr.join_host_port(str(peer_ip), int(port))
        out.append(replace(t, target=resolved))
        notes.append(Resolution(t.target, resolved, str(peer_ip)))
    return out, notes


class LocalTargetLog:
    """How many registrations named the registering machine itself, and what became of
    them (rewritten to the caller's address, or refused), with the latest few: `doctor`,
    the status page and the server's metrics report them."""

    def __init__(self, keep: int = 20) -> None:
        from collections import deque

        self.rewritten = 0
        self.refused = 0
        self.recent: deque[dict] = deque(maxlen=keep)

    def note(self, resolutions: Sequence[Resolution]) -> None:
        for r in resolutions:
            self.rewritten += 1
            self.recent.append({"registered": r.registered, "target": r.target,
                                "peer": r.peer, "outcome": "rewritten", "at": time.time()})

    def refuse(self, peer: str | None, why: str) -> None:
        self.refused += 1
        self.recent.append({"peer": peer or "", "outcome": "refused", "reason": why,
                            "at": time.time()})

    def report(self) -> dict:
        return {"rewritten": self.rewritten, "refused": self.refused,
                "recent": list(self.recent)}


def describe_local_targets(log: dict) -> str:
    """One sentence on a ``LocalTargetLog.report()`` (empty when nothing happened), for
    `doctor` and the status page alike."""
    if not log.get("rewritten") and not log.get("refused"):
        return ""
    last = (log.get("recent") or [{}])[-1]
    latest = (f"latest: {last.get('registered')} from {last.get('peer')}, kept as "
              f"{last.get('target')}" if last.get("outcome") == "rewritten"
              else f"latest refused: {last.get('reason', '')}")
    return (f"{log.get('rewritten', 0)} target(s) named the registering machine itself "
            "(127.0.0.1, 0.0.0.0, localhost) and were kept under the caller's address, "
            f"{log.get('refused', 0)} refused; {latest}")


def parse_networks(spec: str) -> list:
    """``10.0.0.0/8, fd00::/8`` into network objects; a bad entry is a config error."""
    nets = []
    for part in (p.strip() for p in spec.split(",")):
        if part:
            try:
                nets.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise TargetError(f"server.allowed_networks: {part!r} is not a network "
                                  "like 10.0.0.0/8") from None
    return nets


def check_allowed(target: str, networks: list) -> None:
    """Refuse a target whose host resolves outside the allowed networks."""
    if not networks:
        return
    import socket

    host = netaddr.split_host_port(target)[0]
    try:
        addrs = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            addrs = {ipaddress.ip_address(a[4][0].split("%")[0])
                     for a in socket.getaddrinfo(host, None)}
        except OSError:
            raise TargetError(f"target {target!r}: {host!r} does not resolve, so it cannot "
                              "be checked against server.allowed_networks") from None
    outside = [str(a) for a in addrs if not any(a in n for n in networks)]
    if outside:
        raise TargetNotAllowed(f"target {target!r} ({', '.join(outside)}) is outside "
                          "server.allowed_networks; register targets in the cluster's "
                          "networks or extend the setting")


def parse_owner(value: Any) -> str:
    """The optional ``owner`` of a registration or binding: a short printable key."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not OWNER_RE.match(value):
        raise TargetError(f"owner {value!r}: expected a key like 'ray:<session>:<job id>' "
                          "(at most 256 of a-z A-Z 0-9 _ . : @ / + -)")
    return value


class TargetStore:
    """Targets keyed by (job, target, project, experiment); thread-safe. Kept in the
    server's database, each change committed before it is answered; the discovery files
    Prometheus reads are written from memory after the commit, outside the database's
    lock (their fsyncs never hold up the intake), a burst of changes in a few writes."""

    MAX_BINDINGS = 10_000

    def __init__(self, store: Store, sd_dir: Path,
                 hidden: Callable[[str, str], bool] = lambda p, e: False,
                 unbound_grace_s: float = 60.0, legacy_dir: Path | None = None) -> None:
        self.store = store
        self.legacy_dir = legacy_dir  # where targets.json and bindings.json were kept
        self.sd_dir = sd_dir
        self.hidden = hidden  # (project, experiment) -> not to be scraped (archived)
        # a target whose owner has not named its run yet waits this long before it is
        # scraped without a run, so its series start under the run in the usual order
        self.unbound_grace_s = unbound_grace_s
        self._targets: dict[tuple, Target] = {}
        self._registered_at: dict[tuple, float] = {}
        self._bindings: dict[str, tuple[str, str]] = {}  # owner -> (project, experiment)
        self._waiting = False  # some target is held back awaiting its run
        self._lines: dict[Target, str] = {}  # each shown target's line (_visible)
        self._lock = threading.RLock()
        # discovery files: the change generation wanted and the one on disk; one writer
        # at a time, and a writer that finds a newer generation written skips
        self._sd_wanted = 0
        self._sd_written = 0
        self._sd_lock = threading.Lock()
        self._sd_wake: threading.Event | None = None  # set: a writer thread writes them

    def load(self) -> int:
        rows = self.store.read(lambda db: db.execute("SELECT row FROM targets").fetchall())
        bindings = self.store.read(lambda db: db.execute(
            "SELECT owner, project, experiment_name FROM bindings ORDER BY seq").fetchall())
        self._bindings = {o: (p, e) for o, p, e in bindings}
        for (row,) in rows:
            self._add(json.loads(row))
        if self.legacy_dir is not None:
            self._migrate(self.legacy_dir)
        self.write_sd()
        return len(self._targets)

    def _add(self, d: Mapping[str, Any]) -> Target:
        t = Target(d["job_name"], d["target"], tuple(sorted(d["labels"].items())),
                   d.get("project", ""), d.get("experiment_name", ""), d.get("owner", ""))
        self._targets[t.key] = t
        self._registered_at[t.key] = d.get("registered_at", 0.0)
        return t

    def _migrate(self, directory: Path) -> None:
        """targets.json and bindings.json of earlier versions, read in once."""
        files = directory / "targets.json", directory / "bindings.json"
        rows = read_state_json(files[0], [])
        bindings = read_state_json(files[1], {})
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            for o, b in bindings.items():
                self._bindings.setdefault(o, (b[0], b[1]))
            fresh = [self._add(d) for d in rows]
            self._store_bindings(db, list(self._bindings))
            self._store(db, fresh, [])
        for path, n in zip(files, (len(rows), len(bindings)), strict=True):
            if path.exists():
                migrated(path, n, self.store.path)

    def _store(self, db, upserts: Iterable[Target], deletes: Iterable[tuple]) -> None:
        db.executemany("DELETE FROM targets WHERE key = ?",
                       [(json.dumps(k),) for k in deletes])
        db.executemany("INSERT OR REPLACE INTO targets VALUES (?, ?)", [
            (json.dumps(t.key), json.dumps({**t.as_dict(),
                                            "registered_at": self._registered_at.get(t.key)}))
            for t in upserts])

    def _store_bindings(self, db, owners: Iterable[str]) -> None:
        """Each owner's binding as it is now (moved to the newest end), the evicted gone."""
        for owner in owners:
            db.execute("DELETE FROM bindings WHERE owner = ?", (owner,))
            if owner in self._bindings:
                db.execute("INSERT INTO bindings (owner, project, experiment_name) "
                           "VALUES (?, ?, ?)", (owner, *self._bindings[owner]))

    def register(self, targets: Sequence[Target]) -> int:
        """Add or update; returns how many changed. Idempotent for the same input. A
        target without a run whose owner already named one is bound to it."""
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            now = time.time()
            changed = {}
            for t in targets:
                t = self._bound(t)
                if self._targets.get(t.key) != t:
                    changed[t.key] = t
            if not changed:
                return 0
            self._undoable(changed)
            for k in changed:
                self._registered_at.setdefault(k, now)
            self._store(db, changed.values(), [])
            self._targets.update(changed)
            for t in changed.values():  # here, a burst's lines are made as it arrives
                self._lines.setdefault(t, sd_line(t))  # (not all in the files' next write)
        self.store.after_commit(self.changed)  # in a group commit: once it is stored
        return len(changed)

    def _undoable(self, keys: Iterable[tuple], bindings: bool = False) -> None:
        """Memory of these keys (and the bindings) as it is now, put back if the
        transaction is rolled back (its COMMIT failed): what Prometheus is shown and
        what is listed stay what the database holds. Call inside the transaction."""
        targets = {k: self._targets.get(k) for k in keys}
        registered = {k: self._registered_at.get(k) for k in keys}
        before = dict(self._bindings) if bindings else None

        def undo() -> None:
            with self._lock:
                for k, t in targets.items():
                    if t is None:
                        self._targets.pop(k, None)
                    else:
                        self._targets[k] = t
                    if registered[k] is None:
                        self._registered_at.pop(k, None)
                    else:
                        self._registered_at[k] = registered[k]
                if before is not None:
                    self._bindings = before
        self.store.on_rollback(undo)

    def _bound(self, t: Target) -> Target:
        if t.project or not t.owner or t.owner not in self._bindings:
            return t
        project, experiment = self._bindings[t.owner]
        return replace(t, project=project, experiment_name=experiment)

    def bind(self, owner: str, project: str, experiment_name: str) -> list[Target]:
        """The owner's run is named: its targets without a run move to that run, and so
        do the ones it registers later. Returns the targets that moved."""
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            moves = [(key, replace(t, project=project, experiment_name=experiment_name))
                     for key, t in self._targets.items() if t.owner == owner and not t.project]
            self._undoable([k for move in moves for k in (move[0], move[1].key)],
                           bindings=True)
            self._bindings.pop(owner, None)
            self._bindings[owner] = (project, experiment_name)
            evicted = []
            while len(self._bindings) > self.MAX_BINDINGS:  # the oldest go first
                evicted.append(next(iter(self._bindings)))
                self._bindings.pop(evicted[-1])
            at = {new.key: self._registered_at.get(key, time.time()) for key, new in moves}
            self._registered_at.update(at)  # what _store writes for the moved targets
            self._store_bindings(db, [*evicted, owner])
            self._store(db, [new for _, new in moves], [key for key, _ in moves])
            for key, new in moves:
                del self._targets[key]
                self._registered_at.pop(key, None)
                self._targets[new.key] = new
                self._registered_at[new.key] = at[new.key]
        if moves:
            self.store.after_commit(self.changed)  # in a group commit: once it is stored
        return [new for _, new in moves]

    def binding(self, owner: str) -> tuple[str, str] | None:
        with self._lock:
            return self._bindings.get(owner)

    def awaiting_run(self, t: Target, now: float) -> bool:
        """Held back from discovery: registered by an owner whose run is not named yet,
        within the grace period."""
        return bool(t.owner and not t.project and
                    now - self._registered_at.get(t.key, 0.0) < self.unbound_grace_s)

    def publish_due(self) -> None:
        """Called periodically: targets whose grace ran out join discovery unbound."""
        if self._waiting:
            self.write_sd()

    def remove(self, targets: Sequence[Target]) -> int:
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            # a body may name one target twice: removed once
            gone = list(dict.fromkeys(t.key for t in targets if t.key in self._targets))
            if not gone:
                return 0
            self._undoable(gone)
            self._store(db, [], gone)
            for k in gone:
                del self._targets[k]
                self._registered_at.pop(k, None)
        self.store.after_commit(self.changed)  # in a group commit: once it is stored
        return len(gone)

    def list(self, project: str | None = None, experiment_name: str | None = None
             ) -> list[dict]:
        with self._lock:
            rows = []
            for k, t in sorted(self._targets.items()):
                if project is not None and t.project != project:
                    continue
                if experiment_name is not None and t.experiment_name != experiment_name:
                    continue
                rows.append({**t.as_dict(), "registered_at": self._registered_at.get(k),
                             "awaiting_run": self.awaiting_run(t, time.time())})
            return rows

    def sd_groups(self) -> list[dict]:
        """One service-discovery group ``{targets, labels}`` per target Prometheus is to
        scrape (archived runs and targets awaiting their run left out), sorted: the one
        source of both the managed Prometheus' file_sd and the http_sd route."""
        return [json.loads(line) for _, line in self._visible()[0]]

    def _visible(self) -> tuple[list[tuple[Target, str]], bool]:
        """Each target to scrape with its group's JSON line, in the order of the lines
        (stable: files that did not change are not written again); and whether some
        target is held back awaiting its run. A target's line is made once (they are
        immutable), not again for every write of the files that list it."""
        with self._lock:
            shown, waiting = [], False
            now = time.time()
            for t in self._targets.values():
                if t.project and self.hidden(t.project, t.experiment_name):
                    continue
                if self.awaiting_run(t, now):
                    waiting = True
                    continue
                shown.append(t)
        known, lines = self._lines, {}
        for t in shown:
            line = known.get(t)
            lines[t] = line if line is not None else sd_line(t)
        self._lines = lines  # what is not shown any more is forgotten
        return sorted(lines.items(), key=lambda item: item[1]), waiting

    def changed(self) -> None:
        """After a committed change (never inside the transaction: the files' fsyncs
        would hold the database's lock, and a rolled-back change would be shown): the
        discovery files, written once for however many changes came meanwhile."""
        with self._lock:
            self._sd_wanted += 1
            wanted = self._sd_wanted
        if self._sd_wake is not None:
            self._sd_wake.set()  # the writer thread's (start_writer)
            return
        with self._sd_lock:
            if self._sd_written >= wanted:
                return  # a writer after this change wrote it
            self._write_sd()

    def start_writer(self, stop: threading.Event, delay_s: float) -> threading.Thread:
        """From now on the discovery files are written by a thread of their own,
        ``delay_s`` after a change, once for every change meanwhile: a burst of
        registrations is answered as fast as its commits, not a file write each (the
        files list every target of a job: one write each would make a burst of n
        registrations write n times n targets). Prometheus re-reads them within its
        file_sd refresh anyway."""
        from rl_insight.server.threads import supervised

        wake = self._sd_wake = threading.Event()

        def body() -> None:
            last = 0.0
            while not stop.is_set():
                if not wake.wait(0.5):
                    continue
                # the rest of the burst; in a long one, a write a second at most (each
                # lists every target of a job)
                stop.wait(max(delay_s, last + WRITE_GAP_S - time.monotonic()))
                wake.clear()
                with self._sd_lock:
                    if self._sd_written < self._sd_wanted:
                        self._write_sd()
                        last = time.monotonic()

        thread = supervised("rl-insight-discovery", body, stop)
        thread.start()
        return thread

    def write_sd(self) -> None:
        """One file_sd JSON per job; files of jobs with no visible target are removed."""
        with self._sd_lock:
            self._write_sd()

    def _write_sd(self) -> None:
        """The files from memory as it is now; the caller holds ``_sd_lock``."""
        with self._lock:
            generation = self._sd_wanted
            shown, self._waiting = self._visible()
        by_job: dict[str, list[str]] = {}
        for t, line in shown:
            by_job.setdefault(t.job_name, []).append(line)
        self.sd_dir.mkdir(parents=True, exist_ok=True)
        wanted = {sd_file_name(job): lines for job, lines in by_job.items()}
        for name, lines in wanted.items():
            path = self.sd_dir / name
            text = "[\n" + ",\n".join(lines) + "\n]\n"  # one target group a line
            if not path.exists() or path.read_text() != text:
                write_atomic(path, text)
        for path in self.sd_dir.glob("*.json"):
            if path.name not in wanted:
                path.unlink(missing_ok=True)
        self._sd_written = max(self._sd_written, generation)


def sd_line(t: Target) -> str:
    """A target's group in the discovery files and the http_sd route, as JSON."""
    return json.dumps({"targets": [t.target], "labels": t.sd_labels()})


def sd_file_name(job: str) -> str:
    """A file name per job that is safe and unique even for similar job names."""
    safe = re.sub(r"[^a-zA-Z0-9_-]", "_", job)
    return f"{safe}-{hashlib.sha1(job.encode()).hexdigest()[:8]}.json"
