"""A bounded FIFO of OTLP requests waiting to reach Tempo, in the server's database.

One row per accepted request, committed before the request is answered, so a span the
server acknowledged survives a crash. Full: the oldest records are dropped and counted.
The index of what is spooled (sequence, spans, bytes) is also kept in memory, so the
intake's bookkeeping never reads the database.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from pathlib import Path

from rl_insight.common import files
from rl_insight.server.ingest.store import Store

log = logging.getLogger(__name__)


class Spool:
    def __init__(self, store: Store, max_bytes: int, legacy_dir: Path | None = None) -> None:
        self.store = store
        self.dir = store.path  # where it lives, for messages
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._next = 0
        self.resync()
        if legacy_dir is not None and legacy_dir.is_dir():
            self._migrate(legacy_dir)

    def resync(self) -> None:
        """The index of records (what is kept in memory) read from the database: at
        start, and after a batch of appends failed to commit."""
        rows = self.store.read(lambda db: db.execute(
            "SELECT seq, spans, length(payload) FROM spool ORDER BY seq").fetchall())
        with self._lock:
            self._records: deque[tuple[int, int, int]] = deque(rows)  # (seq, spans, bytes)
            self._next = max(self._next, rows[-1][0] + 1 if rows else 0)
            self.bytes = sum(r[2] for r in rows)
            self.spans = sum(r[1] for r in rows)

    def _migrate(self, directory: Path) -> None:
        """The spool of earlier versions, a file per request: read in, in order."""
        moved = 0
        for p in sorted(directory.glob("*.pb")):
            try:
                _, spans = (int(x) for x in p.stem.split("-"))
            except ValueError:
                continue
            self.append(p.read_bytes(), spans)
            moved += 1
        files.migrated(directory, moved, self.dir)

    def append(self, payload: bytes, spans: int) -> int:
        """Store a record; returns how many spans were dropped to make room."""
        with self.store.transaction() as db, self._lock:  # the lock order of store.py
            seq = self._next
            db.execute("INSERT INTO spool VALUES (?, ?, ?)", (seq, spans, payload))
            self._next += 1
            self._records.append((seq, spans, len(payload)))
            self.bytes += len(payload)
            self.spans += spans
            dropped, gone = 0, []
            while self.bytes > self.max_bytes and len(self._records) > 1:
                old_seq, old_spans, old_bytes = self._records.popleft()
                gone.append((old_seq,))
                self.bytes -= old_bytes
                self.spans -= old_spans
                dropped += old_spans
            if gone:
                db.executemany("DELETE FROM spool WHERE seq = ?", gone)
            return dropped

    def peek(self) -> tuple[int, int, bytes] | None:
        """The oldest record (seq, spans, payload), or None when empty."""
        got = self.peek_many(1)
        return got[0] if got else None

    def peek_many(self, max_bytes: int) -> list[tuple[int, int, bytes]]:
        """The oldest records, as many as fit in ``max_bytes`` (at least one)."""
        with self._lock:
            head, size = [], 0
            for seq, _, n in self._records:
                if head and size + n > max_bytes:
                    break
                head.append(seq)
                size += n
        if not head:
            return []
        return self.store.read(lambda db: db.execute(
            "SELECT seq, spans, payload FROM spool WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (head[0], head[-1])).fetchall())

    def pop(self, seq: int) -> None:
        """Remove a record once it has been delivered."""
        with self._lock:
            for i, (s, spans, size) in enumerate(self._records):
                if s == seq:
                    del self._records[i]
                    self.bytes -= size
                    self.spans -= spans
                    break
                if s > seq:
                    break
        with self.store.transaction() as db:
            db.execute("DELETE FROM spool WHERE seq = ?", (seq,))

    def pop_many(self, seqs: list[int]) -> None:
        """Remove delivered records (the oldest ones) in one transaction."""
        done = set(seqs)
        with self._lock:
            keep = deque()
            for rec in self._records:
                if rec[0] in done:
                    self.bytes -= rec[2]
                    self.spans -= rec[1]
                else:
                    keep.append(rec)
            self._records = keep
        with self.store.transaction() as db:
            db.executemany("DELETE FROM spool WHERE seq = ?", [(s,) for s in seqs])

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
