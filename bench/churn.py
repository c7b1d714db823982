"""Runs come and go for weeks: does anything that lives long grow with them?

    python bench/churn.py [--runs 2000] [--trajectories 50] [--forget-after 2]

One process drives run after run through the real client API (init, metrics, replica
and rank states, one agent-loop trajectory lane per trajectory, finish), with the real
hub and lane cores in the process (the path outside Ray), against a real server started
with the CLI (Prometheus, Tempo and Grafana off; spans relayed to a sink that answers
200; finished runs' pushed groups expire after 5 s). 2,000 runs of 50 trajectories are
100,000 trajectories. Every ``--sample`` runs, the RSS of the driving process (client,
hub, lanes) and of the server is recorded, with what each keeps (runs, lanes, jobs,
senders). Growth is the RSS of the last quarter's samples against the samples right
after the warm-up (the first quarter), as a ratio: flat is within 10 %.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.intake import Sink  # noqa: E402
from rl_insight.common import netaddr  # noqa: E402

OFF = ("prometheus.enabled=false", "tempo.enabled=false", "grafana.enabled=false",
       "alertmanager.enabled=false", "push.finished_ttl_s=5")


def start_server(home: Path, sink: Sink) -> tuple[subprocess.Popen, str]:
    port = netaddr.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    env.update({"RL_INSIGHT_HOME": str(home), "PYTHONPATH": str(REPO)})
    args = [sys.executable, "-m", "rl_insight", "server", "start", "--set",
            "host=127.0.0.1", "--set", f"server.port={port}", "--set",
            f"traces.relay_url={sink.url}", *[x for o in OFF for x in ("--set", o)]]
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    print("waiting for the server", end="", flush=True)
    while time.time() < deadline:
        try:
            if requests.get(url + "/healthz", timeout=1).status_code == 200:
                print(" ready", flush=True)
                return proc, url
        except requests.RequestException:
            pass
        print(".", end="", flush=True)
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the server did not become ready; see {home}/logs")


def server_kept(url: str) -> dict[str, int]:
    """What the server keeps per lane and run, from its own API."""
    lanes = requests.get(url + "/api/v1/lanes", timeout=30).json()["lanes"]
    anatomy = requests.get(url + "/api/v1/anatomy/runs", timeout=30).json()["runs"]
    return {"server_lanes": len(lanes), "server_anatomy_runs": len(anatomy)}


def one_run(rl, i: int, trajectories: int) -> None:
    rl.init(project="churn", experiment_name=f"run-{i}")
    for step in (1, 2):
        rl.metric_gauge("actor_pg_loss", 0.1 * step)
        rl.metric_gauge("training_global_step", step)
        for r in range(2):
            with rl.trace_state("vllm_generate", state_lane_id=f"replica_{r}"):
                pass
        with rl.trace_state("actor_update", state_lane_id="rank_0"):
            pass
    for t in range(trajectories):
        with rl.trace_state("tool_call", state_lane_id=f"traj_{i}_{t}"):
            pass
    rl.finish()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--trajectories", type=int, default=50)
    ap.add_argument("--forget-after", type=float, default=2.0,
                    help="client.forget_after_s for the run (the default is 600 s)")
    ap.add_argument("--sample", type=int, default=50, help="runs between samples")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "churn.json"))
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rl-churn-"))
    sink = Sink()
    proc, url = start_server(home, sink)
    os.environ.update({"RL_INSIGHT_SERVER_URL": url,
                       "RL_INSIGHT_CLIENT_FORGET_AFTER_S": str(args.forget_after),
                       "RL_INSIGHT_CLIENT_HUB_PUSH_INTERVAL_S": "0.2",
                       "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "0.2",
                       "RL_INSIGHT_HOME": str(home / "client")})
    import rl_insight as rl
    from rl_insight.client.runtime import RUNTIME

    server = psutil.Process(json.loads((home / "run" / "server.json").read_text())["pid"])
    me = psutil.Process()
    samples = []
    t0 = time.monotonic()
    try:
        for i in range(args.runs):
            one_run(rl, i, args.trajectories)
            if (i + 1) % args.sample == 0:
                gc.collect()
                t = RUNTIME.client.transport()
                samples.append({
                    "runs": i + 1, "t_s": round(time.monotonic() - t0, 1),
                    "client_rss_mb": round(me.memory_info().rss / 2**20, 1),
                    "server_rss_mb": round(server.memory_info().rss / 2**20, 1),
                    "hub_runs": len(t.hub.runs.identities()), "hub_jobs": len(t.hub.jobs),
                    "lane_runs": len(t.lanes.runs.identities()),
                    "lanes": len(t.lanes.lanes), "senders": t.hub.marks.senders(),
                    **server_kept(url)})
                print(json.dumps(samples[-1]), flush=True)
    finally:
        rl.finish()
        subprocess.run([sys.executable, "-m", "rl_insight", "server", "stop"],
                       env={**os.environ, "RL_INSIGHT_HOME": str(home)}, timeout=60,
                       capture_output=True)
        proc.wait(30)
        sink.httpd.shutdown()
    quarter = max(1, len(samples) // 4)
    out = {"runs": args.runs, "trajectories": args.runs * args.trajectories,
           "forget_after_s": args.forget_after, "seconds": round(time.monotonic() - t0),
           "samples": samples}
    for who in ("client", "server"):
        after_warm = statistics.median(s[f"{who}_rss_mb"] for s in samples[quarter:2 * quarter])
        last = statistics.median(s[f"{who}_rss_mb"] for s in samples[-quarter:])
        out[f"{who}_growth"] = round(last / after_warm, 3)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"client RSS growth after warm-up: x{out['client_growth']}, server: "
          f"x{out['server_growth']} ({args.runs} runs, {out['trajectories']} trajectories, "
          f"{out['seconds']} s); kept at the end: {json.dumps(samples[-1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
