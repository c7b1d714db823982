"""A bounded on-disk FIFO of OTLP requests waiting to reach Tempo.

One file per request, named by sequence number and span count, written via rename so
a crash never leaves half a record. Full: the oldest records are dropped and counted.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


class Spool:
    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.dir = directory
        self.max_bytes = max_bytes
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records: list[tuple[int, int, int]] = []  # (seq, spans, bytes), oldest first
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        for p in self.dir.glob("*.pb"):
            try:
                seq, spans = (int(x) for x in p.stem.split("-"))
            except ValueError:
                continue
            self._records.append((seq, spans, p.stat().st_size))
        self._records.sort()
        self._next = self._records[-1][0] + 1 if self._records else 0
        self.bytes = sum(r[2] for r in self._records)
        self.spans = sum(r[1] for r in self._records)

    def _path(self, seq: int, spans: int) -> Path:
        return self.dir / f"{seq:020d}-{spans}.pb"

    def append(self, payload: bytes, spans: int) -> int:
        """Store a record; returns how many spans were dropped to make room."""
        with self._lock:
            seq = self._next
            self._next += 1
            path = self._path(seq, spans)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, path)
            self._records.append((seq, spans, len(payload)))
            self.bytes += len(payload)
            self.spans += spans
            dropped = 0
            while self.bytes > self.max_bytes and len(self._records) > 1:
                old_seq, old_spans, old_bytes = self._records.pop(0)
                self._path(old_seq, old_spans).unlink(missing_ok=True)
                self.bytes -= old_bytes
                self.spans -= old_spans
                dropped += old_spans
            return dropped

    def peek(self) -> tuple[int, int, bytes] | None:
        """The oldest record (seq, spans, payload), or None when empty."""
        with self._lock:
            if not self._records:
                return None
            seq, spans, _ = self._records[0]
        try:
            return seq, spans, self._path(seq, spans).read_bytes()
        except FileNotFoundError:  # dropped for room meanwhile
            self._forget(seq)
            return self.peek()

    def pop(self, seq: int) -> None:
        """Remove a record once it has been delivered."""
        with self._lock:
            for s, spans, _ in self._records:
                if s == seq:
                    self._path(s, spans).unlink(missing_ok=True)
                    break
        self._forget(seq)

    def _forget(self, seq: int) -> None:
        with self._lock:
            for i, (s, spans, size) in enumerate(self._records):
                if s == seq:
                    del self._records[i]
                    self.bytes -= size
                    self.spans -= spans
                    return

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
