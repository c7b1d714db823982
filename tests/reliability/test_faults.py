"""Faults injected while a run emits tagged events, on a real Ray cluster with the
server, a real Prometheus and a FAKE Tempo (an OTLP-decoding receiver).

Each event is counted end to end: emitted (handed over: a flush the hub and lanes
acknowledged), delivered (the counter in Prometheus, the span at the receiver, by
sequence number), dropped-and-counted (the hub's and lanes' drop counters) and lost
(the rest, which must be 0). Every client call is timed: none may take 10 ms.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from rl_insight.common import netaddr
from tests.conftest import Cli, free_port_overrides, prom_query, side_by_side, wait_for
from tests.fakes.otlp_receiver import FakeTempo
from tests.raycluster import RayCluster

pytestmark = pytest.mark.integration
RESULTS: dict[str, dict] = {}
DURATION = 8.0
INJECT_AFTER = 100  # events handed over (acknowledged) before the fault lands

LOAD = r'''
import json, os, sys, time, ray, rl_insight
fault, exp, duration, out, inject_after = sys.argv[1:6]
duration, inject_after = float(duration), int(inject_after)
rl_insight.ray.attach(project="rel", experiment_name=exp)
from rl_insight.ray import actors
CAP_S = 180  # the longest a load runs, however slowly its events start to flow


def emit(source, lanes, out_path, duration, flowing=None):
    """Events for `duration` seconds after `inject_after` were handed over (acknowledged:
    then `flowing` is set), so a fault that lands then still has a run around it however
    slowly the run started; at most CAP_S in all."""
    state = {"metrics": 0, "spans": 0, "max_call_ms": 0.0, "calls": 0}

    def save():
        with open(out_path + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(out_path + ".tmp", out_path)

    i, end, cap = 0, None, time.time() + CAP_S
    while time.time() < min(end or cap, cap):
        t0 = time.perf_counter()
        rl_insight.metric_count("rel_events", 1.0, source=source)
        t1 = time.perf_counter()
        now = time.time_ns()
        rl_insight.trace_span(name="rel", start_time_ns=now - 1000, end_time_ns=now,
                              attributes={"state_lane_id": lanes[i % len(lanes)],
                                          "seq": i, "source": source, "run": exp})
        t2 = time.perf_counter()
        state["max_call_ms"] = max(state["max_call_ms"], (t1 - t0) * 1e3, (t2 - t1) * 1e3)
        state["calls"] += 2
        i += 1
        if i % 25 == 0 and rl_insight.flush(5):   # handed over: acknowledged
            state["metrics"] = state["spans"] = i
            save()
            if i >= inject_after and end is None:
                end = time.time() + duration
                if flowing is not None:
                    flowing.set()
        time.sleep(0.004)
    if rl_insight.flush(60):
        state["metrics"] = state["spans"] = i
    save()


@ray.remote(num_cpus=0)
class Replica:
    def run(self, exp, out, duration):
        emit("replica", ["replica_7"], out, duration)


replica = None
if fault == "replica":
    replica = Replica.remote()
    replica.run.remote(exp, out + ".replica", duration)
import threading
flowing = threading.Event()  # the driver's events flow: the fault may land


def inject():
    """The fault, and proof that it happened: the actor's pid before and after Ray
    restarted it (written beside the load's state for the test to check)."""
    flowing.wait(CAP_S)  # mid-run: after events were handed over, while more flow
    ns = "rl_insight"
    done = {"fault": fault}
    try:
        if fault in ("hub", "lane"):
            h = actors.find_hub(ns) if fault == "hub" else \
                ray.get_actor("rl_insight_lane_replica_0", namespace=ns)
            done["pid_before"] = ray.get(h.stats.remote(), timeout=30)["pid"]
            ray.kill(h, no_restart=False)
            end = time.time() + 60  # until a new process answers (calls queued before
            while time.time() < end:  # the kill may still be served by the old one)
                try:
                    done["pid_after"] = ray.get(h.stats.remote(), timeout=5)["pid"]
                    if done["pid_after"] != done["pid_before"]:
                        break
                except Exception:
                    pass
                time.sleep(0.2)
        elif fault == "replica":
            ray.kill(replica, no_restart=True)
            done["killed"] = True
    except Exception as exc:
        done["error"] = repr(exc)
    with open(out + ".injected", "w") as f:
        json.dump(done, f)

injector = threading.Thread(target=inject, daemon=True)
injector.start()
emit("driver", ["replica_0", "rank_0", "req_a", "req_b"], out, duration, flowing)
injector.join(120)  # its proof is written before the load says it is done
print("LOAD DONE", flush=True)
'''


SETTINGS = ("prometheus.scrape_interval=1s", "push.persist_interval_s=0.5",
            "traces.retry_max_s=1")
TEMPO_DOWN_S = 60.0


class TempoOutage:
    """The Tempo-down fault, run on a thread beside the module's other faults: its server
    has a FAKE Tempo of its own, down for the first 60 s, and its hub and lanes a Ray
    namespace of their own on the module's cluster, so the other faults (a server, a
    Prometheus, a hub killed) do not touch it. Its 60 s are mostly waiting; one after
    the other, the module took 126 s, 61 of them this wait."""

    def __init__(self, tmp_path_factory, cluster: RayCluster) -> None:
        self.receiver = FakeTempo(netaddr.free_port())  # not started: Tempo is down
        self.cli = Cli(tmp_path_factory.mktemp("tempo_home"), free_port_overrides())
        self.overrides = (*SETTINGS, f"traces.relay_url={self.receiver.url}")
        self.world = {"cli": self.cli, "url": self.cli.url, "receiver": self.receiver,
                      "cluster": cluster, "overrides": self.overrides,
                      "env": {"RL_INSIGHT_SERVER_URL": self.cli.url,
                              "RL_INSIGHT_CLIENT_RAY_NAMESPACE": "rel_tempo"}}
        self.tmp = tmp_path_factory.mktemp("tempo")
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.restore = threading.Timer(TEMPO_DOWN_S, self.receiver.start)

    def start(self) -> None:
        """Once the module's cluster is up: Tempo goes down now and is back 60 s later."""
        self.down_at = time.monotonic()
        self.restore.start()
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["row"] = run_fault(self.world, "tempo", self.tmp)
            self.outcome["down_for"] = time.monotonic() - self.down_at
        except BaseException as exc:  # handed to the test, which raises it
            self.outcome["error"] = exc

    def result(self, timeout: float) -> dict:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the Tempo-down run still going after {timeout} s"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome

    def stop(self) -> None:
        self.restore.cancel()
        self.thread.join(60)
        self.cli.run("server", "stop")
        self.receiver.stop()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    receiver = FakeTempo(netaddr.free_port()).start()
    cli = Cli(tmp_path_factory.mktemp("home"), free_port_overrides())
    overrides = (*SETTINGS, f"traces.relay_url={receiver.url}")
    url = cli.url
    cluster = RayCluster(tmp_path_factory.mktemp("ray"), extra_env={
        "RL_INSIGHT_SERVER_URL": url, "RL_INSIGHT_CLIENT_HUB_PUSH_INTERVAL_S": "0.5",
        "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "0.5"}, dashboard=False)
    outage = TempoOutage(tmp_path_factory, cluster)
    side_by_side(lambda: cli.start(*overrides), lambda: outage.cli.start(*outage.overrides),
                 cluster.start)
    outage.start()
    yield {"cli": cli, "url": url, "receiver": receiver, "cluster": cluster,
           "overrides": overrides, "tempo_outage": outage}
    outage.stop()
    cluster.stop()
    cli.run("server", "stop")
    receiver.stop()
    write_results()


def write_results() -> None:
    if not RESULTS:
        return
    out = Path(__file__).with_name("results.json")
    out.write_text(json.dumps(RESULTS, indent=2))
    print("\nfault | emitted | delivered | dropped (counted) | lost | duplicates | "
          "longest call ms")
    for name, r in RESULTS.items():
        print(f"{name} | {r['emitted']} | {r['delivered']} | {r['dropped']} | {r['lost']} | "
              f"{r['duplicates']} | {r['longest_call_ms']:.2f}")


def dropped_counts(url: str) -> float:
    text = requests.get(url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("rl_insight_hub_events_dropped_total",
                            "rl_insight_lane_spans_dropped_total")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_load(world, fault: str, exp: str, tmp_path: Path) -> tuple:
    out = str(tmp_path / f"{fault}.json")
    script = tmp_path / "load.py"
    script.write_text(LOAD)
    proc = subprocess.Popen([sys.executable, str(script), fault, exp, str(DURATION), out,
                             str(INJECT_AFTER)], env=world["cluster"].env(**world.get("env", {})),
                            cwd=world["cluster"].workdir, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return proc, out


def read_state(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return {"metrics": 0, "spans": 0, "max_call_ms": 0.0, "calls": 0}


def account(world, fault: str, exp: str, states: dict[str, dict], dropped_before: float,
            timeout: float = 150) -> dict:
    """Wait until everything handed over arrived (or the deadline), then count."""
    prom, receiver = world["cli"].prometheus, world["receiver"]
    emitted_m = sum(s["metrics"] for s in states.values())
    emitted_s = sum(s["spans"] for s in states.values())

    def metrics_delivered() -> dict[str, float]:
        res = prom_query(prom, f'sum by (source) (rl_insight_monitor_rel_events_total'
                               f'{{experiment_name="{exp}"}})')
        return {r["metric"].get("source", ""): float(r["value"][1]) for r in res}

    def spans_delivered() -> tuple[int, int]:
        seen, total = set(), 0
        for attrs, _ in list(receiver.spans):
            if attrs.get("run") == exp:
                total += 1
                seen.add((attrs["source"], attrs["seq"]))
        return len(seen), total - len(seen)

    seen: dict = {}

    def complete() -> bool:
        got = metrics_delivered()
        unique, _ = spans_delivered()
        seen.update(metrics={src: (got.get(src, 0), s["metrics"]) for src, s in
                             states.items()}, spans=(unique, emitted_s))
        return all(got.get(src, 0) >= s["metrics"] for src, s in states.items()) and \
            unique >= emitted_s

    try:
        wait_for(complete, timeout, f"everything handed over in the {fault} run to arrive",
                 interval=0.5)
    except AssertionError as exc:  # say which part is missing: (arrived, handed over)
        raise AssertionError(f"{exc}; arrived / handed over: {seen}") from None
    got = metrics_delivered()
    unique, duplicates = spans_delivered()
    delivered_m = sum(min(got.get(src, 0), s["metrics"]) for src, s in states.items())
    delivered_s = min(unique, emitted_s)
    dropped = dropped_counts(world["url"]) - dropped_before
    emitted = emitted_m + emitted_s
    delivered = int(delivered_m + delivered_s)
    row = {"emitted": emitted, "delivered": delivered, "dropped": int(dropped),
           "lost": max(0, emitted - delivered - int(dropped)), "duplicates": duplicates,
           "longest_call_ms": max(s["max_call_ms"] for s in states.values()),
           "calls": sum(s["calls"] for s in states.values())}
    RESULTS[fault] = row
    return row


def run_fault(world, fault: str, tmp_path: Path, inject=None, kill_driver=False,
              timeout: float = 150) -> dict:
    exp = f"rel-{fault}-{int(time.time())}"
    before = dropped_counts(world["url"])
    proc, out = start_load(world, fault, exp, tmp_path)
    if inject is not None or kill_driver:
        # the fault lands mid-run: once events were handed over, while more flow
        wait_for(lambda: read_state(out)["metrics"] >= INJECT_AFTER or proc.poll() is not None,
                 60, f"{INJECT_AFTER} events of the {fault} run handed over")
        assert proc.poll() is None, "the load ended before its fault"
        if kill_driver:
            proc.send_signal(signal.SIGKILL)
        if inject is not None:
            inject()
    stdout, stderr = proc.communicate(timeout=180)
    if not kill_driver:
        assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    states = {"driver": read_state(out)}
    if Path(out + ".replica").exists():
        states["replica"] = read_state(out + ".replica")
    assert states["driver"]["metrics"] > 0, (stdout[-1000:], stderr[-3000:])
    row = account(world, fault, exp, states, before, timeout)
    assert row["lost"] == 0, row
    return row


def test_server_killed_and_restarted(world, tmp_path):
    cli = world["cli"]

    def kill_and_restart():
        pid = json.loads((cli.home / "run" / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        # gone, with every process it supervised (they die with it): the port is free
        wait_for(lambda: not cli.ours(), 30, "the killed server and its children to exit")
        cli.start(*world["overrides"])

    run_fault(world, "server", tmp_path, kill_and_restart)
    assert requests.get(world["url"] + "/healthz", timeout=5).status_code == 200


def test_prometheus_killed(world, tmp_path):
    cli = world["cli"]

    def kill_prometheus():
        report = json.loads(cli.run("server", "status", "--json").stdout)
        pid = next(s["pid"] for s in report["services"] if s["name"] == "prometheus")
        os.kill(pid, signal.SIGKILL)

    run_fault(world, "prometheus", tmp_path, kill_prometheus)


def injected(tmp_path: Path) -> dict:
    """What the load script says it did (a fault that did not happen proves nothing)."""
    (path,) = tmp_path.glob("*.injected")
    return json.loads(path.read_text())


@pytest.mark.parametrize("fault", ["hub", "lane"])
def test_actor_killed(world, tmp_path, fault):
    run_fault(world, fault, tmp_path)
    done = injected(tmp_path)
    assert "error" not in done, done
    assert done["pid_after"] != done["pid_before"], done  # Ray restarted it


def test_replica_process_killed(world, tmp_path):
    row = run_fault(world, "replica", tmp_path)
    assert row["emitted"] > 0
    assert injected(tmp_path).get("killed") is True


def test_driver_killed(world, tmp_path):
    run_fault(world, "driver", tmp_path, kill_driver=True)


def test_tempo_down_for_60s(world):
    """Its run began with the module (TempoOutage); read last, when it is long done."""
    outcome = world["tempo_outage"].result(timeout=240)
    assert outcome["row"]["lost"] == 0, outcome
    assert outcome["down_for"] >= TEMPO_DOWN_S, outcome
