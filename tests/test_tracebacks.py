"""A failed send leaves nothing for the garbage collector: the body it carried goes when
the send returns (rl_insight/common/tracebacks.py). Before, urllib3's frames and the error they
raise kept each failed attempt's body in a reference cycle until the next full
collection: the server's RSS rose 4 MB per relay attempt to a dead Tempo and fell every
10 s (the soak test's server trend read 29 MB a minute in a CI run)."""

from __future__ import annotations

import gc
import socket
import types
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from rl_insight.collector.push import Sender
from rl_insight.common import tracebacks
from rl_insight.config import TraceSettings
from rl_insight.server.ingest.relay import Relay
from rl_insight.server.ingest.spool import Spool
from rl_insight.server.ingest.store import Store

BODY = b"x" * (1 << 20)


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A loopback port that refuses connections and stays ours: bound, never listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@contextmanager
def frames_left_behind() -> Iterator[list[str]]:
    """The frames (file:function) that only a garbage collection would free, of what
    ran inside the block."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(f"{o.f_code.co_filename}:{o.f_code.co_name}" for o in gc.garbage
                     if isinstance(o, types.FrameType))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_a_failed_relay_to_tempo_keeps_no_batch_for_the_collector(tmp_path, refusing_url):
    relay = Relay(TraceSettings(), Spool(Store(tmp_path), 1 << 26), refusing_url)
    with frames_left_behind() as frames:
        outcomes = [relay._send(BODY) for _ in range(3)]
    assert outcomes == ["retry"] * 3, relay.last_error
    assert frames == []


@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "through a proxy"])
def test_a_failed_push_keeps_no_body_for_the_collector(refusing_url, proxied, monkeypatch):
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    if proxied:  # a proxy in the environment: the connection goes through it (refusing too)
        monkeypatch.setenv("HTTP_PROXY", refusing_url)
    sender = Sender(refusing_url)
    assert bool(sender._connection(refusing_url).proxy) is proxied
    with frames_left_behind() as frames:
        sent = [sender.spans(BODY) for _ in range(3)]
    assert sent == [False] * 3, sender.last_error
    assert frames == []


def test_release_clears_the_chain_and_what_it_wraps():
    def fail(body: bytes) -> None:
        raise OSError("refused")

    def wrap(body: bytes) -> None:
        try:
            fail(body)
        except OSError as e:
            raise RuntimeError(ValueError("wrapped")) from e

    try:
        wrap(BODY)
    except RuntimeError as exc:
        caught = exc
    inner = caught.__cause__.__traceback__.tb_frame  # fail's frame, finished
    assert "body" in inner.f_locals
    tracebacks.release(caught)
    assert inner.f_locals == {}
