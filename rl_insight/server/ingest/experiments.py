"""Experiments, named by (project, experiment_name): first and last activity, and
whether they are active, finished or archived. An archived experiment is not scraped
and takes no new registrations or pushes until it is restored. Kept in the server's
database (one row each); a new experiment or a status change is committed before it is
answered, activity times every few seconds."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rl_insight.common.files import migrated, read_state_json
from rl_insight.server.ingest.store import Store


@dataclass
class Experiment:
    project: str
    experiment_name: str
    status: str = "active"  # active | finished | archived
    first_seen: float = 0.0
    last_seen: float = 0.0
    finished_at: float | None = None
    archived_at: float | None = None


class ExperimentStore:
    def __init__(self, store: Store, legacy_file: Path | None = None) -> None:
        self.store = store
        self.legacy_file = legacy_file  # experiments.json of earlier versions
        self._items: dict[tuple[str, str], Experiment] = {}
        self._lock = threading.RLock()
        self._dirty: set[tuple[str, str]] = set()

    def load(self) -> int:
        rows = self.store.read(lambda db: db.execute(
            "SELECT row FROM experiments").fetchall())
        for (row,) in rows:
            e = Experiment(**json.loads(row))
            self._items[(e.project, e.experiment_name)] = e
        if self.legacy_file is not None and self.legacy_file.exists():
            legacy = [Experiment(**r) for r in read_state_json(self.legacy_file, [])]
            fresh = [e for e in legacy if (e.project, e.experiment_name) not in self._items]
            self._write(fresh)
            for e in fresh:
                self._items[(e.project, e.experiment_name)] = e
            if self.legacy_file.exists():
                migrated(self.legacy_file, len(fresh), self.store.path)
        return len(self._items)

    def touch(self, project: str, experiment_name: str) -> None:
        """Note activity; a new experiment is written at once, activity lazily."""
        if not project:
            return
        now = time.time()
        key = (project, experiment_name)
        with self._lock:
            e = self._items.get(key)
            if e is not None:
                e.last_seen = now
                self._dirty.add(key)
                return
        with self.store.transaction(), self._lock:  # the lock order of store.py
            if key not in self._items:
                e = Experiment(project, experiment_name, first_seen=now, last_seen=now)
                self._write([e])
                self._items[key] = e
                self.store.on_rollback(lambda: self._forget_new(key, e))

    def _forget_new(self, key: tuple[str, str], e: Experiment) -> None:
        """Undo ``touch``'s new experiment: its write was rolled back."""
        with self._lock:
            if self._items.get(key) is e:
                del self._items[key]

    def touch_labels(self, labels: Mapping[str, str]) -> None:
        if labels.get("project") and labels.get("experiment_name"):
            self.touch(labels["project"], labels["experiment_name"])

    def get(self, project: str, experiment_name: str) -> Experiment | None:
        with self._lock:
            return self._items.get((project, experiment_name))

    def is_archived(self, project: str, experiment_name: str) -> bool:
        e = self.get(project, experiment_name)
        return e is not None and e.status == "archived"

    def archived_reason(self, labels: Mapping[str, str]) -> str | None:
        p, e = labels.get("project", ""), labels.get("experiment_name", "")
        if p and self.is_archived(p, e):
            return (f"experiment {p}/{e} is archived; restore it with "
                    "`rl-insight server experiments restore` or use a new experiment_name")
        return None

    def finished_at(self, labels: Mapping[str, str]) -> float | None:
        e = self.get(labels.get("project", ""), labels.get("experiment_name", ""))
        return e.finished_at if e is not None and e.status == "finished" else None

    def finished_before(self, t: float) -> set[tuple[str, str]]:
        """The runs that finished before time ``t``."""
        with self._lock:
            return {k for k, e in self._items.items()
                    if e.status == "finished" and e.finished_at is not None
                    and e.finished_at < t}

    def set_status(self, project: str, experiment_name: str, status: str) -> Experiment:
        """archive, restore (back to active) or finish; raises KeyError when unknown."""
        now = time.time()
        with self.store.transaction(), self._lock:  # the lock order of store.py
            e = self._items.get((project, experiment_name))
            if e is None:
                raise KeyError(f"no experiment {project}/{experiment_name}")
            new = Experiment(**asdict(e))
            new.status = status
            if status == "archived":
                new.archived_at = now
            elif status == "finished":
                new.finished_at = now
            else:
                new.archived_at = None
                new.finished_at = None
            self._write([new])  # stored first: a refused write changes nothing
            self._items[(project, experiment_name)] = new
            return Experiment(**asdict(new))

    def list(self) -> list[dict]:
        with self._lock:
            return [asdict(e) for _, e in sorted(self._items.items())]

    def persist(self) -> None:
        """Activity times noted since the last call, in one transaction."""
        with self._lock:
            if not self._dirty:
                return
        with self.store.transaction(), self._lock:  # the lock order of store.py
            keys, self._dirty = self._dirty, set()
            self._write([self._items[k] for k in keys if k in self._items])

    def _write(self, exps: list[Experiment]) -> None:
        if not exps:
            return
        with self.store.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO experiments VALUES (?, ?, ?)",
                           [(e.project, e.experiment_name, json.dumps(asdict(e)))
                            for e in exps])
