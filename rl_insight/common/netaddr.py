"""Host and port handling shared by the server, the CLI and the client.

IPv6 literals need brackets in URLs and in Prometheus targets; wildcard binds need a
concrete address to be printed for clients. Keeping that here means one rule everywhere.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from pathlib import Path

WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def is_ipv6(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host.strip("[]")), ipaddress.IPv6Address)
    except ValueError:
        return False


def join_host_port(host: str, port: int) -> str:
    """``host:port`` with an IPv6 literal bracketed."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


def split_host_port(target: str) -> tuple[str, str]:
    """``host:port`` or ``[v6]:port`` into (host, port), brackets removed."""
    if target.startswith("["):
        host, _, port = target[1:].partition("]:")
        return host, port
    host, _, port = target.rpartition(":")
    return host, port


LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def is_local_host(host: str) -> bool:
    """Loopback, the unspecified address or a loopback name: an address that means "this
    machine" to whoever uses it (a target Prometheus would scrape on its own host, a
    server URL that names the node it is used on)."""
    host = host.strip("[]").lower()
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def http_url(host: str, port: int, path: str = "") -> str:
    return f"http://{join_host_port(host, port)}{path}"


def local_host(bind_host: str) -> str:
    """The address this machine uses to reach a server bound to ``bind_host``."""
    if bind_host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bind_host in ("::", "[::]"):
        return "::1"
    return bind_host.strip("[]")


def interface_addresses() -> dict[str, str]:
    """Each up, non-loopback IPv4 address of this machine and its interface's name."""
    try:
        import psutil
    except ImportError:
        return {}
    out = {}
    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        for a in addrs:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                out[a.address] = name
    return out


def choose_address(bind_host: str, configured: str = "") -> tuple[str, str]:
    """The address other machines should use, and why it was chosen: the configured
    one, the bind address itself, else the address of the interface that routes
    outwards (no packet is sent), else what the host name resolves to."""
    if configured:
        return configured.strip("[]"), "server.advertise_host"
    if bind_host not in WILDCARDS:
        return bind_host.strip("[]"), "the address the server binds (host)"
    family = socket.AF_INET6 if bind_host in ("::", "[::]") else socket.AF_INET
    probe = "fd00::1" if family == socket.AF_INET6 else "10.255.255.255"
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))  # UDP connect only selects a route
            addr = s.getsockname()[0]
            if not ipaddress.ip_address(addr).is_unspecified:
                name = interface_addresses().get(addr, "")
                return addr, (f"the address of {name}, " if name else "") + \
                    "the interface of the default route"
    except OSError:
        pass
    try:
        addr = socket.gethostbyname(socket.gethostname())
        if addr:
            return addr, "what the host name resolves to (no default route)"
    except OSError:
        pass
    return local_host(bind_host), "no routable interface: only this machine reaches it"


def routable_address(bind_host: str) -> str:
    """The address other machines should use to reach a server bound to ``bind_host``."""
    return choose_address(bind_host)[0]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; raises OSError(EADDRINUSE) when the port is taken."""
    family = socket.AF_INET6 if is_ipv6(host) or host in ("::", "[::]") else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only when the
    # socket says so (base_events._set_nodelay); without it every keep-alive response
    # waited out the client's delayed ACK (~40 ms per request)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host in ("::", "[::]"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host.strip("[]") or "0.0.0.0", port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on ``host:port`` (or binds it exclusively)."""
    try:
        bind_socket(host, port).close()
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return True
        raise
    return False


# Ray gives its worker processes ports in this range unless `ray start --min-worker-port
# / --max-worker-port` say otherwise (Ray docs, "Configuring Ray", ports; Ray 2.x).
RAY_WORKER_PORTS = range(10002, 20000)


def port_holder(port: int) -> str:
    """Who listens on ``port`` here, as 'pid N (name)', or '' when it cannot be told: the
    one fact that turns 'port in use' into something an operator can act on."""
    try:
        import psutil
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and \
                    conn.laddr.port == port and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    except Exception:  # no permission, a process gone meanwhile: say nothing
        return ""
    return ""


def ray_port_hint(port: int) -> str:
    """A sentence for a port inside Ray's worker range, else ''."""
    if port not in RAY_WORKER_PORTS:
        return ""
    return (f"on a Ray node a Ray worker may hold it: Ray gives its workers ports "
            f"{RAY_WORKER_PORTS.start}-{RAY_WORKER_PORTS.stop - 1} unless `ray start "
            "--min-worker-port/--max-worker-port` say otherwise")


def handout_ports() -> range:
    """Where ports handed out for another process to bind later are chosen: above Ray's
    worker ports and below the kernel's ephemeral range (32768-60999 by default, from
    /proc/sys/net/ipv4/ip_local_port_range). Ports a kernel gives for ``bind(0)`` lie in
    the ephemeral range, where any outgoing connection can take one as its local port
    before the server binds it, and a port an open connection holds cannot be listened
    on (a test's server lost its port so in a fresh-clone run)."""
    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return range(RAY_WORKER_PORTS.stop, max(RAY_WORKER_PORTS.stop, min(low, 32768)))


# a process may narrow it (tests: one slice per pytest worker, so two never pick alike)
HANDOUT_PORTS = handout_ports()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (for tests and ad-hoc servers)."""
    return free_ports(1, host)[0]


_handed_out: set[int] = set()  # ports this process already gave away


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free ports from HANDOUT_PORTS, none given out before by this process
    (a port handed out may not be bound yet): all are held open at once while they are
    chosen. Where that range is too small (a kernel whose ephemeral range starts low), the
    kernel chooses."""
    import random

    socks, ports = [], []
    within = HANDOUT_PORTS
    pick = random.Random()
    try:
        for _ in range(20 * n + 1000):
            if len(ports) == n:
                break
            if len(within) >= 1000:
                port = pick.randrange(within.start, within.stop)
                if port in _handed_out or port in ports:
                    continue
                try:
                    s = bind_socket(host, port)
                except OSError:
                    continue
            else:
                s = bind_socket(host, 0)
                port = s.getsockname()[1]
                if port in _handed_out:
                    socks.append(s)
                    continue
            socks.append(s)
            ports.append(port)
        if len(ports) < n:
            raise OSError(errno.EADDRINUSE, f"no {n} free ports in {within.start}-"
                                            f"{within.stop - 1}: free some, or narrow what "
                                            "listens there")
        _handed_out.update(ports)
        return ports
    finally:
        for s in socks:
            s.close()
