"""The server's background threads do not end silently: an error escaping a thread is
logged and counted, and the thread goes on (the trace relay as the example: its spool
failing once must not leave spans piling up for good)."""

from __future__ import annotations

import logging
import threading

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rl_insight.config import TraceSettings
from rl_insight.server import threads
from rl_insight.server.ingest.relay import Relay
from rl_insight.server.ingest.spool import Spool
from rl_insight.server.ingest.store import Store
from tests.conftest import wait_for
from tests.fakes.otlp_receiver import FakeTempo


def test_a_failing_body_is_logged_counted_and_started_again(caplog):
    stop, calls = threading.Event(), []

    def body():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("disk gone for a moment")

    before = threads.RESTARTS["test-body"]
    with caplog.at_level(logging.ERROR, logger="rl_insight.server.threads"):
        t = threads.supervised("test-body", body, stop, backoff_s=0.01)
        t.start()
        t.join(10)
    assert not t.is_alive() and len(calls) == 3
    assert threads.RESTARTS["test-body"] - before == 2
    assert sum("test-body failed" in r.getMessage() for r in caplog.records) == 2


def test_the_relay_survives_its_spool_failing_and_relays_afterwards(tmp_path):
    """OSError from the spool (a full disk, a locked database) once: the relay thread is
    restarted and the spans still reach the receiver (a FAKE Tempo decoding OTLP)."""
    from rl_insight.common import netaddr

    tempo = FakeTempo(netaddr.free_port()).start()
    store = Store(tmp_path)
    spool = Spool(store, 1 << 20)
    relay = Relay(TraceSettings(retry_initial_s=0.05), spool, tempo.url)
    real, failed = spool.peek_many, []

    def peek_once_broken(max_bytes):
        if not failed:
            failed.append(1)
            raise OSError("database is locked")
        return real(max_bytes)

    spool.peek_many = peek_once_broken
    before = threads.RESTARTS["rl-insight-relay"]
    try:
        relay.start()
        req = ExportTraceServiceRequest()
        req.resource_spans.add().scope_spans.add().spans.add(
            name="vllm_generate", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
        relay.submit(req.SerializeToString(), 1)
        wait_for(lambda: failed and tempo.requests >= 1, 15,
                 "the relay to deliver after its spool failed once")
        assert threads.RESTARTS["rl-insight-relay"] - before == 1
        assert relay._thread.is_alive()
    finally:
        relay.stop()
        store.close()
        tempo.stop()
