"""What `rl-insight doctor` says when the server URL reaches something that is not the
server: a real gRPC server (grpcio, as Ray's own workers and raylets serve) on the port."""

from __future__ import annotations

import random
from concurrent import futures

import grpc
import pytest

from rl_insight.commands import doctor
from rl_insight.common import netaddr


@pytest.fixture
def grpc_port_in_rays_range():
    """A real gRPC server on a port inside Ray's worker range, where one meets them."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    ports = list(netaddr.RAY_WORKER_PORTS)
    random.shuffle(ports)
    for port in ports[:200]:
        try:
            if server.add_insecure_port(f"127.0.0.1:{port}") == port:
                break
        except RuntimeError:  # grpcio >= 1.60 raises on a taken port
            continue
    else:
        pytest.fail("no free port in Ray's worker range on this machine")
    server.start()
    yield port
    server.stop(grace=None)


def test_a_grpc_service_on_the_server_port_is_named_not_dumped(grpc_port_in_rays_range):
    port = grpc_port_in_rays_range
    doc = doctor.Doctor(f"http://127.0.0.1:{port}", ray_probe=False, timeout=5)
    assert doc.check_server() is False
    (check,) = [c for c in doc.checks if c.name == "server"]
    assert check.status == doctor.PROBLEM
    assert "something else listens there" in check.detail, check.detail
    assert "not an RL-Insight server" in check.detail
    assert "Ray gives its workers ports 10002-19999" in check.detail
    assert "\\x00" not in check.detail  # not the raw bytes the other program sent


def test_a_port_outside_rays_range_names_no_ray_worker():
    assert netaddr.ray_port_hint(9090) == ""
    assert netaddr.ray_port_hint(32768) == ""
    assert "--min-worker-port" in netaddr.ray_port_hint(18080)
