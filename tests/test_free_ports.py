"""Ports handed out for a server to bind later (netaddr.free_ports): a fresh-clone run lost
one to an outgoing connection, which the kernel gives a local port from its ephemeral range,
the range ``bind(0)`` chose from too."""

from __future__ import annotations

from pathlib import Path

from rl_insight.common import netaddr


def test_handed_out_ports_lie_outside_the_ephemeral_range_and_rays_worker_ports():
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = netaddr.free_ports(50)
    assert len(set(ports)) == 50
    for port in ports:
        assert port in netaddr.HANDOUT_PORTS, (port, netaddr.HANDOUT_PORTS)
        assert not low <= port <= high and port not in netaddr.RAY_WORKER_PORTS, port
        netaddr.bind_socket("127.0.0.1", port).close()  # free when handed out
    assert not set(netaddr.free_ports(50)) & set(ports)  # never handed out twice
