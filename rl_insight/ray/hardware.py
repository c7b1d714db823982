"""Hardware collection on every Ray node: `attach(hardware=True)` starts one manager
per cluster (``rl_insight_hardware``), which reconciles in a loop, as Ray Serve's
controller does: one agent actor per alive node (nodes that join later included), and
the server's targets of nodes that left removed. The server's target list is the
persisted state, so a restarted manager recovers from it.

An agent finds the exporters already running on its node (node_exporter on 9100, DCGM
on 9400, npu-exporter on 8082, or the configured ports), starts node_exporter when its
binary is installed, and otherwise serves a fallback (psutil, nvidia-smi, npu-smi)
under the same metric names. It registers each with the node's name and Ray node id.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import threading
import time
from typing import Any

import ray
import requests

from rl_insight.collector.loop import Periodic
from rl_insight.collector.push import Sender
from rl_insight.common import netaddr
from rl_insight.wire import paths

log = logging.getLogger(__name__)

MANAGER_NAME = "rl_insight_hardware"
AGENT_PREFIX = "rl_insight_hw_"
SIGNATURES = {"node-exporter": "node_cpu_seconds_total", "dcgm-exporter": "DCGM_FI_",
              "npu-exporter": "npu_chip_info"}
NODE_EXPORTER_BINARIES = ("prometheus-node-exporter", "node_exporter")


def probe(port: int, signature: str) -> bool:
    """True when http://127.0.0.1:port/metrics answers with the exporter's names."""
    try:
        r = requests.get(f"http://127.0.0.1:{port}{paths.METRICS}", timeout=2)
    except requests.RequestException:
        return False
    return r.status_code == 200 and signature in r.text


