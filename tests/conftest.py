"""Shared fixtures: an isolated RL_INSIGHT_HOME, free ports, and the CLI as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from rl_insight.common import netaddr

REPO = Path(__file__).resolve().parents[1]


def _own_ports() -> range:
    """This pytest worker's slice of the ports netaddr hands out: two workers never pick
    the same port for servers they start seconds later."""
    whole = netaddr.HANDOUT_PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    k = int(worker[2:]) if worker[2:].isdigit() else 0
    size = len(whole) // max(1, count)
    return range(whole.start + k * size, whole.start + (k + 1) * size)


netaddr.HANDOUT_PORTS = _own_ports()
pytest_plugins = ["tests.worlds"]  # the session-wide server and Ray cluster
WORLDS = ("ray_world", "route_server")  # each ranked in HEAVY_FIRST: its group runs whole
# modules whose shared fixtures start a Ray cluster and run a simulated or real training
# run before their first test: that test's timeout (pyproject's 300 s) also covers the
# set-up, which on a loaded machine took up to 300 s by itself; their waits keep their
# own deadlines
SETUP_TIMEOUT_S = 600
SETUP_HEAVY = ("tests/test_multihost.py", "tests/test_verl_run.py",
               "tests/reliability/test_faults.py", "tests/reliability/test_soak.py")
FAST_TIER_ENV = "RL_INSIGHT_FAST_TIER"  # `make test-fast`: no process may be started
FAST_TIER = os.environ.get(FAST_TIER_ENV) == "1"
# The groups that take longest, longest first (seconds of setup, calls and teardown of all
# their tests, measured on the project's 2-core machine in 2 workers, 2026-12-03). They
# are handed to the workers first and the light modules fill in after them, so the run
# does not end on one worker alone with a long module (xdist's own order, by number of
# tests, put the one-test heavyweights last). A module not named here is light.
HEAVY_FIRST = (
    "ray_world",  # 675 s, and the frameworks' runs (tests/test_simulation_frameworks.py)
    "route_server",  # 142 s with TRL's, AReaL's, SkyRL's and OpenRLHF's own runs beside it
    "tests/reliability/test_faults.py",  # 209 s
    "tests/test_multihost.py",  # 196 s
    "tests/test_verl_run.py",  # 126 s
    "tests/reliability/test_soak.py",  # 116 s
    "tests/reliability/test_crash.py",  # 91 s
    "tests/reliability/test_api_schema.py",  # 91 s
    "tests/reliability/test_hostile_input.py",  # 87 s
    "tests/test_engine_tracing.py",  # 72 s
    "tests/test_lifecycle.py",  # 64 s
    "tests/test_platform_mode.py",  # 49 s
    "tests/test_security.py",  # 38 s
    "tests/test_churn.py",  # 35 s
    "tests/test_finish_deadline.py",  # 33 s
    "tests/test_doors.py",  # 31 s
    "tests/test_mixed_versions.py",  # 28 s
    "tests/test_port_changes_hands.py",  # 27 s
    "tests/test_alerting_e2e.py",  # 24 s
)


TIMELINE_ENV = "RL_INSIGHT_TEST_TIMELINE"  # a file: each phase of each test, per worker
# read once: fixtures that clear RL_INSIGHT_* from the environment would hide it
TIMELINE = os.environ.get(TIMELINE_ENV)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With RL_INSIGHT_TEST_TIMELINE set, a line per setup, call and teardown (worker,
    start, seconds, test): where the suite's time goes on each worker, for
    scripts/timeline.py to draw (--durations names the slowest, not what ran beside them)."""
    path = TIMELINE
    if not path or hasattr(report, "node"):  # xdist's controller: the worker wrote it
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a") as f:
        f.write(f"{worker}\t{report.start:.1f}\t{report.duration:.2f}\t{report.when}\t"
                f"{report.nodeid}\n")


def pytest_configure(config: pytest.Config) -> None:
    """xdist hands the groups out in the order collected (``HEAVY_FIRST``), not re-sorted
    by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One xdist group per module, or per shared world for the modules that use one, so
    `--dist loadgroup` sets each module's (and each world's) fixtures up once, on one
    worker; the heaviest groups first (``HEAVY_FIRST``), each in its collected order."""
    group: dict[str, str] = {}
    for item in items:
        key = item.nodeid.split("::", 1)[0]
        world = next((w for w in WORLDS if w in item.fixturenames), None)
        if world or key not in group:
            group[key] = world or group.get(key) or key
    for item in items:
        key = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group[key]))
        heavy = key in SETUP_HEAVY or "ray_world" in item.fixturenames
        if heavy and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SETUP_TIMEOUT_S))
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    order = {id(item): i for i, item in enumerate(items)}
    # within a world, the modules that read a run started beside its tests go last: the
    # run has had the group's other modules' time to finish (OpenRLHF's waited 30 s)
    from tests import worlds

    readers = {module for module, _ in worlds.BACKGROUND.values()}
    items.sort(key=lambda item: (rank.get(group[item.nodeid.split("::", 1)[0]],
                                          len(rank)),
                                 item.nodeid.split("::", 1)[0] in readers, order[id(item)]))


