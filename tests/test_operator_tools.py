"""Operator tools: the state timeline exported for Perfetto, the status page in headless
Chromium, and `rl-insight doctor` on a healthy simulated run and on broken ones."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO, wait_for

pytestmark = pytest.mark.integration

EMIT = '''
import sys, time, rl_insight
rl_insight.init("ops", sys.argv[1])
for step in range(2):
    for r in range(2):
        for s in ("vllm_generate", "vllm_sleep"):
            with rl_insight.trace_state(s, state_lane_id=f"replica_{r}", step=step):
                time.sleep(0.01)
    with rl_insight.trace_state("actor_update", state_lane_id="rank_0", step=step):
        time.sleep(0.01)
rl_insight.trace_span(name="tool_call", start_time_ns=time.time_ns() - 10**6,
                      end_time_ns=time.time_ns(), attributes={"state_lane_id": "traj_1"})
rl_insight.finish()
'''

# The Chrome trace-event format (the "JSON Object Format" of Google's Trace Event
# Format document, which Perfetto imports): events with ph; "X" complete events need
# name, ts, dur, pid, tid; "M" metadata events name processes and threads.
CHROME_X = {"name": str, "ph": str, "ts": (int, float), "dur": (int, float), "pid": int,
            "tid": int}


def validate_chrome_trace(doc: dict) -> None:
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "M"), ev
        if ev["ph"] == "X":
            for key, typ in CHROME_X.items():
                assert isinstance(ev[key], typ), (key, ev)
            assert ev["dur"] >= 0 and ev["ts"] > 0
        else:
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index",
                                  "thread_sort_index") and "args" in ev
    json.dumps(doc)


def test_traces_export_one_track_per_lane(ray_world, tmp_path):
    cli, url = ray_world.cli, ray_world.url  # the shared server: this run is its own
    env = {k: v for k, v in cli.env.items() if not k.startswith("RL_INSIGHT_")}
    r = subprocess.run([sys.executable, "-c", EMIT, "timeline"], env={
        **env, "RL_INSIGHT_SERVER_URL": url, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run.json"
    r = cli.run("traces", "export", "--format", "chrome-json", "--project", "ops",
                "--experiment-name", "timeline", "-o", str(out), "--server-url", url)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    validate_chrome_trace(doc)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
               if e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["rank_0", "replica_0", "replica_1", "traj_1"]
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["name"] == "process_name"}
    assert procs[next(p for (p, _), n in threads.items() if n == "replica_0")] == \
        "rollout replicas"
    assert procs[next(p for (p, _), n in threads.items() if n == "rank_0")] == "trainer ranks"
    by_lane: dict[str, list] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_lane.setdefault(threads[(e["pid"], e["tid"])], []).append(e["name"])
    assert by_lane["replica_0"] == ["vllm_generate", "vllm_sleep"] * 2
    assert by_lane["rank_0"] == ["actor_update"] * 2
    r = cli.run("traces", "export", "--project", "ops", "--experiment", "nope", "-o",
                str(tmp_path / "x.json"), "--server-url", url)
    assert r.returncode != 0 and "no state spans" in r.stderr


@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is installed "
                    "by `make test`")
def test_status_page_in_headless_chromium(ray_world, tmp_path):
    cli, url = ray_world.cli, ray_world.url  # the shared server: this run is its own
    env = {k: v for k, v in cli.env.items() if not k.startswith("RL_INSIGHT_")}
    subprocess.run([sys.executable, "-c", EMIT, "status-page"], env={
        **env, "RL_INSIGHT_SERVER_URL": url, "PYTHONPATH": str(REPO)}, check=True,
        capture_output=True, timeout=60)
    requests.post(url + "/api/v1/prometheus/targets", json={
        "job_name": "vllm", "targets": [f"127.0.0.1:{cli.setting('server.port')}"],
        "labels": [{"replica": 0}], "project": "ops", "experiment_name": "status-page"},
        timeout=5).raise_for_status()
    wait_for(lambda: "up" in requests.get(url + "/api/v1/experiments/targets", params={
        "project": "ops", "experiment_name": "status-page"}).json()["targets"][0]["health"],
        20, "Prometheus to scrape the registered target")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chrome'}"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", url + "/"], capture_output=True,
                         text=True, timeout=120).stdout
    for text in ("RL-Insight", "prometheus", "ready", "ops", "status-page", "replica_0",
                 "rank_0", "vllm", "up", "http-equiv=\"refresh\""):
        assert text in dom, text
    shot = Path(os.environ.get("TEST_ARTIFACTS_DIR", tmp_path)) / "status-page.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1280,1000",
                    url + "/"], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000
    print(f"\nstatus page screenshot: {shot}")


# -- doctor --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def healthy(ray_world):
    """A simulated run that keeps its endpoints up, on the shared server and cluster
    (tests/worlds.py: its nodes carry the server's address and VERL_RL_INSIGHT_ENABLE)."""
    url, cluster = ray_world.url, ray_world.cluster
    sim = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "simulate_rl.py"), "--steps", "2",
         "--replicas", "2", "--ranks", "1", "--step-seconds", "2", "--linger", "600",
         "--project", "doc", "--experiment-name", "healthy"],
        env=cluster.env(), cwd=cluster.workdir, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    said: list[str] = []

    def steps_done() -> bool:
        said.append(sim.stdout.readline())
        return "keeping the endpoints up" in said[-1] or sim.poll() is not None
    try:
        wait_for(steps_done, 180, "the simulated run to finish its steps")
        assert sim.poll() is None, "".join(said)[-4000:] + sim.stdout.read()[-4000:]
        wait_for(lambda: all(t.get("health") == "up" for t in requests.get(
            url + "/api/v1/experiments/targets", params={"project": "doc",
                                                         "experiment_name": "healthy"}
        ).json()["targets"]), 30, "the run's targets to be up")
        yield ray_world.cli, url, cluster
    finally:
        sim.kill()
        sim.wait()


