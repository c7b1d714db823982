"""A private local Ray cluster for tests: `ray start --head` on free loopback ports with
token auth off for head and drivers alike, stopped by killing exactly its processes
(found by a marker in their environment), never with `ray stop`."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rl_insight.common import netaddr
from tests.conftest import processes_with_env, wait_for

MARK = "RL_INSIGHT_TEST_RAY_CLUSTER"
# No log monitor: it re-reads every worker's log files to echo them to drivers, and in a
# cluster that lives through many runs (hundreds of log files) it took more CPU than any
# process of the product (tests read what they check from their drivers' own output)
QUIET = ("--include-log-monitor=false",)


class RayCluster:
    def __init__(self, workdir: Path, num_cpus: int = 4,
                 extra_env: dict[str, str] | None = None, dashboard: bool = True) -> None:
        """``dashboard``: Ray's dashboard and its agent, for the job and state API
        (``alive``, ``remove_nodes``, ``ray job submit``); off, a cluster takes a few
        percent of a core less for as long as it lives."""
        self.workdir = workdir
        self.with_dashboard = dashboard
        self.extra_env = dict(extra_env or {})
        self.num_cpus = num_cpus
        self.mark = uuid.uuid4().hex
        self.port, self.dashboard_port = netaddr.free_ports(2)
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard = f"http://127.0.0.1:{self.dashboard_port}"
        self.temp_dir = Path(f"/tmp/rlt-{self.mark[:8]}")  # short: socket paths are limited

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for the head and every driver of this cluster."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_"))}
        env.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_ADDRESS": self.address, MARK: self.mark,
                    "RAY_DEDUP_LOGS": "0", "PYTHONPATH": str(Path(__file__).parents[1])})
        env.update(self.extra_env)
        env.update(extra)
        return env

    def command(self) -> list[str]:
        """`ray start --head` with every port of ours distinct and free right now."""
        taken = {self.port, self.dashboard_port}
        extra = [p for p in netaddr.free_ports(8) if p not in taken][:4]
        bin_ray = str(Path(sys.executable).parent / "ray")
        return [bin_ray, "start", "--head", f"--port={self.port}",
                f"--dashboard-port={self.dashboard_port}",
                f"--include-dashboard={str(self.with_dashboard).lower()}",
                "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1",
                f"--num-cpus={self.num_cpus}", f"--temp-dir={self.temp_dir}",
                "--disable-usage-stats", f"--ray-client-server-port={extra[0]}",
                f"--dashboard-agent-listen-port={extra[1]}",
                f"--metrics-export-port={extra[2]}",
                f"--runtime-env-agent-port={extra[3]}", *QUIET]

    def start(self) -> RayCluster:
        env = self.env()
        env.pop("RAY_ADDRESS")
        for attempt in (1, 2):  # a raylet that fails to register is rare; try once more
            r = subprocess.run(self.command(), env=env, cwd=self.workdir,
                               capture_output=True, text=True, timeout=180)
            if r.returncode == 0:
                break
            self.stop()
            if attempt == 2:
                raise RuntimeError(f"ray start failed: {r.stdout}\n{r.stderr[-3000:]}")
        if self.with_dashboard:
            wait_for(self._dashboard_up, 60, "the Ray dashboard (job and state API)")
        return self

    def _dashboard_up(self) -> bool:
        import requests

        try:
            return requests.get(self.dashboard + "/api/version", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def driver(self, script: str, *args: str) -> list[str]:
        """The command that runs ``script`` as a driver of this cluster (its file written)."""
        path = self.workdir / f"driver_{uuid.uuid4().hex[:6]}.py"
        path.write_text(script)
        return [sys.executable, str(path), *args]

    def run_driver(self, script: str, *args: str, timeout: float = 180,
                   **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.driver(script, *args), env=self.env(**env),
                              cwd=self.workdir, capture_output=True, text=True,
                              timeout=timeout)

    def add_node(self, workdir: Path, num_cpus: int = 1) -> str:
        """Another raylet joining this cluster on this machine (a node of its own id);
        returns the marker its processes carry, for :meth:`remove_nodes`. A raylet that
        does not register within Ray's 30 s (a loaded GCS) is killed, and one more tried,
        as :meth:`start` does for the head."""
        for _ in range(2):
            mark = uuid.uuid4().hex
            env = self.env(**{MARK: mark})
            env.pop("RAY_ADDRESS")
            r = subprocess.run([str(Path(sys.executable).parent / "ray"), "start",
                                f"--address={self.address}", f"--num-cpus={num_cpus}",
                                "--node-ip-address=127.0.0.1", "--disable-usage-stats",
                                *QUIET], env=env, cwd=workdir, capture_output=True, text=True,
                               timeout=180)
            if r.returncode == 0:
                return mark
            for pid in processes_with_env(MARK, mark):  # nothing of it stays half-joined
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        raise RuntimeError(f"ray start (a worker node) failed twice: {r.stderr[-3000:]}")

    def remove_nodes(self, marks: list[str], timeout: float = 60) -> None:
        """Nodes added with :meth:`add_node` leave: their raylets are told to stop (so the
        GCS hears at once instead of after missed heartbeats, while it would still place
        the next module's actors there), then this waits until the cluster counts only
        its head alive."""
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            pids = [p for m in marks for p in processes_with_env(MARK, m)]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while any(processes_with_env(MARK, m) for m in marks) and \
                    time.monotonic() < deadline:
                time.sleep(0.1)
        wait_for(lambda: len(self.alive("nodes")) == 1, timeout,
                 "the removed nodes to count as gone (only the head alive)", interval=1)

    def alive(self, resource: str, **equal: str) -> list[dict]:
        """Ray's state API through the dashboard, from this process: the ``resource``
        (``actors``, ``nodes``) alive, filtered by ``equal``; asking costs a request, not
        a driver (a driver's start is seconds of CPU on a loaded machine)."""
        from ray.util.state import list_actors, list_nodes

        listing = {"actors": list_actors, "nodes": list_nodes}[resource]
        filters = [("state", "=", "ALIVE"), *((k, "=", v) for k, v in equal.items())]
        return [dataclasses.asdict(x) for x in
                listing(address=self.dashboard, filters=filters, limit=10_000,
                        raise_on_missing_output=False, timeout=30)]

    def pids(self) -> list[int]:
        return processes_with_env(MARK, self.mark)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL for what is left after a short grace: gcs_server, raylet
        and the autoscaler's monitor outlive a SIGTERM sent to all at once (measured: still
        there 12 s later), and nothing of a test's cluster needs a clean shutdown."""
        for sig, grace in ((signal.SIGTERM, 2), (signal.SIGKILL, 10)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        subprocess.run(["rm", "-rf", str(self.temp_dir)], check=False)
