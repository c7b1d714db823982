"""The main job behind `make demo`: install what can be installed, start the server
stack, show that Prometheus scrapes it, print status, and stop everything it started.

It runs the same `rl-insight` commands a user would type, and prints each one first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import requests

from rl_insight import config, netaddr

REPO = Path(__file__).resolve().parents[1]
PORT_KEYS = ["server.port", "prometheus.port", "tempo.port", "tempo.grpc_port",
             "tempo.otlp_grpc_port", "tempo.otlp_http_port", "grafana.port"]


def rl_insight(*args: str, check: bool = True) -> int:
    print(f"\n$ rl-insight {' '.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "rl_insight.cli", *args], cwd=REPO)
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
        print("\ndemo: waiting for Prometheus to scrape the server ...", flush=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = requests.get(prom + "/api/v1/query",
                                 params={"query": 'up{job="rl_insight_server"}'}, timeout=2)
                result = r.json()["data"]["result"]
                if result and result[0]["value"][1] == "1":
                    print(f"demo: Prometheus at {prom} scrapes the server "
                          f"(up{{job=\"rl_insight_server\"}} = 1)")
                    break
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(1)
        else:
            print("demo: Prometheus did not report the server as up within 30s")
        rl_insight("server", "status", *overrides, check=False)
    finally:
        if started:
            rl_insight("server", "stop", *overrides, check=False)
    print("\ndemo: done. Start it yourself with `rl-insight server start` "
          "(`.venv/bin/rl-insight` in this checkout).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
