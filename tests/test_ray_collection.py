"""Ray-native collection on a real local Ray cluster, with the server and a real
Prometheus: job submission with the runtime-env files, the hub's life, a driver that
exits hard, lanes and the pool, and two jobs side by side."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from rl_insight.common import resources
from tests.conftest import prom_query, wait_equal, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(ray_world):
    """The shared server (tests/worlds.py); every job here names its own run."""
    return ray_world.cli, ray_world.url


@pytest.fixture(scope="module")
def cluster(ray_world):
    # the operator's way: the nodes themselves carry the server's address
    return ray_world.cluster


@pytest.fixture(scope="module", autouse=True)
def nameless_job(cluster):
    """NAMELESS_SCRIPT's job, started as the module starts: its 30 s of holding pass while
    the module's other tests run (the test that reads it is the module's last)."""
    log = tempfile.TemporaryFile("w+")  # a file: no pipe fills up meanwhile
    proc = subprocess.Popen(cluster.driver(NAMELESS_SCRIPT), env=cluster.env(),
                            cwd=cluster.workdir, stdout=log, stderr=subprocess.STDOUT,
                            text=True)
    yield proc, log, time.monotonic()
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    log.close()


def prom_values(cli, query: str) -> dict[str, float]:
    """label 'task' (or '') -> value for every series of an instant query."""
    return {r["metric"].get("task", ""): float(r["value"][1])
            for r in prom_query(cli.prometheus, query)}


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"no RESULT line in:\n{out}")


JOB_SCRIPT = '''
import json, os, ray, rl_insight
ray.init()
rl_insight.init("proj", "job-submit")
VARS = ("RL_INSIGHT_SERVER_URL", "VERL_RL_INSIGHT_ENABLE")

@ray.remote
def task(i):
    rl_insight.metric_gauge("job_task_value", 10 + i, task=str(i))
    rl_insight.flush(10)
    return {v: os.environ.get(v) for v in VARS}

@ray.remote
class Trainer:
    def step(self):
        with rl_insight.trace_state("update_weights", state_lane_id="rank_0"):
            rl_insight.metric_gauge("job_actor_value", 2.0, task="actor")
        rl_insight.flush(10)
        return {v: os.environ.get(v) for v in VARS}

envs = ray.get([task.remote(i) for i in range(3)])
actor_env = ray.get(Trainer.remote().step.remote())
rl_insight.finish()
print("RESULT " + json.dumps({"tasks": envs, "actor": actor_env}))
'''


def test_job_submit_with_runtime_env_file(stack, cluster, tmp_path):
    cli, url = stack
    script = tmp_path / "job.py"
    script.write_text(JOB_SCRIPT)
    r = subprocess.run([str(Path(sys.executable).parent / "ray"), "job", "submit",
                        "--address", cluster.dashboard, "--runtime-env",
                        str(resources.runtime_env_file()), "--",
                        sys.executable, str(script)],
                       env=cluster.env(), cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = last_json(r.stdout)
    for env in result["tasks"] + [result["actor"]]:
        assert env == {"RL_INSIGHT_SERVER_URL": url, "VERL_RL_INSIGHT_ENABLE": "1"}
    q = 'rl_insight_monitor_job_task_value{project="proj",experiment_name="job-submit"}'
    got = wait_for(lambda: len(prom_values(cli, q)) == 3 and prom_values(cli, q), 20,
                   "the tasks' metrics in Prometheus")
    assert got == {"0": 10.0, "1": 11.0, "2": 12.0}
    assert wait_for(lambda: prom_values(cli, 'rl_insight_monitor_job_actor_value'
                                             '{experiment_name="job-submit"}'), 20,
                    "the actor's metric in Prometheus") == {"actor": 2.0}

    def lanes() -> list:  # the node's lane actor sends them at its next tick (5 s)
        got = requests.get(url + "/api/v1/lanes", params={"experiment_name": "job-submit"},
                           timeout=30).json()["lanes"]  # a loaded machine took over 5 s
        return [(ln["lane"], ln["states"]) for ln in got]
    wait_for(lambda: lanes(), 30, "the job's lane at the server")
    assert lanes() == [("rank_0", {"update_weights": 1})]


HUB_SCRIPT = '''
import json, os, sys, time, ray, rl_insight
from ray.util.state import list_actors
att = rl_insight.ray.attach(project="proj", experiment_name="hub-kill")
assert att.ok, att.message

def hub_rows():
    return [a for a in list_actors(filters=[("name", "=", "rl_insight_hub"),
                                            ("ray_namespace", "=", "rl_insight")],
                                   detail=True)]

rl_insight.metric_gauge("hub_phase", 1.0, task="before")
assert rl_insight.flush(10)
before = [(a.state, a.is_detached, a.pid) for a in hub_rows() if a.state == "ALIVE"]
ray.kill(rl_insight.ray.find_hub(), no_restart=False)
deadline = time.time() + 60
after = []
while time.time() < deadline:
    after = [(a.state, a.is_detached, a.pid) for a in hub_rows() if a.state == "ALIVE"]
    if after and after[0][2] != before[0][2]:
        break
    time.sleep(0.5)
rl_insight.metric_gauge("hub_phase", 2.0, task="after")
assert rl_insight.flush(20)
stats = rl_insight.ray.hub_stats()
print("RESULT " + json.dumps({"before": before, "after": after, "stats": stats}))
'''


def test_hub_is_detached_alive_and_comes_back_after_a_kill(stack, cluster):
    cli, url = stack
    r = cluster.run_driver(HUB_SCRIPT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = last_json(r.stdout)
    (state, detached, pid), = res["before"]
    assert state == "ALIVE" and detached is True
    assert res["after"] and res["after"][0][2] != pid, "the hub was restarted (new pid)"
    assert res["stats"]["events_received"] >= 1  # the new hub got the later metric
    q = 'rl_insight_monitor_hub_phase{experiment_name="hub-kill"}'
    wait_for(lambda: prom_values(cli, q).get("after") == 2.0, 20,
             "the metric sent after the hub's restart in Prometheus")


EXIT_SCRIPT = '''
import os, rl_insight
rl_insight.ray.attach(project="proj", experiment_name="os-exit")
for i in range(100):
    rl_insight.metric_gauge("last_words", float(i))
rl_insight.flush(5)      # handed over: the hub has acknowledged it
os._exit(0)              # no atexit, no finish()
'''


def test_driver_killed_with_os_exit_keeps_what_it_handed_over(stack, cluster):
    cli, _ = stack
    r = cluster.run_driver(EXIT_SCRIPT)
    assert r.returncode == 0, r.stderr[-2000:]
    wait_for(lambda: prom_values(cli, 'rl_insight_monitor_last_words'
                                      '{experiment_name="os-exit"}') == {"": 99.0},
             20, "the last metric of a driver that called os._exit")


LANES_SCRIPT = '''
import json, time, ray, rl_insight
from ray.util.state import list_actors
rl_insight.ray.attach(project="proj", experiment_name="lanes")
STATES = ["vllm_generate", "vllm_sleep", "vllm_wake_up", "vllm_release_kv_cache",
          "vllm_resume_kv_cache"]
for step in range(2):
    for r in range(8):
        for s in STATES:
            with rl_insight.trace_state(s, state_lane_id=f"replica_{r}", step=step):
                pass
    for r in range(4):
        for s in ("update_weights", "actor_update"):
            with rl_insight.trace_state(s, state_lane_id=f"rank_{r}", step=step):
                pass
t0 = time.time_ns()
for i in range(5000):
    rl_insight.trace_span(name="agent_loop", start_time_ns=t0 + i, end_time_ns=t0 + i + 1000,
                          attributes={"state_lane_id": f"traj_{i}"})
assert rl_insight.flush(30)
names = sorted(a.name for a in list_actors(filters=[("ray_namespace", "=", "lanes_ns")],
                                            limit=10000) if a.state == "ALIVE")
for n in names:
    if n.startswith("rl_insight_lane_"):
        ray.get(ray.get_actor(n, namespace="lanes_ns").flush.remote())
print("RESULT " + json.dumps({"actors": names}))
'''


def test_replica_and_rank_lanes_and_the_node_actor(stack, cluster):
    """A lane actor per replica; the rank lanes and 5,000 trajectory lanes of this node's
    processes all go to the node's one lane actor."""
    cli, url = stack
    r = cluster.run_driver(LANES_SCRIPT, RL_INSIGHT_CLIENT_RAY_NAMESPACE="lanes_ns")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    actors = last_json(r.stdout)["actors"]
    replicas = [f"rl_insight_lane_replica_{i}" for i in range(8)]
    assert set(replicas) <= set(actors)
    nodes = [a for a in actors if a.startswith("rl_insight_lane_node_")]
    assert len(nodes) == 1, actors  # one node in this cluster
    assert len(actors) == 1 + 8 + 1, actors  # the hub, the replicas' lanes, the node's

    def lanes():
        return requests.get(url + "/api/v1/lanes", params={"experiment_name": "lanes"},
                            timeout=10).json()["lanes"]

    rows = wait_for(lambda: (ls := lanes()) and len(ls) == 12 + 5000 and ls, 30,
                    "every lane's spans at the server")
    by_lane = {ln["lane"]: ln for ln in rows}
    for i in range(8):
        assert by_lane[f"replica_{i}"]["states"] == {
            s: 2 for s in ("vllm_generate", "vllm_sleep", "vllm_wake_up",
                           "vllm_release_kv_cache", "vllm_resume_kv_cache")}
    for i in range(4):
        assert by_lane[f"rank_{i}"]["states"] == {"update_weights": 2, "actor_update": 2}
    assert sum(1 for name in by_lane if name.startswith("traj_")) == 5000
    q = 'rl_insight_monitor_state_duration_seconds_count{experiment_name="lanes"}'
    # every lane's series, once Prometheus has scraped what each lane actor pushed
    wait_equal(lambda: {r["metric"]["state_lane_id"] for r in prom_query(cli.prometheus, q)},
               {f"replica_{i}" for i in range(8)} | {"ranks", "other"},  # the ranks'
               20, "lane histograms")  # durations summed; 5,000 ids, one series
    wait_equal(lambda: {r["metric"]["state_lane_id"] for r in prom_query(
        cli.prometheus, 'count by (state_lane_id) '
                        '(rl_insight_monitor_lane_state{experiment_name="lanes"})')},
               {f"replica_{i}" for i in range(8)} | {f"rank_{i}" for i in range(4)},
               20, "lane state gauges")


