"""The main job behind `make demo`: install what can be installed, start the server
stack, run a short simulated RL run on a local Ray cluster against it, say where to
look and what each dashboard shows, and stop everything it started.

It runs the same commands a user would type, and prints each one first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import requests

from rl_insight import config
from rl_insight.common import netaddr

REPO = Path(__file__).resolve().parents[1]
PORT_KEYS = ["server.port", "prometheus.port", "tempo.port", "tempo.grpc_port",
             "tempo.otlp_grpc_port", "tempo.otlp_http_port", "grafana.port",
             "alertmanager.port"]


def rl_insight(*args: str, check: bool = True) -> int:
    print(f"\n$ rl-insight {' '.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "rl_insight", *args], cwd=REPO)
    if check and code != 0:
        raise SystemExit(f"demo: `rl-insight {' '.join(args)}` failed (exit {code}); "
                         "see its message above")
    return code


def port_overrides(settings: config.Settings) -> list[str]:
    """Keep the documented ports; move only those another process already holds."""
    out = []
    for key in PORT_KEYS:
        section, field = key.split(".")
        port = getattr(getattr(settings, section), field)
        if netaddr.port_in_use(settings.bind_host(section), port):
            new = netaddr.free_port()
            print(f"demo: port {port} ({key}) is taken on this machine; using {new}")
            out += ["--set", f"{key}={new}"]
    return out


SIM = ["--steps", "4", "--replicas", "2", "--ranks", "2", "--mode", "sync",
       "--step-seconds", "4", "--linger", "8", "--project", "rl-insight-demo",
       "--experiment-name", "demo",
       "--straggler", "1:1.5"]  # replica 1 a little slow: the step anatomy shows it

DASHBOARDS = [
    ("RL-Insight · Training overview", "rewards, losses, KL, step time by phase, throughput"),
    ("RL-Insight · Step anatomy", "where each step's time went: rollout, trainer phases, "
     "weight update; the straggler replica, idle replicas and ranks"),
    ("RL-Insight · Rollout · vLLM", "each replica's running and waiting requests, KV cache, "
     "tokens/s, TTFT and latency quantiles, preemptions, sleep state"),
    ("RL-Insight · TransferQueue", "the real TransferQueue of the run: partitions, "
     "production and consumption, requests, storage units"),
    ("RL-Insight · State timeline", "which replica generated, slept or woke, and which rank "
     "updated, when (Prometheus, and Tempo spans when Tempo runs)"),
    ("RL-Insight · Hardware", "CPU, memory, network, GPUs and NPUs of every node"),
    ("RL-Insight · vLLM · synchronous (and the other backend/mode pairs)",
     "everything above that applies to one kind of run"),
]


def simulate(server: str) -> None:
    """A short simulated run (a local Ray cluster for its duration)."""
    print(f"\n$ RL_INSIGHT_SERVER_URL={server} python examples/simulate_rl.py "
          + " ".join(SIM), flush=True)
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": server, "RAY_USAGE_STATS_ENABLED": "0"}
    code = subprocess.call([sys.executable, str(REPO / "examples" / "simulate_rl.py"), *SIM],
                           env=env, cwd=REPO)
    if code != 0:
        print(f"demo: the simulation failed (exit {code}); see its messages above")


def show(prom: str, server: str) -> None:
    """What arrived, and where to look."""
    def count(query: str) -> int:
        try:
            r = requests.get(prom + "/api/v1/query", params={"query": query}, timeout=5)
            return len(r.json()["data"]["result"])
        except (requests.RequestException, ValueError, KeyError):
            return 0

    sel = 'project="rl-insight-demo",experiment_name="demo"'
    print("\ndemo: what reached Prometheus for run rl-insight-demo/demo:")
    for what, query in (("trainer scalars", f'{{job="rl_insight",{sel}}}'),
                        ("rollout engine series", f'{{job="vllm",{sel}}}'),
                        ("TransferQueue series", f'{{job=~"transfer_queue.*",{sel}}}'),
                        ("lane state series", f'{{job="rl_insight_lanes",{sel}}}')):
        print(f"  {what:<24} {count(query):>5}")
    print(f"\nWhere to look:\n  Prometheus  {prom}/graph  (try: "
          "rl_insight_monitor_critic_score_mean)\n"
          f"  the server  {server}/api/v1/experiments and {server}/docs\n"
          "  Grafana     the URL `rl-insight server status` prints, once Grafana is "
          "installed, folder RL-Insight:")
    for title, what in DASHBOARDS:
        print(f"    {title}: {what}")


def main() -> int:
    os.environ.setdefault("RL_INSIGHT_HOME", str(REPO / ".demo-home"))
    os.environ.setdefault("RL_INSIGHT_HOST", "127.0.0.1")
    print(f"demo: RL_INSIGHT_HOME={os.environ['RL_INSIGHT_HOME']}")
    if rl_insight("server", "install", check=False) != 0:
        print("demo: continuing with the services that are installed")
    settings = config.load()
    overrides = port_overrides(settings)
    settings = config.load(overrides=[o for o in overrides if o != "--set"])
    started = False
    try:
        code = rl_insight("server", "start", "--detach", *overrides, check=False)
        started = True
        if code not in (0, 1):
            raise SystemExit("demo: the server did not start; see the message above")
        prom = netaddr.http_url("127.0.0.1", settings.prometheus.port)
        server = netaddr.http_url("127.0.0.1", settings.server.port)
        simulate(server)
        show(prom, server)
        rl_insight("report", "--server-url", server, "--project", "rl-insight-demo",
                   "--experiment-name", "demo", check=False)
        rl_insight("alerts", "--server-url", server, "--project", "rl-insight-demo",
                   "--experiment-name", "demo", check=False)
        rl_insight("server", "status", *overrides, check=False)
    finally:
        if started:
            rl_insight("server", "stop", *overrides, check=False)
    print("\ndemo: done. Start it yourself with `rl-insight server start` "
          "(`.venv/bin/rl-insight` in this checkout).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
