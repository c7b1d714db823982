"""The server's listening socket says it is TCP, so asyncio turns Nagle off on every
connection it accepts (without it, each keep-alive response waited for the client's
delayed ACK: ~40 ms per request, found by bench/scale.py)."""

from __future__ import annotations

import asyncio
import socket

from rl_insight.common import netaddr


def test_accepted_connections_have_nodelay():
    async def main() -> int:
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        def connected(reader, writer):
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = netaddr.bind_socket("127.0.0.1", 0)
        server = await asyncio.start_server(connected, sock=sock)
        _, w = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            w.close()
            server.close()

    with netaddr.bind_socket("127.0.0.1", 0) as s:
        assert s.proto == socket.IPPROTO_TCP
    assert asyncio.run(main()) != 0
