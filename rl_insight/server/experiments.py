"""Experiments, named by (project, experiment_name): first and last activity, and
whether they are active, finished or archived. An archived experiment is not scraped
and takes no new registrations or pushes until it is restored."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rl_insight.server.services.base import read_state_json, write_atomic


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
    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self._items: dict[tuple[str, str], Experiment] = {}
        self._lock = threading.RLock()
        self._dirty = False

    def load(self) -> int:
        rows = read_state_json(self.state_file, [])
        for r in rows:
            e = Experiment(**r)
            self._items[(e.project, e.experiment_name)] = e
        return len(self._items)

    def touch(self, project: str, experiment_name: str) -> None:
        """Note activity; a new experiment is written at once, activity lazily."""
        if not project:
            return
        now = time.time()
        with self._lock:
            e = self._items.get((project, experiment_name))
            if e is None:
                self._items[(project, experiment_name)] = Experiment(
                    project, experiment_name, first_seen=now, last_seen=now)
                self._save()
            else:
                e.last_seen = now
                self._dirty = True

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

    def set_status(self, project: str, experiment_name: str, status: str) -> Experiment:
        """archive, restore (back to active) or finish; raises KeyError when unknown."""
        now = time.time()
        with self._lock:
            e = self._items.get((project, experiment_name))
            if e is None:
                raise KeyError(f"no experiment {project}/{experiment_name}")
            e.status = status
            if status == "archived":
                e.archived_at = now
            elif status == "finished":
                e.finished_at = now
            else:
                e.archived_at = None
                e.finished_at = None
            self._save()
            return Experiment(**asdict(e))

    def list(self) -> list[dict]:
        with self._lock:
            return [asdict(e) for _, e in sorted(self._items.items())]

    def persist(self) -> None:
        with self._lock:
            if self._dirty:
                self._save()

    def _save(self) -> None:
        self._dirty = False
        write_atomic(self.state_file, json.dumps(self.list(), indent=1))
