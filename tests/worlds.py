"""Session-wide worlds that several test modules share, each started once per session
(per xdist worker: the modules that use one are grouped on one worker, see conftest):

- ``ray_world``: the server (real Prometheus and Alertmanager, a FAKE Tempo as the
  relay's receiver, a webhook receiver as the team's alert endpoint) and a private Ray
  cluster whose nodes carry the server's address. For the modules whose runs are kept
  apart by project and experiment name: Ray collection, hardware on Ray, operator
  tools, step anatomy with faults, the all-panels runs.
- ``route_server``: a server with its Prometheus and a FAKE Tempo, no Ray, for
  route-level tests that need no restart and no setting of their own.

What a test changes in a world (a target, a run, a frozen Prometheus) it undoes or
keeps under its own run; modules that restart a server or need settings of their own
start their own with the ``cli`` fixture.

A world closes when the last test that uses it is done (conftest's
``pytest_runtest_teardown``: the modules that share it run one after another on one
worker), not at the end of the session: an idle world's Prometheus, server and Ray
cluster took a tenth of the machine's CPU for the rest of the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rl_insight.common import netaddr
from tests.conftest import REPO, Cli, free_port_overrides, side_by_side
from tests.fakes.otlp_receiver import FakeTempo
from tests.raycluster import RayCluster
from tests.webhook import WebhookReceiver

# The union of what the sharing modules need. Alert thresholds are relative to a run's
# own step and state times (so a loaded machine still sees the faults run's 12 s stall
# and hang as far longer than usual); alerts of other runs reach the same webhook and
# are told apart by their run labels.
RAY_WORLD_SETTINGS = (
    "prometheus.scrape_interval=1s",
    "anatomy.settle_s=1", "anatomy.max_wait_s=30",
    "alerts.pending_for=0s", "alerts.stall_factor=1.5", "alerts.stall_min_s=5",
    "alerts.state_stuck_factor=2", "alerts.state_stuck_min_s=5",
    "alerts.state_stuck_window=10m", "alerts.kv_cache_usage_max=0.8",
    "alerts.preemptions_per_s_max=0.2", "alerts.target_down_for=0s",
    "alerts.dropped_window=10m",
    "alertmanager.group_wait=1s", "alertmanager.group_interval=1s",
    "alertmanager.repeat_interval=1h",
    # what changed: the drifting run's short baseline (tests/test_changes_e2e.py); the
    # other runs here end before a baseline of 2 + 8 steps is learnt
    "changes.warmup_steps=2", "changes.baseline_min_steps=8", "changes.rank_interval_s=1",
    "changes.rank_every_steps=2")


@dataclass
class RayWorld:
    cli: Cli
    url: str
    cluster: RayCluster
    tempo: FakeTempo  # FAKE Tempo: the relay's receiver, real OTLP decoding
    hook: WebhookReceiver
    framework_runs: FrameworkRuns | None = None  # started with it, where tests read them
    pairs: dict | None = None  # the simulated pairs' rows, once run (simulated_pairs)


@dataclass
class RouteServer:
    cli: Cli
    url: str
    tempo: FakeTempo
    background: dict = field(default_factory=dict)  # name -> Background (below)


def _workdir(name: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"rlt-{name}-"))


OPEN: dict[str, contextlib.ExitStack] = {}  # the worlds open in this process


# every named actor in every namespace, killed for good (a detached hub or agent lives
# until killed, and an idle Ray worker takes 1 % of a core: Ray checks its signals every
# 10 ms), so one module's runs leave nothing behind for the next
TIDY = '''
import ray
ray.init()
for a in ray.util.list_named_actors(all_namespaces=True):
    try:
        ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=True)
    except Exception:
        pass
'''


def tidy(name: str) -> None:
    """Between two modules of the open world ``name``: its Ray cluster's actors go."""
    stack = OPEN.get(name)
    cluster = getattr(stack, "cluster", None)
    runs = getattr(stack, "framework_runs", None)
    if runs is not None and runs.running_on_ray():
        return  # a framework's run on the cluster goes on across modules: the next one tidies
    # a driver only when a named actor is alive (the state API: a request, not a driver)
    if cluster is not None and any(a.get("name") for a in cluster.alive("actors")):
        r = cluster.run_driver(TIDY)
        assert r.returncode == 0, r.stderr[-3000:]


