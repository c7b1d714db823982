"""Relays accepted OTLP requests to Tempo, in order, through the spool.

Every request is spooled first and one worker sends from the head, so order holds
across a Tempo outage and a server restart. The worker sends what is waiting as one
request of up to ``BATCH_BYTES`` (serialized ExportTraceServiceRequests concatenate into
one: the message is a repeated field), at most one every ``LINGER_S`` while batches are
not full, not one request per intake request. Connection
errors, 5xx and 429 are retried with backoff; other 4xx answers mean Tempo will never
take the record: it is dropped and counted.
"""

from __future__ import annotations

import logging
import threading
import time

import requests

from rl_insight.common import tracebacks
from rl_insight.config import TraceSettings
from rl_insight.server.ingest.otlp import PROTOBUF
from rl_insight.server.ingest.spool import Spool
from rl_insight.server.threads import supervised

log = logging.getLogger(__name__)
BATCH_BYTES = 4 * 1024 * 1024
# after a send, what arrives within this long goes in the next one: under lane traffic
# (hundreds of span exports a second) a few requests to Tempo a second, not one each
LINGER_S = 0.2


class Relay:
    def __init__(self, settings: TraceSettings, spool: Spool, url: str) -> None:
        self.settings = settings
        self.spool = spool
        self.url = url
        self.received = 0
        self.relayed = 0
        self.replayed = 0
        self.dropped: dict[str, int] = {"spool_full": 0, "rejected": 0}
        self.last_error = ""
        self.up = False
        self._outage = len(spool) > 0  # a backlog from before a restart counts as replay
        self._wake = threading.Event()
        self._counts = threading.Lock()
        self._stop = threading.Event()
        self._session = requests.Session()
        self._thread = supervised("rl-insight-relay", self._run, self._stop)

    def start(self) -> None:
        self._thread.start()

    def submit(self, payload: bytes, spans: int) -> None:
        """Spool an accepted request's spans for Tempo (counted as received)."""
        dropped = self.spool.append(payload, spans)
        with self._counts:  # submitted from the intake's and the routes' threads
            self.received += spans
            self.dropped["spool_full"] += dropped
        if dropped:
            log.warning("trace spool full (traces.spool_max_bytes); dropped %d oldest spans",
                        dropped)
        self._wake.set()

    def _run(self) -> None:
        delay = self.settings.retry_initial_s
        while not self._stop.is_set():
            recs = self.spool.peek_many(BATCH_BYTES)
            if not recs:
                self._outage = False
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            spans = sum(r[1] for r in recs)
            outcome = self._send(b"".join(r[2] for r in recs))
            if outcome == "rejected" and len(recs) > 1:  # find the one Tempo refuses
                outcome = self._send(recs[0][2])
                recs, spans = recs[:1], recs[0][1]
            if outcome == "ok":
                self.spool.pop_many([seq for seq, _, _ in recs])
                self.relayed += spans
                if self._outage:
                    self.replayed += spans
                delay = self.settings.retry_initial_s
                if self.spool.bytes < BATCH_BYTES:  # let the next batch fill a moment
                    self._stop.wait(LINGER_S)
            elif outcome == "rejected":
                self.spool.pop_many([seq for seq, _, _ in recs])
                self.dropped["rejected"] += spans
            else:
                self._outage = True
                self._stop.wait(delay)
                delay = min(delay * 2, self.settings.retry_max_s)

    def _send(self, payload: bytes) -> str:
        try:
            r = self._session.post(self.url, data=payload,
                                   headers={"Content-Type": PROTOBUF},
                                   timeout=self.settings.relay_timeout_s)
        except requests.RequestException as exc:
            tracebacks.release(exc)  # the batch goes now, not at the next full collection
            self._note_down(f"cannot reach {self.url}: {exc.__class__.__name__}")
            return "retry"
        if r.status_code < 300:
            if not self.up:
                log.info("trace relay to %s is up", self.url)
            self.up, self.last_error = True, ""
            return "ok"
        if r.status_code == 429 or r.status_code >= 500:
            self._note_down(f"{self.url} answered {r.status_code}")
            return "retry"
        self.last_error = f"{self.url} rejected a batch: {r.status_code} {r.text[:200]}"
        log.error("%s; dropping it", self.last_error)
        return "rejected"

    def _note_down(self, why: str) -> None:
        if self.up or not self.last_error:
            log.warning("trace relay down (%s); spooling to %s", why, self.spool.dir)
        self.up, self.last_error = False, why

    def flush(self, timeout: float) -> bool:
        """Wait until the spool is empty or the deadline passes."""
        end = time.monotonic() + timeout
        while len(self.spool) and time.monotonic() < end:
            self._wake.set()
            time.sleep(0.05)
        return not len(self.spool)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.settings.relay_timeout_s + 1)
