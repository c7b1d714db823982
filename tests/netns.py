"""A multi-host topology inside this machine, for tests: network namespaces with their own
addresses on one bridge (a monitoring host, a Ray head, Ray worker nodes), made and torn
down by the test. Needs root and `ip` (iproute2); a firewall rule inside a namespace needs
`nft` (nftables). Nothing leaves the machine: the bridge has no uplink and the addresses
are a private /24 picked per topology.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass, field


def available() -> str:
    """Why a topology cannot be built here ('' when it can)."""
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip"):
        return "needs iproute2 (`ip`)"
    probe = subprocess.run(["ip", "netns", "add", "rli-probe-" + uuid.uuid4().hex[:6]],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create network namespaces: {probe.stderr.strip()}"
    name = probe.args[-1]
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


@dataclass
class Host:
    """One namespace: a name, an address, and how to run things in it."""

    ns: str
    address: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, *argv: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(*argv), capture_output=True, text=True,
                              timeout=timeout, **kw)

    def popen(self, *argv: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(self.argv(*argv), start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def block_port(self, port: int) -> None:
        """Drop incoming TCP to ``port`` in this namespace, as a host firewall does."""
        for rule in (["add", "table", "inet", "rli"],
                     ["add", "chain", "inet", "rli", "input",
                      "{ type filter hook input priority 0 ; }"],
                     ["add", "rule", "inet", "rli", "input", "tcp", "dport", str(port),
                      "drop"]):
            r = self.run("nft", *rule)
            if r.returncode != 0:
                raise RuntimeError(f"nft {' '.join(rule)}: {r.stderr.strip()}")

    def unblock(self) -> None:
        self.run("nft", "delete", "table", "inet", "rli")


class Topology:
    """``Topology(["mon", "head", "worker"])``: one namespace per name on a shared bridge."""

    def __init__(self, names: list[str]) -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"rlibr{tag}"
        net = random.randint(16, 250)
        self.prefix = f"10.{net}.{random.randint(0, 250)}"
        self.hosts = {n: Host(f"rli-{tag}-{n}", f"{self.prefix}.{i + 1}")
                      for i, n in enumerate(names)}
        self._veths: list[str] = []
        self.observer = f"{self.prefix}.254"

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def up(self) -> Topology:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        # the test itself reaches every host through the bridge, like an operator's laptop
        sh("ip", "addr", "add", f"{self.observer}/24", "dev", self.bridge)
        for i, h in enumerate(self.hosts.values()):
            sh("ip", "netns", "add", h.ns)
            outer = f"{self.bridge[:9]}v{i}"
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0",
               "netns", h.ns)
            self._veths.append(outer)
            sh("ip", "link", "set", outer, "master", self.bridge, "up")
            for cmd in (["ip", "link", "set", "lo", "up"],
                        ["ip", "addr", "add", f"{h.address}/24", "dev", "eth0"],
                        ["ip", "link", "set", "eth0", "up"]):
                sh(*h.argv(*cmd))
        return self

    def down(self) -> None:
        """Kill everything left in the namespaces, then remove them and the bridge."""
        for h in self.hosts.values():
            pids = sh("ip", "netns", "pids", h.ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            for p in h.procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            sh("ip", "netns", "del", h.ns, check=False)
        for v in self._veths:
            sh("ip", "link", "del", v, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