def close(name: str) -> None:
    """Stop the world ``name`` if it is open (its last test is done, or the session)."""
    stack = OPEN.pop(name, None)
    if stack is not None:
        stack.close()


@pytest.fixture(scope="session")
def ray_world(request):
    stack = OPEN["ray_world"] = contextlib.ExitStack()
    try:
        hook = WebhookReceiver().start()
        stack.callback(hook.stop)
        tempo = FakeTempo(netaddr.free_port()).start()
        stack.callback(tempo.stop)
        cli = Cli(_workdir("home"), free_port_overrides())
        stack.callback(shutil.rmtree, cli.home, True)
        stack.callback(cli.run, "server", "stop")
        work = _workdir("ray")
        stack.callback(shutil.rmtree, work, True)
        url = cli.url
        cluster = RayCluster(work, extra_env={
            "RL_INSIGHT_SERVER_URL": url, "VERL_RL_INSIGHT_ENABLE": "1",
            "TQ_METRICS_COLLECT_INTERVAL": "1",
            # lanes tick as often as this world's Prometheus scrapes (docs/collecting.md: the tick)
            "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1",
            # the GCS asks each raylet every second, not every 3 s: a killed node (the
            # hardware module's) counts as dead after 5 refused checks, about 5 s rather
            # than 15 s; a live but busy raylet still has 5 checks of 10 s each to answer
            "RAY_health_check_period_ms": "1000"})
        stack.callback(cluster.stop)
        side_by_side(lambda: cli.start(*RAY_WORLD_SETTINGS, f"traces.relay_url={tempo.url}",
                                       f"alertmanager.webhook_urls={hook.url}"),
                     cluster.start)
        stack.cluster = cluster  # for tidy()
        world = RayWorld(cli, url, cluster, tempo, hook)
        # the frameworks' replays go on beside the world's first modules, past the suite's
        # busy start, done by the time their readers come (the drift's module waited 40 s
        # for them when it asked first)
        if any("framework_runs" in item.fixturenames for item in request.session.items):
            world.framework_runs = FrameworkRuns(world, delay_s=BACKGROUND_DELAY_S)
            stack.callback(world.framework_runs.stop)
            stack.framework_runs = world.framework_runs  # for tidy()
    except BaseException:
        close("ray_world")
        raise
    yield world
    close("ray_world")


# Runs that modules of the route server's group start in the background as soon as the
# server is up, read by their tests later (TRL's, AReaL's and SkyRL's own training runs:
# they wait on their own clocks, and the group's other modules go on meanwhile). A module
# registers one at import: name -> (its module, a function of (url, workdir) giving the
# command, its environment and the folder to run in).
BACKGROUND: dict[str, tuple[str, object]] = {}
# how much a run started beside the tests yields the CPU (nice): it gets what the tests
# beside it leave, rather than slowing their timed simulations (TRL's training on CPU
# starved the anatomy simulation's driver into "other" time); its own figures are
# measured within itself, so waiting for the CPU costs it time, not accuracy
BACKGROUND_NICE = 10
BACKGROUND_DELAY_S = 45.0  # past the suite's first, saturated minute (Background)


# how far the Ray world's processes come before the other tests while a run whose test
# checks its timing runs (Favoured: the drifting run of AFTER_THE_OTHERS, the culprit
# ranks' run). Ray starts its workers at nice
# 15 (RAY_worker_niceness), so the actors a driver waits on yield to every test beside
# them: three busy processes for 15 s beside the drifting run, from its step 10, moved its
# steps' `other` time 100 % with its driver at nice 10, 60 % at 0 (the test saw a change
# five steps before the drift's); with all of them at -10, not at all (2026-12-06)
FAVOURED_NICE = -10