class HardwareAgent:
    """Lives on one node; finds, starts or replaces that node's exporters."""

    def __init__(self, config: dict[str, Any], node_id: str) -> None:
        self.config = config
        hw = config["hardware"]
        self.node_id = node_id
        self.node = socket.gethostname()
        self.ip = ray.util.get_node_ip_address()
        self.sender = Sender(config["server_url"], config.get("token", ""))
        self.children: list[subprocess.Popen] = []
        self.servers: list = []
        self.found: dict[str, tuple[str, str]] = {}  # job -> (address, how)
        ports = {"node-exporter": hw["node_exporter_port"],
                 "dcgm-exporter": hw["dcgm_exporter_port"],
                 "npu-exporter": hw["npu_exporter_port"]}
        for job, port in ports.items():
            if port and probe(port, SIGNATURES[job]):
                self.found[job] = (netaddr.join_host_port(self.ip, port), "running")
        if "node-exporter" not in self.found and hw["start_node_exporter"]:
            self._start_node_exporter(hw)
        if hw["fallback"]:
            self._fallbacks()
        self.bodies = [self._body(job, addr) for job, (addr, _) in self.found.items()]
        self.register()
        log.info("rl-insight hardware on %s: %s", self.node,
                 {job: f"{addr} ({how})" for job, (addr, how) in self.found.items()})

    def register(self) -> bool:
        """Post this node's targets (idempotent at the server): at start, and again when
        the manager finds them missing (the server was down, or lost its state)."""
        return all([self.sender.post_json(paths.TARGETS, body) for body in self.bodies])

    def _body(self, job: str, address: str) -> dict:
        return {"job_name": job, "targets": [address],
                "labels": {"node": self.node, "ray_node_id": self.node_id}}

    def _start_node_exporter(self, hw: dict) -> None:
        names = [hw["node_exporter_binary"]] if hw["node_exporter_binary"] \
            else NODE_EXPORTER_BINARIES
        binary = next((shutil.which(n) for n in names if shutil.which(n)), None)
        if binary is None:
            return
        port = hw["node_exporter_port"]
        if not port or netaddr.port_in_use("0.0.0.0", port):
            port = netaddr.free_port("0.0.0.0")
        from rl_insight.common.childproc import die_with_parent

        proc = subprocess.Popen(die_with_parent([binary, f"--web.listen-address=:{port}"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end and proc.poll() is None:
            if probe(port, SIGNATURES["node-exporter"]):
                self.children.append(proc)
                self.found["node-exporter"] = (netaddr.join_host_port(self.ip, port),
                                               f"started {binary}")
                return
            time.sleep(0.2)
        log.warning("rl-insight: %s did not come up on port %d; using the fallback",
                    binary, port)
        proc.kill()

    def _fallbacks(self) -> None:
        from prometheus_client import CollectorRegistry

        from rl_insight.collector.serve import MetricsServer
        from rl_insight.hardware import fallback, smi

        wanted = []
        if "node-exporter" not in self.found:
            wanted.append(("node-exporter", fallback.NodeCollector()))
        if "dcgm-exporter" not in self.found and shutil.which("nvidia-smi") and \
                smi.nvidia_gpus():
            wanted.append(("dcgm-exporter", fallback.GpuCollector()))
        if "npu-exporter" not in self.found and shutil.which("npu-smi") and smi.ascend_npus():
            wanted.append(("npu-exporter", fallback.NpuCollector()))
        for job, collector in wanted:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(collector)
            from prometheus_client import generate_latest

            server = MetricsServer(lambda r=registry: generate_latest(r).decode(),
                                   "0.0.0.0", 0, announce=False)
            self.servers.append(server)
            self.found[job] = (netaddr.join_host_port(self.ip, server.port), "fallback")

    def status(self) -> dict:
        return {"node": self.node, "node_id": self.node_id, "ip": self.ip,
                "exporters": {job: {"address": a, "how": h}
                              for job, (a, h) in self.found.items()}}


class HardwareManager:
    """One per cluster: keeps one agent per alive node and the server's targets true."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.namespace = config.get("namespace", "rl_insight")
        self.sender = Sender(config["server_url"], config.get("token", ""))
        self.agents: dict[str, Any] = {}
        self.statuses: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.loop = Periodic(config["hardware"]["reconcile_interval_s"], self.reconcile,
                             "rl-insight-hardware").start()

    def reconcile(self) -> dict:
        with self._lock:
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            for node_id in sorted(alive - set(self.agents)):
                self.agents[node_id] = self._agent(node_id)
            for node_id in set(self.agents) - alive:
                self.agents.pop(node_id)
                self.statuses.pop(node_id, None)
            for node_id, handle in self.agents.items():
                if node_id not in self.statuses:
                    try:
                        self.statuses[node_id] = ray.get(handle.status.remote(), timeout=60)
                    except Exception as exc:
                        log.warning("rl-insight: hardware agent on %s: %s", node_id, exc)
            listing = self.sender.get_json(paths.TARGETS)
            if listing:
                self._remove_departed(alive, listing)
                self._register_missing(listing)
            return dict(self.statuses)

    def _register_missing(self, listing: dict) -> None:
        """An agent whose targets the server does not list registers them again."""
        have = {(t["job_name"], t["target"]) for t in listing.get("targets", [])}
        for node_id, status in self.statuses.items():
            missing = [job for job, ex in status.get("exporters", {}).items()
                       if (job, ex["address"]) not in have]
            handle = self.agents.get(node_id)
            if missing and handle is not None:
                log.info("rl-insight: the server does not list %s of node %s; registering "
                         "again", ", ".join(missing), status.get("node", node_id))
                handle.register.remote()

    def _agent(self, node_id: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return ray.remote(HardwareAgent).options(
            name=AGENT_PREFIX + node_id[:16], namespace=self.namespace, lifetime="detached",
            get_if_exists=True, max_restarts=-1, num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(self.config, node_id)

    def _remove_departed(self, alive: set[str], listing: dict) -> None:
        """Targets whose ray_node_id is no longer alive leave the server (and so
        Prometheus); the server's list is the persisted truth."""
        for t in listing.get("targets", []):
            node_id = t.get("labels", {}).get("ray_node_id")
            if node_id and node_id not in alive and t["job_name"] in SIGNATURES:
                self.sender.delete_json(paths.TARGETS, {"job_name": t["job_name"],
                                                  "targets": [t["target"]],
                                                  "labels": t["labels"]})
                log.info("rl-insight: node %s left; removed %s target %s", node_id,
                         t["job_name"], t["target"])

    def reconcile_now(self) -> dict:
        return self.reconcile()


def start(config: dict[str, Any], namespace: str):
    """Start or find the manager and reconcile once; returns the per-node status."""
    manager = ray.remote(HardwareManager).options(
        name=MANAGER_NAME, namespace=namespace, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=-1, num_cpus=0).remote(config)
    return manager, ray.get(manager.reconcile_now.remote(), timeout=120)