class SlowEngine:
    """A loopback /metrics serving vLLM's running-requests gauge: at once, or (``slow``)
    3 s late, past the 1-s scrape timeout of the Ray world's Prometheus."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.slow = False
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if engine.slow:
                    time.sleep(3.0)  # not a wait: the slow answer, past the timeout
                body = b'vllm:num_requests_running{model_name="m"} 0\n'
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # Prometheus hung up: it timed out
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> SlowEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def doctor(cluster, url: str, *extra: str, **env) -> tuple[int, list[dict]]:
    r = subprocess.run([sys.executable, "-m", "rl_insight", "doctor", "--json",
                        "--server-url", url, "--project", "doc", "--experiment", "healthy",
                        *extra], env=cluster.env(**env), cwd=REPO, capture_output=True,
                       text=True, timeout=180)
    return r.returncode, json.loads(r.stdout)


def problems(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks if c["status"] == "problem"}


def test_doctor_on_a_healthy_run(healthy):
    cli, url, cluster = healthy
    code, checks = doctor(cluster, url)
    assert problems(checks) == {} and code == 0, checks
    status = {c["name"]: c["status"] for c in checks}
    for name in ("RL_INSIGHT_SERVER_URL", "VERL_RL_INSIGHT_ENABLE", "server", "token",
                 "service prometheus", "traces", "targets", "replicas", "engine statistics",
                 "lanes", "workers"):
        assert status[name] == "ok", (name, checks)
    text = subprocess.run([sys.executable, "-m", "rl_insight", "doctor", "--server-url",
                           url, "--no-ray"], env=cluster.env(), capture_output=True,
                          text=True, timeout=60).stdout
    assert "all checks passed" in text


def test_doctor_names_each_problem_with_its_fix(healthy):
    cli, url, cluster = healthy
    code, checks = doctor(cluster, "http://127.0.0.1:9", "--no-ray")
    assert code != 0 and "cannot reach" in problems(checks)["server"]["detail"]
    assert problems(checks)["server"]["fix"]

    # a replica target down
    requests.post(url + "/api/v1/prometheus/targets", json={
        "job_name": "vllm", "targets": ["127.0.0.1:9"], "labels": [{"replica": "9"}],
        "project": "doc", "experiment_name": "healthy"}, timeout=5).raise_for_status()
    wait_for(lambda: any(t.get("health") == "down" for t in requests.get(
        url + "/api/v1/experiments/targets", params={"project": "doc",
                                                     "experiment_name": "healthy"}
    ).json()["targets"]), 30, "Prometheus to find the target down")
    code, checks = doctor(cluster, url, "--no-ray")
    down = problems(checks)["target vllm 127.0.0.1:9"]
    assert code != 0 and "down" in down["detail"] and down["fix"]
    requests.delete(url + "/api/v1/prometheus/targets", json={
        "job_name": "vllm", "targets": ["127.0.0.1:9"], "labels": [{"replica": "9"}],
        "project": "doc", "experiment_name": "healthy"}, timeout=5).raise_for_status()

    # a replica slow to answer (a busy host: its scrapes time out, then answer again): a
    # warning that says so, not a target down (a blocked one stays down: test_multihost)
    with SlowEngine() as slow:
        target = {"job_name": "vllm", "targets": [slow.address],
                  "labels": [{"replica": "8"}], "project": "doc",
                  "experiment_name": "healthy"}
        requests.post(url + "/api/v1/prometheus/targets", json=target,
                      timeout=5).raise_for_status()

        def health() -> tuple[str, str]:
            rows = requests.get(url + "/api/v1/experiments/targets", timeout=10, params={
                "project": "doc", "experiment_name": "healthy"}).json()["targets"]
            t = next((t for t in rows if t["target"] == slow.address), {})
            return t.get("health", ""), t.get("last_error", "")
        wait_for(lambda: health()[0] == "up", 60, "Prometheus to scrape the engine")
        slow.slow = True
        wait_for(lambda: "deadline" in health()[1], 60, "the engine's scrape to time out")
        doc = subprocess.Popen(
            [sys.executable, "-m", "rl_insight", "doctor", "--json", "--server-url", url,
             "--project", "doc", "--experiment", "healthy", "--no-ray"],
            env=cluster.env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        said: list[str] = []
        try:  # doctor found it down and watches it: it answers again
            wait_for(lambda: said.append(doc.stderr.readline()) or "watching" in said[-1]
                     or doc.poll() is not None, 120, "doctor to watch the slow target")
            slow.slow = False
            out, err = doc.communicate(timeout=120)
        finally:
            doc.kill()
        assert "watching" in said[-1], "".join(said) + err
        checks = json.loads(out)
        got = {c["name"]: c for c in checks}[f"target vllm {slow.address}"]
        assert got["status"] == "warn" and "timed out" in got["detail"], got
        assert "scrape_interval" in got["fix"]
        assert "engine statistics" not in problems(checks), problems(checks)
        requests.delete(url + "/api/v1/prometheus/targets", json=target,
                        timeout=5).raise_for_status()

    # a worker missing the variable (the job's runtime env switches monitoring off)
    code, checks = doctor(cluster, url, VERL_RL_INSIGHT_ENABLE="1")
    assert "workers" not in problems(checks)
    script = cluster.workdir / "inside_job.py"
    script.write_text(
        "import json, ray\nfrom rl_insight.commands import doctor\n"
        "ray.init(runtime_env={'env_vars': {'VERL_RL_INSIGHT_ENABLE': '0'}})\n"
        "print(json.dumps(doctor.as_json(doctor.run(project='doc', "
        "experiment='healthy'))))\n")
    r = subprocess.run([sys.executable, str(script)], env=cluster.env(), cwd=REPO,
                       capture_output=True, text=True, timeout=180)
    workers = problems(json.loads(r.stdout.strip().splitlines()[-1]))["workers"]
    assert "misses VERL_RL_INSIGHT_ENABLE" in workers["detail"] and workers["fix"]

    # Prometheus stopped (frozen: the supervisor sees it stop answering)
    report = requests.get(url + "/api/v1/services").json()
    pid = next(s["pid"] for s in report["services"] if s["name"] == "prometheus")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not next(s for s in requests.get(url + "/api/v1/services").json()
                                  ["services"] if s["name"] == "prometheus")["ready"],
                 30, "the server to notice Prometheus stopped")
        code, checks = doctor(cluster, url, "--no-ray")
        prom = problems(checks)["service prometheus"]
        assert code != 0 and prom["fix"]
    finally:
        os.kill(pid, signal.SIGCONT)