def yield_cpu() -> None:
    os.nice(BACKGROUND_NICE)


def set_nice(pids: list[int], nice: int) -> bool:
    """Each process's nice value, where the OS lets us (a negative one needs root or
    CAP_SYS_NICE: without, the processes stay as they were); False if it did not."""
    done = True
    for pid in pids:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        except ProcessLookupError:
            pass
        except PermissionError:
            done = False
    return done


class Favoured:
    """The Ray world's processes at FAVOURED_NICE while a timed run on it runs (its
    driver, actors, engines and lane actors); again every ``every_s`` for the workers the
    raylet starts since, at Ray's own nice 15; back to 0 after. ``done``: whether the OS
    let us (None until the first pass), for a failing test's message."""

    def __init__(self, cluster, every_s: float = 2.0) -> None:
        self.cluster, self.every_s = cluster, every_s
        self.done: bool | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.done = set_nice(self.cluster.pids(), FAVOURED_NICE)
            self._stop.wait(self.every_s)

    def __enter__(self) -> Favoured:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        set_nice(self.cluster.pids(), 0)


def background(name: str, module: str, command) -> None:
    """Register a run for the route server to start as soon as it is up."""
    BACKGROUND[name] = (module, command)


class Background:
    """A run started beside the tests, its output in a file; ``result()`` waits for it.
    It starts ``delay_s`` after it is made, past the suite's busy start (both worlds and
    their first simulations starting at once saturate the machine), or when a test asks
    for its result first."""

    def __init__(self, argv: list[str], env: dict, cwd: Path, delay_s: float = 0.0) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.proc: subprocess.Popen | None = None
        self.t_start = 0.0
        self._lock = threading.Lock()
        self._timer = threading.Timer(delay_s, self.start)
        self._timer.daemon = True
        self._timer.start()

    def start(self) -> None:
        with self._lock:
            if self.proc is not None:
                return
            self.t_start = time.time()
            self.log = (self.cwd / "background.log").open("w+")
            self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd,
                                         stdout=self.log, stderr=subprocess.STDOUT,
                                         text=True, preexec_fn=yield_cpu)

    def result(self, timeout: float = 300) -> tuple[int, str]:
        """(exit code, output)."""
        self.start()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self.log.seek(0)
        return code, self.log.read()

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="session")
def route_server(request):
    stack = OPEN["route_server"] = contextlib.ExitStack()
    try:
        tempo = FakeTempo(netaddr.free_port()).start()
        stack.callback(tempo.stop)
        cli = Cli(_workdir("home"), free_port_overrides())
        stack.callback(shutil.rmtree, cli.home, True)
        stack.callback(cli.run, "server", "stop")
        url = cli.start("prometheus.scrape_interval=1s", "push.persist_interval_s=0.5",
                        f"traces.relay_url={tempo.url}")
        world = RouteServer(cli, url, tempo)
        selected = {item.nodeid.split("::", 1)[0] for item in request.session.items}
        for name, (module, command) in BACKGROUND.items():
            if module in selected:  # only for the tests that will read it
                work = _workdir(name)
                stack.callback(shutil.rmtree, work, True)
                run = world.background[name] = Background(*command(url, work),
                                                           delay_s=BACKGROUND_DELAY_S)
                stack.callback(run.stop)
    except BaseException:
        close("route_server")
        raise
    yield world
    close("route_server")


