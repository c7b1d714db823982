"""`make pictures`: a simulated RL run against a fresh server, then the README's pictures
of the training overview and the state timeline, drawn from Prometheus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    home = tempfile.mkdtemp(prefix="rl-insight-pictures-")
    env = {**os.environ, "RL_INSIGHT_HOME": home, "RL_INSIGHT_HOST": "127.0.0.1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    cli = [sys.executable, "-m", "rl_insight"]
    ports = ["--set", "prometheus.scrape_interval=1s", "--set", "tempo.enabled=false",
             "--set", "grafana.enabled=false",
             # the drifting run's short baseline: 2 + 8 steps (docs/anatomy.md)
             "--set", "changes.warmup_steps=2", "--set", "changes.baseline_min_steps=8",
             "--set", "changes.rank_interval_s=1"]
    subprocess.run(cli + ["server", "start", "--detach", *ports], env=env, check=True,
                   cwd=REPO)
    try:
        env["RL_INSIGHT_SERVER_URL"] = "http://127.0.0.1:18080"
        r = subprocess.run([sys.executable, "examples/simulate_rl.py", "--steps", "6",
                            "--replicas", "4", "--ranks", "2", "--mode", "sync",
                            "--step-seconds", "5", "--linger", "6", "--project", "demo",
                            "--experiment-name", "pictures",
                            # the engines trace their requests; step 4 has one
                            # 30,000-token request: the "why" picture explains it
                            "--engine-traces", "--long-request", "1:4:30000"],
                           env=env, cwd=REPO,
                           capture_output=True, text=True, check=True)
        run = json.loads(next(x for x in r.stdout.splitlines()
                              if x.startswith("SIMULATION "))[len("SIMULATION "):])
        subprocess.run([sys.executable, "-m", "dashboards.render", "--prometheus",
                        "http://127.0.0.1:9090", "--project", run["project"],
                        "--experiment", run["experiment_name"], "--start",
                        str(run["t_start"]), "--end", str(run["t_end"] + 3),
                        "--server", "http://127.0.0.1:18080", "--why-step", "4"],
                       env=env, cwd=REPO, check=True)
        # what changed: replica 1's KV cache shrinks from step 13 until it preempts
        r = subprocess.run([sys.executable, "examples/simulate_rl.py", "--steps", "28",
                            "--replicas", "2", "--ranks", "1", "--step-seconds", "1.5",
                            "--val-every", "0", "--no-transfer-queue", "--drift",
                            "kv-shrink:1:13", "--linger", "8", "--project", "demo",
                            "--experiment-name", "drift"], env=env, cwd=REPO,
                           capture_output=True, text=True, check=True)
        subprocess.run([sys.executable, "-m", "dashboards.render", "--prometheus",
                        "http://127.0.0.1:9090", "--project", "demo", "--experiment",
                        "drift", "--start", "0", "--end", "0", "--server",
                        "http://127.0.0.1:18080", "--what-changed"],
                       env=env, cwd=REPO, check=True)
        # a slow rank traced to its code: gloo ranks on Ray with torch's Flight Recorder,
        # rank 2 busy-looping from step 5, rank 1's data late from step 9
        subprocess.run([sys.executable, "examples/straggler_ranks.py", "--project", "demo",
                        "--experiment-name", "stragglers", "--profile-at", "5"],
                       env=env, cwd=REPO, capture_output=True, text=True, check=True)
        subprocess.run([sys.executable, "-m", "dashboards.render", "--prometheus",
                        "http://127.0.0.1:9090", "--project", "demo", "--experiment",
                        "stragglers", "--start", "0", "--end", "0", "--server",
                        "http://127.0.0.1:18080", "--culprit-step", "6"],
                       env=env, cwd=REPO, check=True)
        # an imported run: verl's torch profiler on three gloo ranks, rank 2 slow from
        # step 2, its files imported with a merged timeline
        traces = Path(home) / "profile"
        subprocess.run([sys.executable, "examples/profiled_ranks.py", "--out", str(traces),
                        "--discrete-last"], env={**env, "RL_INSIGHT_SERVER_URL": ""},
                       cwd=REPO, capture_output=True, text=True, check=True)
        subprocess.run(cli + ["import", str(traces), "--profiler", "torch", "--project",
                              "demo", "--experiment-name", "profiled", "--timeline",
                              str(traces / "merged.json")], env=env, cwd=REPO, check=True)
        subprocess.run([sys.executable, "-m", "dashboards.render", "--prometheus",
                        "http://127.0.0.1:9090", "--project", "demo", "--experiment",
                        "profiled", "--start", "0", "--end", "0", "--server",
                        "http://127.0.0.1:18080", "--imported-step", "3", "--timeline",
                        str(traces / "merged.json")], env=env, cwd=REPO, check=True)
    finally:
        subprocess.run(cli + ["server", "stop"], env=env, cwd=REPO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