def examples(full: int) -> int:
    """A property test's examples: all of them in the whole suite (CI, before a commit),
    half in the fast tier, which runs at every edit and must stay under 60 s."""
    return max(full // 2, 20) if FAST_TIER else full


@pytest.fixture(autouse=True)
def _no_processes_in_the_fast_tier(monkeypatch: pytest.MonkeyPatch):
    """In the fast tier, a test that starts a process fails, naming the command: it
    belongs to the integration tier (`pytest.mark.integration`)."""
    if not FAST_TIER:
        yield
        return
    started: list[str] = []
    real = subprocess.Popen._execute_child

    def refuse(self, args, *a, **kw):
        started.append(" ".join(map(str, args)) if isinstance(args, (list, tuple))
                       else str(args))
        raise OSError("the fast tier starts no processes: mark this test "
                      "pytest.mark.integration")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", lambda: refuse(None, ["os.fork()"]))
    yield
    monkeypatch.setattr(subprocess.Popen, "_execute_child", real)
    assert not started, ("a test of the fast tier started processes (mark it "
                         f"pytest.mark.integration): {started}")


def side_by_side(*calls: Callable[[], object]) -> list:
    """Each call on a thread of its own, all at once; their results in order, or the first
    call's error. For set-ups whose parts wait on different things (a server and its
    Prometheus, a Ray cluster) and need nothing of each other."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    """Poll ``cond`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_equal(get: Callable[[], object], want: object, timeout: float, what: str,
               interval: float = 0.5):
    """Poll ``get`` until it returns ``want``; fail with what it returned last."""
    last: list = []

    def same() -> bool:
        last[:] = [get()]
        return last[0] == want
    try:
        wait_for(same, timeout, what, interval)
    except AssertionError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}: last got "
                             f"{last[0]!r}, want {want!r}") from None
    return last[0]


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of live processes whose environment has name=value (ours carry the home)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            found.append(int(entry.name))
    return found


class Cli:
    """Runs `rl-insight` in a subprocess with the test's home and ports."""

    def __init__(self, home: Path, overrides: list[str]) -> None:
        self.home = home
        self.overrides = overrides
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
        self.env["RL_INSIGHT_HOME"] = str(home)

    def args(self, *args: str) -> list[str]:
        extra = []
        for o in self.overrides:
            extra += ["--set", o]
        return [sys.executable, "-m", "rl_insight", *args, *extra]

    def run(self, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.args(*args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=REPO, **kw)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.args(*args), env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=REPO)

    def start(self, *overrides: str) -> str:
        """`server start --detach` with extra settings; returns the server's URL."""
        args = ["server", "start", "--detach"]
        for o in overrides:
            args += ["--set", o]
        r = self.run(*args)
        assert r.returncode == 0, r.stdout + r.stderr
        return self.url

    def stop(self) -> None:
        r = self.run("server", "stop")
        assert r.returncode == 0, r.stdout + r.stderr

    def setting(self, key: str) -> int:
        return int(next(o for o in self.overrides if o.startswith(key + "=")).split("=")[1])

    @property
    def url(self) -> str:
        """The server's URL, known before it starts (``start`` returns it too)."""
        return f"http://127.0.0.1:{self.setting('server.port')}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.setting('prometheus.port')}"

    def ours(self) -> list[int]:
        return processes_with_env("RL_INSIGHT_HOME", str(self.home))


@pytest.fixture
def served(tmp_path: Path):
    """A server's state and its routes in-process (FastAPI's TestClient, no socket): the
    route tests' server."""
    from fastapi.testclient import TestClient

    from rl_insight import config
    from rl_insight.server.app import create_app
    from rl_insight.server.services.supervisor import Supervisor
    from rl_insight.server.state import ServerState

    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})
    state = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            yield c, state
    finally:
        state.close()  # its threads (and their timers) end with the test


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    for k in list(os.environ):
        if k.startswith("RL_INSIGHT_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("RL_INSIGHT_HOME", str(h))
    return h


@pytest.fixture
def configured(home: Path, monkeypatch: pytest.MonkeyPatch):
    """``configured(**env)``: this process's monitoring resolved anew from ``env`` (a
    server on a closed port, nothing waited for at exit), as a training process starts
    it; the client and the environment are restored after the test."""
    from rl_insight.client import api
    from rl_insight.client.runtime import RUNTIME

    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", False)
    monkeypatch.setattr(RUNTIME, "off", None)

    def start(**env: str):
        for k in [k for k in os.environ if k.startswith("RL_INSIGHT_") and
                  k != "RL_INSIGHT_HOME"]:
            monkeypatch.delenv(k)
        env = {"RL_INSIGHT_SERVER_URL": "http://127.0.0.1:1",
               "RL_INSIGHT_CLIENT_EXIT_FLUSH_TIMEOUT_S": "0", **env}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        RUNTIME.client, RUNTIME.checked, RUNTIME.off = None, False, None
        assert api.enabled()
        return api.configuration()

    return start


def prom_query(prom: str, query: str) -> list[dict]:
    """An instant query through Prometheus' HTTP API; [] when it cannot answer."""
    import requests

    try:
        return requests.get(prom + "/api/v1/query", params={"query": query},
                            timeout=5).json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return []


def free_port_overrides() -> list[str]:
    """Every port setting on a free loopback port, and loopback binds."""
    keys = ["server.port", "prometheus.port", "tempo.port", "tempo.grpc_port",
            "tempo.otlp_grpc_port", "tempo.otlp_http_port", "grafana.port",
            "alertmanager.port"]
    ports = netaddr.free_ports(len(keys))
    return ["host=127.0.0.1"] + [f"{k}={p}" for k, p in zip(keys, ports, strict=True)]


@pytest.fixture
def cli(home: Path) -> Cli:
    c = Cli(home, free_port_overrides())
    yield c
    # Whatever a test left running is stopped, and the test fails if it cannot be.
    if c.ours():
        c.run("server", "stop", timeout=60)
        for pid in c.ours():
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


@pytest.fixture
def recorded(monkeypatch):
    """The client API with a real Client whose exporter records instead of sending."""
    from rl_insight.client.configuration import ClientConfig
    from rl_insight.client.core import Client
    from rl_insight.client.runtime import RUNTIME

    c = Client(ClientConfig("http://127.0.0.1:1"))
    got: list = []
    c.buffer.export = lambda items, dropped: got.extend(items)
    monkeypatch.setattr(RUNTIME, "client", c)
    monkeypatch.setattr(RUNTIME, "checked", True)
    return c, got


class OwnPrometheus:
    """Prometheus of one's own (Debian's package) from a config text, as a team or a
    platform runs it; :meth:`stop` ends every one started."""

    def __init__(self, tmp_path: Path) -> None:
        if not shutil.which("prometheus"):
            pytest.skip("Debian's prometheus package (scripts/system-deps.sh) is needed")
        self.tmp_path = tmp_path
        self.procs: list = []

    def start(self, config_text: str) -> str:
        tmp_path = self.tmp_path
        cfg = tmp_path / "own-prometheus.yml"
        cfg.write_text(config_text)
        port = netaddr.free_port()
        log = (tmp_path / "own-prometheus.log").open("wb")
        self.procs.append((subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log,
            stderr=subprocess.STDOUT), log))
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert self.procs[-1][0].poll() is None, \
                (tmp_path / "own-prometheus.log").read_text()
            try:
                return requests.get(url + "/-/ready", timeout=2).status_code == 200
            except requests.RequestException:
                return False
        wait_for(ready, 20, "the second Prometheus to be ready")
        return url

    def stop(self) -> None:
        for proc, log in self.procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()


@pytest.fixture
def own_prometheus(tmp_path):
    """Start a Prometheus of one's own from a config text; stopped at the end."""
    own = OwnPrometheus(tmp_path)
    yield own.start
    own.stop()


def _group(item: pytest.Item | None) -> str | None:
    marker = item.get_closest_marker("xdist_group") if item is not None else None
    return marker.args[0] if marker else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """A shared world closes after the last test of its group (tests/worlds.py), once
    that test's own fixtures are torn down: a world's group (every module that uses it,
    whole) runs on one worker, one test after another (HEAVY_FIRST ranks it), so no later
    test of this process asks for it again."""
    yield
    from tests import worlds

    group = _group(item)
    if group in WORLDS and _group(nextitem) != group:
        worlds.close(group)
    elif group in WORLDS and nextitem is not None and nextitem.module is not item.module:
        worlds.tidy(group)