# -- other RL frameworks' runs on the Ray world's server (tests/frameworks/*_run.py) --------
FRAMEWORKS = Path(__file__).resolve().parent / "frameworks"
VENV_FRAMEWORKS = Path(sys.prefix) / "frameworks"  # `make setup`: their own packages
FRAMEWORK_RUNS = {  # name -> (driver, its arguments, on the Ray cluster, site-packages)
    # slime registers its engines after its first rollout: they serve after the run until
    # Prometheus has found and scraped them (file_sd refreshes every 5 s), 30 s at most
    "slime": ("slime_run.py", ("--slow-step", "3", "--linger", "30"), True, None),
    "roll": ("roll_run.py", ("--slow-step", "3"), False, None),
    "nemo_rl": ("nemo_rl_run.py", ("--slow-step", "3"), False, None),
    # NeMo-RL's single controller: its actor's own Logger, patched by the job's hook
    "nemo_rl_sc": ("nemo_rl_sc_run.py", ("--slow-step", "3"), True, None),
    # the simulation with a drift: replica 1's KV cache shrinks from step 13 until it
    # preempts (tests/test_changes_e2e.py); its engines serve a while after the run
    "drift": (str(REPO / "examples" / "simulate_rl.py"), (
        "--steps", "26", "--replicas", "2", "--ranks", "1", "--step-seconds", "1.5",
        "--val-every", "0", "--no-transfer-queue", "--drift", "kv-shrink:1:13",
        "--linger", "6"), True, None),
}
FRAMEWORK_PROJECT = "e2e-frameworks"


# runs started only once the others have ended, and once a test asks for them: the
# drifting simulation measures its steps' times against their noise, and the frameworks'
# replays their anatomy against their own clocks; started together on two cores, each
# disturbed the other's figures (and the Ray world's other modules, the culprit ranks'
# busy loops on the same cluster, disturb the drift: it runs while its module waits).
# They do not yield the CPU as the others do: the Ray world comes first while they run
# (FAVOURED_NICE)
AFTER_THE_OTHERS = ("drift",)