PAIR_SCRIPT = '''
import sys, ray, rl_insight
exp, value = sys.argv[1], float(sys.argv[2])
rl_insight.ray.attach(project="proj", experiment_name=exp)

@ray.remote
def work(i):   # workers have no identity of their own: they take their job's
    rl_insight.metric_gauge("shared_name", value, task=str(i))
    rl_insight.flush(10)

ray.get([work.remote(i) for i in range(4)])
rl_insight.finish()
'''


def test_two_concurrent_jobs_never_mix(stack, cluster):
    cli, _ = stack
    path = cluster.workdir / "pair.py"
    path.write_text(PAIR_SCRIPT)
    procs = [subprocess.Popen([sys.executable, str(path), exp, val], env=cluster.env(),
                              cwd=cluster.workdir, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for exp, val in (("pair-a", "1"), ("pair-b", "2"))]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out[-3000:]
    for exp, val in (("pair-a", 1.0), ("pair-b", 2.0)):
        q = f'rl_insight_monitor_shared_name{{experiment_name="{exp}"}}'
        got = wait_for(lambda q=q: len(prom_values(cli, q)) == 4 and prom_values(cli, q),
                       20, f"{exp}'s four series")
        assert got == {str(i): val for i in range(4)}
    assert not prom_query(cli.prometheus, 'rl_insight_monitor_shared_name{project="default"}')


EARLY_SCRIPT = '''
import json, time, ray
ray.init()


@ray.remote(num_cpus=0)
class vLLMHttpServer:  # verl's replica: its own lane, through verl's RLInsightLogger
    def work(self, state):
        from verl.utils.tracking import RLInsightLogger
        with RLInsightLogger.trace_state(state, state_lane_id="replica_0"):
            time.sleep(0.3)
        return True


@ray.remote(num_cpus=0)
class TaskRunner:  # verl main_ppo: init_workers, then fit() makes the Tracking
    def run(self):
        from verl.utils.tracking import Tracking
        replica = vLLMHttpServer.remote()
        ray.get(replica.work.remote("vllm_wake_up"))  # the hub knows no run of this job
        time.sleep(3)  # not a wait: verl loads its models between the two (the scenario)
        tracking = Tracking("proj", "named-late", default_backend=["console", "rl_insight"])
        ray.get(replica.work.remote("vllm_generate"))
        # the job's end kills the replica with no exit hook, and a worker hands its events
        # over every 0.5 s (client.flush_interval_s): its last half second is lost
        time.sleep(3)  # not a wait: verl trains on the batch before its run ends
        tracking.finish()
        return True


assert ray.get(TaskRunner.remote().run.remote())
print("RESULT " + json.dumps({"job": ray.get_runtime_context().get_job_id()}))
'''


def test_a_replicas_states_before_the_run_is_named_join_the_run(stack, cluster):
    """verl's order and structure (verl/trainer/main_ppo.py: the TaskRunner actor; its
    replicas, created in init_workers, trace through verl's RLInsightLogger before fit()
    makes the Tracking that names the run). A worker's lane events wait for the run's name
    (as the hub's metrics do) rather than go to a run of their own, project "default", that
    no dashboard of the run shows; so do they when a busy hub answers late."""
    cli, _ = stack
    r = cluster.run_driver(EARLY_SCRIPT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    job = last_json(r.stdout)["job"]
    q = ('max by (state_name) (rl_insight_monitor_lane_state_seconds_total'
         '{experiment_name="named-late",state_lane_id="replica_0"} > 0)')  # their seconds
    wait_equal(lambda: {x["metric"]["state_name"] for x in prom_query(cli.prometheus, q)},
               {"vllm_wake_up", "vllm_generate"}, 30, "both states under the named run")
    assert not prom_query(cli.prometheus,
                          f'rl_insight_monitor_lane_state{{project="default",'
                          f'experiment_name="{job}"}}')


NAMELESS_SCRIPT = '''
import json, time, ray, rl_insight
ray.init()
with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
    time.sleep(0.2)
# handed over before it exits, and said so: the exit's own 3 s (client.exit_flush_timeout_s)
# can be too few for the lane actor this job starts on a loaded machine (once, 2026-12-06,
# the lane never came under project default, and the job's output did not say why); what
# this job is for is parking, not the exit's deadline (tests/test_finish_deadline.py)
handed = rl_insight.flush(60)
print("RESULT " + json.dumps({"job": ray.get_runtime_context().get_job_id(),
                              "handed": handed}))
'''  # and exits: no process of this job ever names a run


LATE_SCRIPT = '''
import json, logging, ray, rl_insight
logging.basicConfig(level=logging.WARNING)
ray.init()   # no runtime_env: the job's workers get nothing from the job
att = rl_insight.ray.attach(project="proj", experiment_name="late")
print("RESULT " + json.dumps({"ok": att.ok, "missing": att.missing}))
'''


def test_attach_after_ray_init_names_what_workers_miss(stack, cluster):
    _, url = stack
    r = cluster.run_driver(LATE_SCRIPT, RL_INSIGHT_SERVER_URL=url)
    assert r.returncode == 0, r.stderr[-3000:]
    res = last_json(r.stdout)
    assert res["ok"] is False
    assert set(res["missing"]) >= {"RL_INSIGHT_SERVER_URL", "VERL_RL_INSIGHT_ENABLE"}
    assert "rl-insight ray-env --path" in r.stderr
    assert "runtime_env=rl_insight.ray.runtime_env()" in r.stderr


HOOK_SCRIPT = '''
import json, os, ray
ray.init()

@ray.remote
def probe():
    from rl_insight.client import api
    from rl_insight.client.runtime import RUNTIME
    return {"project": os.environ.get("RL_INSIGHT_PROJECT"),
            "enabled_at_start": RUNTIME.client is not None}

print("RESULT " + json.dumps(ray.get(probe.remote())))
'''


def test_operator_runtime_env_hook(stack, cluster):
    r = cluster.run_driver(HOOK_SCRIPT,
                           RAY_RUNTIME_ENV_HOOK="rl_insight.ray.hooks.runtime_env_hook",
                           RL_INSIGHT_PROJECT="from-driver-env",
                           RL_INSIGHT_EXPERIMENT_NAME="hooked")
    assert r.returncode == 0, r.stderr[-3000:]
    # the variable came from the driver's environment through the hook, and the worker
    # setup hook enabled monitoring before the task ran
    assert last_json(r.stdout) == {"project": "from-driver-env", "enabled_at_start": True}


SLOW_SERVER_HUB = r'''
import json, socket, sys, threading, ray
from rl_insight.client.transports import actor_config
from rl_insight.config import ClientSettings
from rl_insight.ray import actors

# a server that accepts and never answers: every push waits out its timeout
silent = socket.socket(); silent.bind(("127.0.0.1", 0)); silent.listen(64)
url = f"http://127.0.0.1:{silent.getsockname()[1]}"
ray.init(address="auto")
cfg = actor_config(ClientSettings(ray_namespace="slow_hub"), url, "", "")
hub = actors.get_hub(cfg)
ray.get(hub.stats.remote(), timeout=60)
from rl_insight.wire.events import Batch, Identity, Metric
ray.get(hub.ingest.remote(Batch(Identity("p", "e"), "", "drv:1",
                                [Metric("gauge", "rl_insight_monitor_x", 1.0, ())], 0), 1))
waiting = hub.finish_run.remote("p", "e")  # waits on a push to the silent server
quick = hub.confirmed.remote("some-process")  # the default group: must not queue behind
ready, _ = ray.wait([quick], timeout=8)
print("RESULT " + json.dumps({"quick_done": bool(ready),
                              "finish_pending": not ray.wait([waiting], timeout=0)[0]}))
ray.kill(hub)
'''


def test_a_slow_push_never_holds_up_the_hubs_ingestion(cluster):
    """finish_run waits on a push to a server that never answers; confirmed (and ingest,
    in the same default group) is answered meanwhile."""
    r = cluster.run_driver(SLOW_SERVER_HUB, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result == {"quick_done": True, "finish_pending": True}, result


INSPECT_SCRIPT = '''
import json, time, ray, requests, rl_insight
from ray.util.state import list_actors
att = rl_insight.ray.attach(project="proj", experiment_name="ray-inspect")
assert att.ok, att.message

@ray.remote
def work():
    with rl_insight.trace_state("rollout", state_lane_id="replica_0"):
        rl_insight.metric_gauge("inspect_value", 1.0)
    return rl_insight.flush(10)

assert ray.get(work.remote())
rows = [a for a in list_actors(filters=[("ray_namespace", "=", "rl_insight"),
                                        ("state", "=", "ALIVE")], detail=True)]
port = ray.nodes()[0]["MetricsExportPort"]
text, deadline = "", time.time() + 90
while time.time() < deadline:  # Ray exports its metrics every few seconds
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    counted = [float(x.rsplit(" ", 1)[1]) for x in text.splitlines()
               if x.startswith("ray_rl_insight_hub_events_received")]
    if max(counted, default=0) >= 1 and "rl_insight_lanes_spans_received" in text:
        break  # the hub's tick after this run's events has set its gauges
    time.sleep(0.5)
lines = [x for x in text.splitlines() if "rl_insight_hub_" in x or "rl_insight_lanes_" in x]
print("RESULT " + json.dumps({"actors": {a.name: a.repr_name for a in rows}, "lines": lines}))
'''


def test_hub_and_lanes_are_inspectable_from_ray(stack, cluster):
    """How users are told to look at the hub: Ray's actor list shows what it holds, and
    its counters are Ray metrics (Ray's own metrics endpoint)."""
    r = cluster.run_driver(INSPECT_SCRIPT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = last_json(r.stdout)
    hub = res["actors"]["rl_insight_hub"]
    # the run that started it, or (a hub restarted by another test) the runs it recovered:
    # Ray takes the text once, when the actor starts, and another test's job may have
    # started it
    # the runs it holds, the first few of them ("..." past five)
    assert re.match(r"HubActor\(runs \['[^'/]+/[^']+'.*\]( \.\.\.)?: \d+ events, "
                    r"\d+ pushes", hub), hub
    lanes = [v for k, v in res["actors"].items() if k.startswith("rl_insight_lane_")]
    assert lanes and all(v.startswith("LaneActor(") and "spans sent" in v for v in lanes)
    hub_lines = [x for x in res["lines"] if x.startswith("ray_rl_insight_hub_events_received")]
    assert hub_lines and all('actor="rl_insight_hub"' in x for x in hub_lines), res["lines"]
    # (a hub restarted by another test leaves its predecessor's last value beside it)
    assert max(float(x.rsplit(" ", 1)[1]) for x in hub_lines) >= 1, hub_lines
    assert any(x.startswith("ray_rl_insight_lanes_spans_received") for x in res["lines"])


@pytest.mark.skipif(not __import__("shutil").which("chromium"),
                    reason="Debian's chromium is installed by `make system-deps`")
def test_rays_own_dashboard_lists_the_hub_with_what_it_holds(stack, tmp_path):
    """docs/collecting.md's picture, as a test: Ray's dashboard (its actors page, rendered by
    headless Chromium) shows the hub's repr. A cluster of its own: the page shows ten
    actors, and the shared cluster's lane actors would push the hub off it."""
    from tests.raycluster import RayCluster

    _, url = stack
    cluster = RayCluster(tmp_path, num_cpus=2, extra_env={
        "RL_INSIGHT_SERVER_URL": url, "VERL_RL_INSIGHT_ENABLE": "1"}).start()
    try:
        _look_at_the_dashboard(cluster)
    finally:
        cluster.stop()


def _look_at_the_dashboard(cluster) -> None:
    r = cluster.run_driver(INSPECT_SCRIPT)  # a run with a hub and lanes
    assert r.returncode == 0, r.stderr[-3000:]
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000"]

    def dom() -> str:
        return subprocess.run(["chromium", *flags, "--dump-dom", cluster.dashboard +
                               "/#/actors"], capture_output=True, text=True,
                              timeout=120).stdout

    wait_for(lambda: "HubActor(runs [" in dom(), 120, "the hub's repr on Ray's actors page")
    page = dom()
    assert "rl_insight_hub" in page and "LaneActor(rl_insight_lane_" in page


def test_lane_events_of_a_job_that_names_no_run_are_filed_under_default_after_30s(
        stack, nameless_job):
    """What waits for a run's name is not lost when none comes, the process long gone: it
    goes to project "default", experiment "<job id>", as the hub's metrics do."""
    cli, _ = stack
    proc, log, started = nameless_job
    proc.wait(timeout=120)
    log.seek(0)
    out = log.read()
    assert proc.returncode == 0, out[-6000:]
    res = last_json(out)
    assert res["handed"], out[-6000:]
    q = f'rl_insight_monitor_lane_state{{project="default",experiment_name="{res["job"]}"}}'
    # collector/parking.py: PARK_S (30 s) for a name, then the lane actor's next tick
    wait_for(lambda: prom_query(cli.prometheus, q),
             max(5.0, 60 - (time.monotonic() - started)), "the lane under project default")
