"""`make pictures`, second part: Ray's own dashboard (ray[default]) listing the hub and the
lane actors with what they hold, drawn by headless Chromium into
docs/img/ray-dashboard-actors.png."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img" / "ray-dashboard-actors.png"
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--virtual-time-budget=15000"]


def main() -> int:
    sys.path.insert(0, str(REPO))
    from rl_insight.common import netaddr

    dash_port, server_port = netaddr.free_ports(2)
    home = tempfile.mkdtemp(prefix="rl-insight-ray-picture-")
    env = {**os.environ, "RL_INSIGHT_HOME": home, "RL_INSIGHT_HOST": "127.0.0.1"}
    cli = [sys.executable, "-m", "rl_insight", "server"]
    print("starting the server (no services) and a local Ray cluster with its dashboard")
    subprocess.run(cli + ["start", "--detach", "--set", f"server.port={server_port}",
                          "--set", "prometheus.enabled=false", "--set", "tempo.enabled=false",
                          "--set", "grafana.enabled=false"], env=env, check=True, cwd=REPO)
    os.environ.update(RL_INSIGHT_HOME=home, RAY_AUTH_MODE="disabled",
                      RL_INSIGHT_SERVER_URL=f"http://127.0.0.1:{server_port}")
    import ray

    import rl_insight

    try:
        att = rl_insight.ray.attach(project="gsm8k-ppo", experiment_name="run-42",
                                    include_dashboard=True, dashboard_port=dash_port,
                                    dashboard_host="127.0.0.1", num_cpus=2)
        if not att.ok:
            raise SystemExit(f"attach failed: {att.message}")

        @ray.remote
        def replica(i: int) -> bool:
            with rl_insight.trace_state("generate", state_lane_id=f"replica_{i}"):
                rl_insight.metric_gauge("demo_value", float(i))
            return rl_insight.flush(10)

        ray.get([replica.remote(i) for i in range(2)])
        time.sleep(5)  # the dashboard's actor table refreshes from Ray's state API
        url = f"http://127.0.0.1:{dash_port}/#/actors"
        print(f"drawing {url} into {OUT}")
        subprocess.run([*CHROMIUM, f"--screenshot={OUT}", "--window-size=1600,900", url],
                       check=True, capture_output=True, timeout=180)
    finally:
        ray.shutdown()
        subprocess.run(cli + ["stop"], env=env, cwd=REPO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