class FrameworkRuns:
    """Each framework's run started ``delay_s`` after it is made, or when a test first
    asks for one (they wait on their own clocks more than they compute: the Ray world's
    first modules go on meanwhile), then the runs of AFTER_THE_OTHERS once those are done
    and a test asks; ``results(names)`` waits for those."""

    def __init__(self, world: RayWorld, delay_s: float = 0.0) -> None:
        self.world = world
        self.work = _workdir("frameworks")
        self.procs: dict[str, tuple[subprocess.Popen, Path]] = {}
        self._results: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._first_started = threading.Event()
        self._later_asked = threading.Event()
        self.favoured: Favoured | None = None  # while the runs after the others ran
        self._timer = threading.Timer(delay_s, self._start_first)
        self._timer.daemon = True
        self._timer.start()
        self._later = threading.Thread(target=self._start_after, daemon=True)
        self._later.start()

    def _start_first(self) -> None:
        with self._lock:
            if self._first_started.is_set() or self._stopped:
                return
            for name in FRAMEWORK_RUNS:
                if name not in AFTER_THE_OTHERS:
                    self._start(name)
            self._first_started.set()

    def _start_after(self) -> None:
        self._first_started.wait()
        for name in FRAMEWORK_RUNS:
            if name not in AFTER_THE_OTHERS and name in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.procs[name][0].wait(timeout=300)
        self._later_asked.wait()
        with self._lock:
            if self._stopped:
                return
            for name in AFTER_THE_OTHERS:
                if name in FRAMEWORK_RUNS:
                    self._start(name)
        later = [self.procs[n][0] for n in AFTER_THE_OTHERS if n in self.procs]
        # they time their steps against 1 % noise: the Ray world's processes come first
        with Favoured(self.world.cluster) as favoured:
            self.favoured = favoured
            while not self._stopped and (running := [p for p in later if p.poll() is None]):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    running[0].wait(timeout=2)

    def running_on_ray(self) -> bool:
        """Whether a run on the Ray world's cluster is going (tidy() spares its actors)."""
        return any(FRAMEWORK_RUNS[name][2] and proc.poll() is None
                   for name, (proc, _) in list(self.procs.items()))

    def _start(self, name: str) -> None:
        driver, args, on_ray, packages = FRAMEWORK_RUNS[name]
        world = self.world
        out = self.work / name
        out.mkdir()
        env = world.cluster.env() if on_ray else {
            k: v for k, v in os.environ.items()
            if not k.startswith(("RAY_", "RL_INSIGHT_", "VERL_"))}
        # the exit's hand-over as the simulated pairs' (simulated_pairs): beside a busy
        # loop a fresh clone lost ROLL's last step, its pushes timed out (the sender's
        # 5 s) on the busy server and the 3-s default ended their retries at exit
        env.update({"RL_INSIGHT_SERVER_URL": world.url, "VERL_RL_INSIGHT_ENABLE": "1",
                    "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1",
                    "RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S": "20",
                    "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})
        paths = [str(REPO)] + ([str(VENV_FRAMEWORKS / packages / "site-packages")]
                               if packages else [])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        log = (out / "log.txt").open("w+")
        proc = subprocess.Popen(
            [sys.executable, str(FRAMEWORKS / driver), "--project", FRAMEWORK_PROJECT,
             "--experiment-name", f"e2e-{name}", "--truth", str(out / "truth.json"),
             *args], env=env, cwd=out, stdout=log, stderr=subprocess.STDOUT, text=True,
            preexec_fn=None if name in AFTER_THE_OTHERS else yield_cpu)
        proc.log = log
        self.procs[name] = (proc, out)

    def results(self, names: tuple[str, ...] | None = None) -> dict[str, dict]:
        """name -> the driver's RUN (or SIMULATION) line, its ground truth and when it was
        done: of ``names`` (every run when None), waiting for them."""
        wanted = tuple(FRAMEWORK_RUNS) if names is None else names
        self._start_first()
        if any(n in AFTER_THE_OTHERS for n in wanted):
            self._later_asked.set()
            self._later.join(timeout=400)
        for name in wanted:
            if name not in self._results:
                self._results[name] = self._result(name)
        return {n: self._results[n] for n in wanted}

    def _result(self, name: str) -> dict:
        proc, work = self.procs[name]
        proc.wait(timeout=300)
        proc.log.seek(0)
        text = proc.log.read()
        assert proc.returncode == 0, f"{name}: " + text[-6000:]
        line = next(x for x in text.splitlines()
                    if x.startswith(("RUN ", "SIMULATION ")))
        run = json.loads(line.split(" ", 1)[1])
        run["truth"] = json.loads((work / "truth.json").read_text())
        run["t_done"] = time.time()
        run["output"] = text
        return run

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._stopped = True
        self._first_started.set()  # the waiting thread goes on, and starts nothing
        self._later_asked.set()
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.work, True)


@pytest.fixture(scope="session")
def framework_runs(ray_world):
    """The frameworks' runs (slime on the Ray world's cluster, the others beside it),
    started once with the Ray world (``RayWorld.framework_runs``), for the all-panels
    runs, the drift's module and the frameworks' own tests."""
    if ray_world.framework_runs is None:
        ray_world.framework_runs = FrameworkRuns(ray_world)
        OPEN["ray_world"].callback(ray_world.framework_runs.stop)
    return ray_world.framework_runs


# -- pairs of simulated runs that differ by one known thing (examples/simulate_rl.py), on
# the Ray world: the what-if's ground truth (tests/test_whatif_e2e.py) and the run
# comparison's (tests/test_compare_e2e.py); all at once, each on its own (project,
# experiment), so a pair shares the machine's load
PAIRS_PROJECT = "e2e-whatif"
COMMON = ["--ranks", "1", "--val-every", "0", "--no-transfer-queue", "--engine-traces",
          "--response-tokens", "200:300", "--project", PAIRS_PROJECT]
# a synchronous, colocated run (verl's hybrid engine): 16 requests a step over two
# engines running 2 at a time (about 2 s of generation), the trainer 0.9 s, the weight
# sync 0.15 s
SYNC = ["--steps", "6", "--replicas", "2", "--step-seconds", "2.5", "--batch", "16",
        "--engine-slots", "2"]
# the trainer's side heavier: 1.8 s of training, a 0.9-s weight sync, 0.5 s generating
HEAVY = ["--steps", "6", "--replicas", "2", "--step-seconds", "5", "--batch", "8",
         "--engine-slots", "4", "--weight-sync-scale", "3"]
# separate-asynchronous: 12 requests one at a time on each engine (3 s on two, 2 s on
# three) while the trainer trains on the batch before (0.5 s: well below the rollout
# however the load stretches either; at 1 s a loaded CI made the three replicas' run
# wait on its trainer and measured 15.6 % slower than predicted)
ASYNC = ["--mode", "async", "--steps", "7", "--step-seconds", "2.5", "--batch", "12",
         "--engine-slots", "1", "--trainer-speed", "2"]
SIMULATED_PAIRS = {
    "straggler": [*SYNC, "--straggler", "1:2.5"],  # replica 1 generates 2.5 times as long
    "even": SYNC,
    "even-seed": [*SYNC, "--seed", "1"],  # the same but for the engines' draws
    "even-more": [*SYNC[:-3], "24", *SYNC[-2:]],  # 24 samples a step, not 16
    # separate-asynchronous, one step more (its last has no next batch to generate)
    "even-async": ["--steps", "7", *SYNC[2:], "--mode", "async"],
    "tail": [*SYNC, "--long-request", "0:0:6000:5"],  # a 5-s answer on replica 0, each step
    "heavy": HEAVY,
    "heavy-fast-trainer": [*HEAVY, "--trainer-speed", "2"],
    "heavy-free-sync": [*HEAVY[:-1], "0"],
    "async-2": [*ASYNC, "--replicas", "2"],
    "async-3": [*ASYNC, "--replicas", "3"],
}


@pytest.fixture(scope="session")
def simulated_pairs(ray_world):
    """Every run at once on the shared cluster (its processes favoured over the tests
    beside it: the runs time their steps), the first time a module asks; name -> its
    rows."""
    if ray_world.pairs is not None:
        return ray_world.pairs
    import requests

    from tests.conftest import wait_for

    cluster = ray_world.cluster
    # eleven drivers and their ~40 actors on two cores beside the suite: a driver's
    # hand-over at exit waits for the hub's acknowledgement longer than the 3-s default
    # (a CI run of 2026-12-07 timed out there), so these have 20 s; what a run handed
    # over is judged by the rows the server holds, below, not by the driver's exit code
    # alone (Ray's own teardown of a driver on a saturated host has exited 1 after the
    # run printed its summary)
    env = cluster.env(RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S="20")
    procs = {name: subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "simulate_rl.py"), *COMMON, *args,
         "--experiment-name", name], env=env, cwd=cluster.workdir,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, args in SIMULATED_PAIRS.items()}
    with Favoured(cluster):
        outputs = {name: p.communicate(timeout=400)[0] for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0 or "\nSIMULATION {" in outputs[name], \
            f"{name} (exit {p.returncode}): {outputs[name][-3000:]}"

    def rows(name: str) -> list[dict] | None:
        r = requests.get(ray_world.url + "/api/v1/anatomy", timeout=30,
                         params={"project": PAIRS_PROJECT, "experiment_name": name})
        got = r.json().get("steps", []) if r.status_code == 200 else []
        args = SIMULATED_PAIRS[name]
        want = int(args[args.index("--steps") + 1])
        return got if len(got) >= want else None
    ray_world.pairs = {name: wait_for(lambda n=name: rows(n), 60, f"the rows of {name} "
                                      f"(its driver's end: {outputs[name][-1500:]})")
                       for name in SIMULATED_PAIRS}
    return ray_world.pairs


