"""The server's state on disk: one SQLite database (``state/rl-insight.db``), in WAL mode:
pushed groups, the trace spool, registered targets and their owners' runs, experiments,
runs' configurations.

Every write is a transaction, so a SIGKILL or a power loss leaves the database as it
was after some complete write: never a half-written file. What was acknowledged to a
client was committed first: a SIGKILL never takes it back. The log is synced to the disk
at each checkpoint (every few seconds), so a power cut may take back the last seconds'
writes, never corrupt what is there; with ``sync=True`` (``server.sync_commits``) every
commit is synced before it is answered (the intake commits many requests' writes at
once, ``batch()``, so that costs a sync per batch).
The schema is versioned (``PRAGMA user_version``); the files of earlier versions are
read in once, at the first start, and kept beside it under ``*.migrated``.

A damaged or foreign file stops the server with one message naming the file and how
to recover; it is never overwritten.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: targets, bindings and experiments moved in from JSON files
FILE_NAME = "rl-insight.db"
T = TypeVar("T")

_SCHEMA = [
    # pushed groups: their grouping labels (JSON), push time and text exposition
    """CREATE TABLE IF NOT EXISTS push_groups (
        key TEXT PRIMARY KEY, labels TEXT NOT NULL, push_time REAL NOT NULL,
        body TEXT NOT NULL)""",
    # OTLP requests waiting for Tempo, oldest first
    """CREATE TABLE IF NOT EXISTS spool (
        seq INTEGER PRIMARY KEY, spans INTEGER NOT NULL, payload BLOB NOT NULL)""",
    # registered scrape targets: their key (JSON) and the registration (JSON)
    """CREATE TABLE IF NOT EXISTS targets (key TEXT PRIMARY KEY, row TEXT NOT NULL)""",
    # owners' runs (targets registered before the run was named), oldest first
    """CREATE TABLE IF NOT EXISTS bindings (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT UNIQUE NOT NULL,
        project TEXT NOT NULL, experiment_name TEXT NOT NULL)""",
    # experiments and their status (JSON)
    """CREATE TABLE IF NOT EXISTS experiments (
        project TEXT NOT NULL, experiment_name TEXT NOT NULL, row TEXT NOT NULL,
        PRIMARY KEY (project, experiment_name))""",
    # each run's configuration (zlib-compressed JSON; server/ingest/runconfigs.py). A
    # table added within schema 2: made where missing, left alone by an older server
    """CREATE TABLE IF NOT EXISTS run_configs (
        project TEXT NOT NULL, experiment_name TEXT NOT NULL, received_at REAL NOT NULL,
        row BLOB NOT NULL, PRIMARY KEY (project, experiment_name))""",
]


class StoreError(Exception):
    """The database cannot be used; the message says which file and what to do."""


class Store:
    """One connection shared by the server's threads, one writer at a time."""

    def __init__(self, state_dir: Path, sync: bool = False) -> None:
        self.path = state_dir / FILE_NAME
        state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread whose transaction is open
        # per open transaction and savepoint of the owner, how to undo the memory changes
        # made in it (a write the database does not keep is not served) and what follows
        # its commit
        self._levels: list[_Level] = []
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        try:
            self.db = sqlite3.connect(self.path, check_same_thread=False,
                                      isolation_level=None, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
            # checkpoints (the one write that syncs to disk) run on a connection of their
            # own in the background (checkpoint()), never inside a request's commit
            self.db.execute("PRAGMA wal_autocheckpoint=0")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer rl-insight (schema {version}, this "
                    f"one reads {SCHEMA_VERSION}): upgrade rl-insight, or start with another "
                    "RL_INSIGHT_HOME")
            check = self.db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            with self.transaction() as db:
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"{self.path}: the server's state database cannot be read ({exc}). Stop "
                f"the server, move the file aside (mv {self.path} {self.path}.damaged; "
                "also its -wal and -shm files) and start again: the server starts empty, "
                "and training processes register their targets and push their metrics "
                "again as they run") from None

    def transaction(self):
        """``with store.transaction() as db:`` one atomic write, under the store's lock;
        inside another transaction of this thread (a ``batch()``), a savepoint of it,
        undone alone if it fails. Lock order: a thread that also takes a lock of its own
        takes the transaction first, so no two threads wait on each other."""
        if self._owner == threading.get_ident():
            return _Savepoint(self)
        return _Transaction(self)

    def on_rollback(self, undo: Callable[[], None]) -> None:
        """Inside this thread's transaction: ``undo`` runs if it (or the savepoint it
        was made in) is rolled back, newest first, so memory changed beside a write that
        the disk refused (a failed group COMMIT) goes back to what the database holds."""
        if self._owner == threading.get_ident() and self._levels:
            self._levels[-1].undo.append(undo)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """``fn`` once what this thread's open transaction wrote is committed, outside
        the store's lock (never if it is rolled back); at once outside a transaction. For
        what others are shown of a write (the discovery files): only what is stored."""
        if self._owner == threading.get_ident() and self._levels:
            self._levels[-1].after.append(fn)
        else:
            fn()

    def batch(self):
        """``with store.batch():`` the transactions this thread opens meanwhile commit
        together, once, at the end (group commit: the intake's writes of many requests
        in one commit). Raises what COMMIT raises; then none of them is stored."""
        return self.transaction()

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._owner == threading.get_ident():
            return fn(self.db)  # this thread holds the lock for its transaction
        with self._lock:
            return fn(self.db)

    def checkpoint(self) -> None:
        """Copy the log into the database file, beside the writers (WAL allows it);
        called by the server's housekeeping every few seconds."""
        with self._checkpoint_lock:
            if self._checkpointer is None:  # a connection of its own, kept
                self._checkpointer = sqlite3.connect(self.path, timeout=30,
                                                     check_same_thread=False)
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        with self._lock:
            try:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.DatabaseError:
                pass
            self.db.close()

    # -- pushed groups ----------------------------------------------------------------
    def save_groups(self, upserts: Iterable[tuple[str, str, float, str]],
                    deletes: Iterable[str]) -> None:
        """(key, labels JSON, push time, text) rows and keys to drop, in one transaction."""
        with self.transaction() as db:
            db.executemany("DELETE FROM push_groups WHERE key = ?", [(k,) for k in deletes])
            db.executemany("INSERT OR REPLACE INTO push_groups VALUES (?, ?, ?, ?)",
                           list(upserts))

    def groups(self) -> list[tuple[str, float, str]]:
        """(labels JSON, push time, text) of every stored group."""
        return self.read(lambda db: db.execute(
            "SELECT labels, push_time, body FROM push_groups ORDER BY key").fetchall())


