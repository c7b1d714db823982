"""Each run's configuration, kept with the run: the flattened, masked, bounded values its
training process handed over (rl_insight/runconfig/), the latest hand-over winning.

Stored in the server's database (a row a run, compressed JSON), committed before it is
answered, so a restart or a SIGKILL keeps it; the newest ``MAX_STORED`` runs' are kept
there, long after their runs finished, for run-against-run comparison. In memory, and
on /metrics as ``rl_insight_run_config_info`` (a few hundred keys a run, the keys that
differ between the runs of its project first), only the runs the server has not
forgotten: a finished run's goes with its lanes and pushed groups, ``push.finished_ttl_s``
after it finished; an archived run's is not shown."""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from rl_insight.runconfig.diff import exposed_keys
from rl_insight.runconfig.flatten import Flat, as_text
from rl_insight.server.ingest.store import Store
from rl_insight.wire import runconfig as config_wire

Run = tuple[str, str]
MAX_STORED = 10_000  # runs whose configuration the database keeps (compressed: ~5 KiB)
MAX_LIVE = 1_000  # runs whose configuration is held in memory (and on /metrics)


class RunConfigStore:
    def __init__(self, store: Store, hidden: Callable[[str, str], bool] = lambda p, e: False,
                 max_stored: int = MAX_STORED, max_live: int = MAX_LIVE) -> None:
        self.store = store
        self.hidden = hidden  # (project, experiment) -> not shown on /metrics (archived)
        self.max_stored, self.max_live = max_stored, max_live
        self._live: OrderedDict[Run, dict[str, Any]] = OrderedDict()  # oldest write first
        self._lock = threading.Lock()
        self._version = 0  # moves with every change the exposed keys depend on
        self._exposed: tuple[int, dict[Run, list[str]]] = (-1, {})

    def load(self, live: Callable[[str, str], bool]) -> int:
        """The stored configurations of the runs ``live`` names, into memory."""
        rows = self.store.read(lambda db: db.execute(
            "SELECT project, experiment_name, received_at, row FROM run_configs "
            "ORDER BY received_at").fetchall())
        with self._lock:
            for project, experiment, received_at, row in rows:
                if live(project, experiment):
                    self._live[(project, experiment)] = _record(project, experiment,
                                                                received_at, row)
            self._trim()
            self._version += 1
            return len(self._live)

    def put(self, project: str, experiment: str, flat: Flat, source: str) -> dict[str, Any]:
        """Keep a run's configuration (replacing what it had); call inside the intake's
        transaction: memory follows only what is committed (undone on a rollback)."""
        now = time.time()
        row = zlib.compress(json.dumps({
            config_wire.VALUES: flat.values, config_wire.MASKED: flat.masked,
            config_wire.CUT: flat.cut, config_wire.SOURCE: source}).encode())
        record = _record(project, experiment, now, row)
        key = (project, experiment)
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            db.execute("INSERT OR REPLACE INTO run_configs VALUES (?, ?, ?, ?)",
                       (project, experiment, now, row))
            db.execute("DELETE FROM run_configs WHERE rowid IN (SELECT rowid FROM "
                       "run_configs ORDER BY received_at DESC LIMIT -1 OFFSET ?)",
                       (self.max_stored,))
            before = self._live.pop(key, None)
            self._live[key] = record
            self._trim()
            self._version += 1
            self.store.on_rollback(lambda: self._undo(key, record, before))
        return summary(record)

    def _undo(self, key: Run, record: dict, before: dict | None) -> None:
        with self._lock:
            if self._live.get(key) is record:
                del self._live[key]
                if before is not None:
                    self._live[key] = before
                self._version += 1

    def _trim(self) -> None:
        while len(self._live) > self.max_live:
            self._live.popitem(last=False)

    def get(self, project: str, experiment: str) -> dict[str, Any] | None:
        """A run's configuration as the read route answers it, or None: from memory, else
        from the database (a run the server forgot keeps its row)."""
        with self._lock:
            record = self._live.get((project, experiment))
        if record is not None:
            return record
        row = self.store.read(lambda db: db.execute(
            "SELECT received_at, row FROM run_configs WHERE project = ? AND "
            "experiment_name = ?", (project, experiment)).fetchone())
        return _record(project, experiment, *row) if row else None

    def forget(self, runs: set[Run]) -> int:
        """Drop the runs the server forgot from memory (their rows stay)."""
        with self._lock:
            gone = [r for r in runs if r in self._live]
            for r in gone:
                del self._live[r]
            if gone:
                self._version += 1
            return len(gone)

    def __len__(self) -> int:
        return len(self._live)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """``rl_insight_run_config_info`` and ``rl_insight_run_config_keys`` of every run
        held and not archived."""
        info = GaugeMetricFamily(
            config_wire.INFO_METRIC, "A run's configuration, a series a key (1): the keys that "
            f"differ between its project's runs first, at most {config_wire.EXPOSED_KEYS} a run, "
            f"values cut to {config_wire.EXPOSED_VALUE_CHARS} characters (GET "
            f"{config_wire.CONFIG_PATH} has them all)",
            labels=["project", "experiment_name", "key", "value"])
        keys = GaugeMetricFamily(
            config_wire.KEYS_METRIC, "A run's configuration's keys: stored, exposed (as "
            f"{config_wire.INFO_METRIC}), masked (secrets), cut (left out by the client's bounds)",
            labels=["project", "experiment_name", "kind"])
        with self._lock:
            version = self._version
            runs = {r: rec for r, rec in self._live.items() if not self.hidden(*r)}
            cached_version, cached = self._exposed
        if cached_version != version:  # recomputed only when a configuration changed
            cached = exposed_keys({r: rec[config_wire.VALUES] for r, rec in runs.items()},
                                  config_wire.EXPOSED_KEYS)
            with self._lock:
                self._exposed = (version, cached)
        for (project, experiment), rec in runs.items():
            values = rec[config_wire.VALUES]
            shown = cached.get((project, experiment), [])
            for key in shown:
                info.add_metric([project, experiment, key, label_value(values[key])], 1.0)
            for kind, n in (("stored", len(values)), ("exposed", len(shown)),
                            ("masked", rec[config_wire.MASKED]),
                            ("cut", rec[config_wire.CUT]["keys"])):
                keys.add_metric([project, experiment, kind], float(n))
        yield info
        yield keys


def label_value(value: Any) -> str:
    """A value as a label: its text on one line, control characters as spaces, cut to
    ``EXPOSED_VALUE_CHARS``."""
    text = "".join(c if c.isprintable() else " " for c in as_text(value))
    if len(text) > config_wire.EXPOSED_VALUE_CHARS:
        text = text[:config_wire.EXPOSED_VALUE_CHARS - 1] + config_wire.TRUNCATED
    return text


def _record(project: str, experiment: str, received_at: float, row: bytes) -> dict:
    data = json.loads(zlib.decompress(row))
    cut = {k: int(data.get(config_wire.CUT, {}).get(k, 0)) for k in config_wire.CUT_KINDS}
    return {"project": project, "experiment_name": experiment, "received_at": received_at,
            config_wire.SOURCE: data.get(config_wire.SOURCE, ""),
            "keys": len(data[config_wire.VALUES]),
            config_wire.MASKED: data.get(config_wire.MASKED, 0), config_wire.CUT: cut,
            config_wire.VALUES: data[config_wire.VALUES]}


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without its values (what a write answers)."""
    return {k: v for k, v in record.items() if k != config_wire.VALUES}