@dataclass
class _Level:
    """An open transaction or savepoint of the owner: how to undo the memory changes made
    in it (``on_rollback``), and what to do once it is committed (``after_commit``)."""

    undo: list[Callable[[], None]] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)


class _Transaction:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        self.store._lock.acquire()
        try:
            self.store.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.store._lock.release()
            raise
        self.store._owner = threading.get_ident()
        self.store._levels = [_Level()]
        return self.store.db

    def __exit__(self, kind, exc, tb) -> None:
        store = self.store
        committed: list[Callable[[], None]] = []
        try:
            if kind is None:
                try:
                    store.db.execute("COMMIT")
                except BaseException:
                    _rollback(store.db)
                    _undo([u for level in store._levels for u in level.undo])
                    raise
                committed = [f for level in store._levels for f in level.after]
            else:
                _rollback(store.db)
                _undo([u for level in store._levels for u in level.undo])
        finally:
            store._owner = None
            store._levels = []
            store._lock.release()
        for fn in committed:
            try:
                fn()
            except Exception:
                log.exception("an action after a commit failed")


class _Savepoint:
    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        self.store.db.execute("SAVEPOINT op")
        self.store._levels.append(_Level())
        return self.store.db

    def __exit__(self, kind, exc, tb) -> None:
        mine = self.store._levels.pop()
        if kind is not None:
            self.store.db.execute("ROLLBACK TO op")
            _undo(mine.undo)
        else:
            outer = self.store._levels[-1]
            outer.undo.extend(mine.undo)  # undone with the transaction, if it is
            outer.after.extend(mine.after)  # done once the transaction commits
        self.store.db.execute("RELEASE op")


def _undo(undos: list[Callable[[], None]]) -> None:
    """Run undo callbacks newest first; one that fails is logged, the rest still run."""
    for undo in reversed(undos):
        try:
            undo()
        except Exception:
            log.exception("undoing a memory change of a rolled-back write failed")


def _rollback(db: sqlite3.Connection) -> None:
    """Undo the open transaction, if SQLite has not already (a failed COMMIT may have)."""
    try:
        db.execute("ROLLBACK")
    except sqlite3.Error:
        pass
