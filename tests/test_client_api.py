"""The client API as training code uses it: in processes of their own (the API keeps
per-process state), against the real server, Prometheus and a FAKE Tempo receiver."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys

import pytest
import requests

from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
from rl_insight.wire import naming
from rl_insight.wire.events import Metric, Span, StateChange
from tests.conftest import REPO, prom_query, wait_for
from tests.fakes.otlp_receiver import FakeTempo

VERL_STEP = {
    "actor/pg_loss": -0.012, "actor/entropy": 1.37, "actor/pg_clipfrac": 0.004,
    "actor/ppo_kl": 0.0009, "actor/grad_norm": 0.41, "actor/lr": 1e-6,
    "critic/score/mean": 0.62, "critic/rewards/mean": 0.61, "critic/advantages/mean": 0.0,
    "response_length/mean": 412.5, "response_length/clip_ratio": 0.02,
    "prompt_length/mean": 120.0, "timing_s/gen": 41.2, "timing_s/reward": 1.3,
    "timing_s/old_log_prob": 6.1, "timing_s/ref": 5.9, "timing_s/adv": 0.2,
    "timing_s/update_actor": 22.4, "timing_s/update_weights": 3.3, "timing_s/step": 81.0,
    "perf/throughput": 1520.0, "perf/total_num_tokens": 1_245_184.0,
    "perf/time_per_step": 81.0, "training/global_step": 3.0, "training/epoch": 0.0,
    "val-core/gsm8k/reward/mean@1": 0.71, "val-aux/gsm8k/reward/mean@1": 0.69,
}


def run_script(code: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {**env, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def client_env(cli, **extra) -> dict:
    env = {k: v for k, v in cli.env.items() if not k.startswith(("RL_INSIGHT_", "VERL_"))}
    env.update(extra)
    return env


VERL_SCRIPT = '''
import json, sys, rl_insight
steps = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
data = json.loads(__import__("os").environ["STEP_DATA"])
rl_insight.init(project="proj", experiment_name="verl-run", config={"unknown_key": 1})
for step in (1, 2, 3):
    # exactly what verl's tracking backend does with each step's dict
    for k, v in {**data, "step_marker": float(step)}.items():
        rl_insight.metric_gauge(k.replace("/", "_"), float(v))
rl_insight.finish()
'''


def expected_name(key: str) -> str:
    return naming.metric_name(key.replace("/", "_"), "gauge")[0]


@pytest.mark.integration
def test_verl_tracking_keys_reach_prometheus(route_server):
    cli, url = route_server.cli, route_server.url  # shared (tests/worlds.py): own run
    env = client_env(cli, RL_INSIGHT_SERVER_URL=url, VERL_RL_INSIGHT_ENABLE="1",
                     STEP_DATA=json.dumps(VERL_STEP))
    r = run_script(VERL_SCRIPT, env)
    assert r.returncode == 0, r.stderr
    assert "ignores unknown keys: unknown_key" in r.stderr
    ident = 'project="proj",experiment_name="verl-run"'

    def all_there():
        res = prom_query(cli.prometheus, f'{{{ident},job="rl_insight"}}')
        return {x["metric"]["__name__"]: float(x["value"][1]) for x in res}

    want = {expected_name(k): v for k, v in VERL_STEP.items()}
    want[expected_name("step_marker")] = 3.0
    got = wait_for(lambda: (g := all_there()) and set(want) <= set(g) and g, 20,
                   "every verl key in Prometheus")
    for name, value in want.items():
        assert got[name] == pytest.approx(value), name
    # the raw key survives as a label where the name had to change
    res = prom_query(cli.prometheus, 'rl_insight_monitor_val_aux_gsm8k_reward_mean_1')
    assert res[0]["metric"]["metric_key"] == "val-aux_gsm8k_reward_mean@1"
    assert all(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", n) for n in got)
    # the run was marked finished at the server
    exps = requests.get(url + "/api/v1/experiments", timeout=5).json()["experiments"]
    assert {e["experiment_name"]: e["status"] for e in exps}["verl-run"] == "finished"


TRACKING_SCRIPT = '''
import rl_insight
t = rl_insight.Tracking("proj", "tracking-run")
t.log({"actor": {"pg_loss": 0.5, "note": "text"}, "flag": True, "none": None,
       "val-aux/x/mean@1": 2}, step=7)
t.log({"actor/pg_loss": float("nan")}, step=8)
t.finish()
'''


@pytest.mark.integration
def test_tracking_backend_flattens_skips_and_exports_the_step(route_server):
    cli, url = route_server.cli, route_server.url  # shared (tests/worlds.py): own run
    r = run_script(TRACKING_SCRIPT, client_env(cli, RL_INSIGHT_SERVER_URL=url))
    assert r.returncode == 0, r.stderr
    text = requests.get(url + "/metrics", timeout=5).text
    run = 'experiment_name="tracking-run"'
    assert re.search(r'rl_insight_monitor_step\{' + run + r'.*\} 8\.0', text)
    assert re.search(r'rl_insight_monitor_actor_pg_loss\{' + run + r'.*metric_key='
                     r'"actor/pg_loss".*\} NaN', text)
    assert re.search(r'rl_insight_monitor_flag\{' + run + r'.*\} 1\.0', text)
    assert 'metric_key="val-aux/x/mean@1"' in text
    assert "note" not in text and "rl_insight_monitor_none" not in text


UNREACHABLE_SCRIPT = '''
import json, os, sys, time, tracemalloc
import rl_insight
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
N = 10_000
errors = 0
rl_insight.init("proj", "unreachable")
tracemalloc.start()

@rl_insight.trace_op(name="op", kind="x")
def op(i):
    return i

calls = [
    lambda i: rl_insight.metric_count("calls", 1.0, kind="c"),
    lambda i: rl_insight.metric_gauge("value", float(i)),
    lambda i: rl_insight.metric_histogram("latency", i / N),
    lambda i: rl_insight.trace_span(name="span", start_time_ns=i, end_time_ns=i + 5,
                                    attributes={"state_lane_id": f"traj_{i % 50}"}),
    lambda i: op(i),
    lambda i: rl_insight.update_prometheus_config([f"127.0.0.1:{20000 + i % 10}"], "vllm",
                                                  [{"replica": i % 10}]),
    lambda i: rl_insight.init(),
]
def block(i):
    with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
        pass
calls.append(block)
t0 = time.perf_counter()
for f in calls:
    for i in range(N):
        try:
            f(i)
        except Exception:
            errors += 1
elapsed = time.perf_counter() - t0
c = RUNTIME.client
peak = tracemalloc.get_traced_memory()[1]
t = c.transport()
print("CALLS " + json.dumps({"errors": errors, "per_call_us": elapsed / (len(calls) * N) * 1e6,
      "buffer_len": len(c.buffer.queue), "buffer_max": c.buffer.max_events,
      "pending_spans": len(t.lanes.pending), "pending_max": t.lanes.pending.maxlen,
      "registrations_queued": len(c.registrar().pending), "peak_mb": peak / 2**20}),
      flush=True)
# the server comes back: wait until everything left has been delivered
deadline = time.time() + 90
while time.time() < deadline:
    api.flush(5)
    t.hub_loop.run_now(10)
    t.lane_loop.run_now(10)
    if t.hub.sender.ok and t.lanes.sender.ok and not t.lanes.pending \\
            and c.registrar().idle():
        break
    time.sleep(0.5)
t.hub_loop.run_now(10)
t.lane_loop.run_now(10)
print("DONE " + json.dumps({"hub": t.hub.stats(), "lanes": t.lanes.stats(),
                             "client_dropped": c.buffer.dropped}), flush=True)
'''


@pytest.mark.integration
def test_server_unreachable_nothing_raises_memory_bounded_loss_counted(cli):
    port = cli.setting("server.port")
    url = f"http://127.0.0.1:{port}"
    env = client_env(cli, RL_INSIGHT_SERVER_URL=url,
                     RL_INSIGHT_CLIENT_BUFFER_MAX_EVENTS="5000",
                     RL_INSIGHT_CLIENT_LANE_MAX_PENDING_SPANS="2000",
                     RL_INSIGHT_CLIENT_HUB_PUSH_INTERVAL_S="0.5",
                     RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S="0.5",
                     RL_INSIGHT_CLIENT_REGISTRATION_RETRY_MAX_S="1",
                     PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", UNREACHABLE_SCRIPT], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line.startswith("CALLS "), line + proc.stderr.read()[-3000:]
        calls = json.loads(line[6:])
        assert calls["errors"] == 0
        assert calls["buffer_len"] <= calls["buffer_max"] == 5000
        assert calls["pending_spans"] <= calls["pending_max"] == 2000
        # deduplicated: ten distinct targets and the binding of the run init() named
        assert calls["registrations_queued"] <= 11
        assert calls["peak_mb"] < 64, calls
        cli.start("prometheus.enabled=false")  # the server comes back
        line = proc.stdout.readline()
        assert line.startswith("DONE "), line + proc.stderr.read()[-3000:]
        done = json.loads(line[5:])
    finally:
        proc.kill()
        proc.wait()
    lanes = done["lanes"]
    assert lanes["spans_dropped"] > 0, "the backlog limit was reached while it was down"
    assert lanes["spans_received"] == lanes["spans_sent"] + lanes["spans_dropped"]
    text = requests.get(url + "/metrics", timeout=5).text

    def value(name: str) -> float:
        return sum(float(m.group(1)) for m in
                   re.finditer(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M))

    assert value("rl_insight_lane_spans_dropped_total") == lanes["spans_dropped"]
    assert value("rl_insight_lane_spans_received_total") == lanes["spans_received"]
    assert value("rl_insight_hub_events_dropped_total") == done["hub"]["events_dropped"]
    assert done["hub"]["events_received"] + done["client_dropped"] >= 30_000 - 5000
    assert 'rl_insight_monitor_value{experiment_name="unreachable"' in text
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()["targets"]
    assert len([t for t in targets if t["experiment_name"] == "unreachable"]) == 10


FOUR_LANES_SCRIPT = '''
import json, sys, time, rl_insight
r = int(sys.argv[1])
rl_insight.init("proj", "four-lanes")
t0 = time.time_ns()
with rl_insight.trace_state("vllm_generate", state_lane_id=f"replica_{r}", step=1):
    time.sleep(0.02)
err = None
try:
    with rl_insight.trace_state("vllm_sleep", state_lane_id=f"replica_{r}"):
        time.sleep(0.01)
        if r == 2:
            raise ValueError("engine fell over")
except ValueError as e:
    err = str(e)
t1 = time.time_ns()
rl_insight.finish()
print("RESULT " + json.dumps({"t0": t0, "t1": t1, "err": err}))
'''


@pytest.mark.integration
def test_trace_state_from_four_processes(route_server):
    # the shared server relays to the shared FAKE Tempo: this run's spans are told apart
    # by their experiment
    cli, url, tempo = route_server.cli, route_server.url, route_server.tempo
    env = client_env(cli, RL_INSIGHT_SERVER_URL=url, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", FOUR_LANES_SCRIPT, str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(4)]
    results = {}
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results[r] = json.loads(out.strip().splitlines()[-1][len("RESULT "):])

    def mine() -> list:
        return [(a, s) for a, s in list(tempo.spans)
                if a.get("experiment_name") == "four-lanes"]

    wait_for(lambda: len(mine()) >= 8, 20, "eight spans at the receiver")
    assert results[2]["err"] == "engine fell over"  # propagated unchanged
    by_lane: dict[str, list] = {}
    for attrs, span in mine():
        by_lane.setdefault(attrs["state_lane_id"], []).append((attrs, span))
    assert sorted(by_lane) == [f"replica_{r}" for r in range(4)]
    for r in range(4):
        spans = sorted(by_lane[f"replica_{r}"], key=lambda x: x[1].start_time_unix_nano)
        assert [a["state_name"] for a, _ in spans] == ["vllm_generate", "vllm_sleep"]
        for attrs, span in spans:
            assert results[r]["t0"] <= span.start_time_unix_nano < span.end_time_unix_nano \
                <= results[r]["t1"]
            assert attrs["project"] == "proj" and attrs["experiment_name"] == "four-lanes"
            assert re.fullmatch(r".+:\d+", attrs["process_id"])
            assert attrs["service.name"] == "rl_insight_monitor"
        gen, sleep = spans
        assert gen[1].end_time_unix_nano - gen[1].start_time_unix_nano >= 20_000_000
        assert gen[0]["step"] == 1
        if r == 2:
            assert sleep[0]["error"] == "ValueError" and sleep[1].status.code == 2
        else:
            assert "error" not in sleep[0] and sleep[1].status.code == 0


EXTERNAL_SCRIPT = '''
import logging, sys, time, requests, rl_insight
logging.basicConfig(level=logging.WARNING)
rl_insight.init("proj", "external")
rl_insight.metric_gauge("ext_value", 5.0)
with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
    pass
rl_insight.flush(5)
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
t = RUNTIME.client.transport()
t.hub_loop.run_now(5); t.lane_loop.run_now(5)
addr = t.metrics_server.address.replace("0.0.0.0", "127.0.0.1")
print("SCRAPE " + requests.get(f"http://127.0.0.1:{t.metrics_server.port}/metrics").text)
'''


@pytest.mark.integration
def test_external_otlp_mode_without_server(cli):
    from rl_insight.common import netaddr

    tempo = FakeTempo(netaddr.free_port()).start()
    try:
        env = client_env(cli, RL_INSIGHT_OTLP_ENDPOINT=f"http://127.0.0.1:{tempo.port}",
                         RL_INSIGHT_CLIENT_METRICS_HOST="127.0.0.1")
        r = run_script(EXTERNAL_SCRIPT, env)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: tempo.spans, 10, "the span at the OTLP endpoint")
    finally:
        tempo.stop()
    assert "metrics are served at http://" in r.stderr
    scraped = r.stdout.split("SCRAPE ", 1)[1]
    assert 'rl_insight_monitor_ext_value{experiment_name="external",project="proj"} 5' \
        in scraped
    assert tempo.spans[0][0]["state_lane_id"] == "replica_0"


@pytest.mark.integration  # starts a process
def test_server_url_wins_over_otlp_endpoint(cli):
    env = client_env(cli, RL_INSIGHT_SERVER_URL="http://127.0.0.1:1",
                     RL_INSIGHT_OTLP_ENDPOINT="http://127.0.0.1:2")
    code = ("import logging; logging.basicConfig();\n"
            "from rl_insight.client.core import endpoints; print(endpoints())")
    r = run_script(code, env)
    assert "('http://127.0.0.1:1', '')" in r.stdout
    assert r.stderr.count("using the server") == 1


@pytest.mark.integration  # starts a process
def test_disabled_calls_create_nothing():
    code = """
import rl_insight
from rl_insight.client import api
from rl_insight.client.runtime import RUNTIME
rl_insight.metric_gauge("x", 1); rl_insight.metric_count("y")
with rl_insight.trace_state("s", state_lane_id="replica_0"): pass
rl_insight.update_prometheus_config(["a:1"], "vllm"); rl_insight.finish()
print(RUNTIME.client is None, rl_insight.enabled())
"""
    r = run_script(code, {"PATH": "/usr/bin:/bin"})
    assert r.stdout.strip() == "True False", r.stderr


# -- in-process checks of what the API builds --------------------------------------------

def test_trace_op_sync_async_nesting_and_errors(recorded):
    c, got = recorded

    # as upstream 0.3.0: extra_labels gets the first positional argument, before the call
    @api.trace_op(extra_labels=lambda x: {"size": x, "role": "critic"}, role="actor")
    def compute(x):
        with api.trace_state("update_weights", state_lane_id="rank_0"):
            return x * 2

    @api.trace_op(name="generate")
    async def generate(n):
        await asyncio.sleep(0)
        if n < 0:
            raise KeyError("negative")
        return n

    assert compute(3) == 6
    assert asyncio.run(generate(2)) == 2
    with pytest.raises(KeyError, match="negative"):
        asyncio.run(generate(-1))
    c.buffer.flush(5)
    spans = [e for e in got if type(e) is Span]
    names = [s.name for s in spans]
    assert names == ["update_weights", "compute", "generate", "generate"]
    inner, outer = spans[0], spans[1]
    assert inner.parent_id == outer.span_id and inner.trace_id == outer.trace_id
    assert dict(outer.attributes) == {"role": "critic", "size": 3,
                                      "monitor.trace_segment": "duration"}
    assert dict(spans[3].attributes)["error"] == "KeyError"
    assert inner.lane == "rank_0" and outer.lane is None
    (enter,) = [e for e in got if type(e) is StateChange]
    assert (enter.state, enter.entering, enter.token) == ("update_weights", True,
                                                          inner.span_id)
    assert inner.ends_state and not outer.ends_state  # the block's span closes the state


def test_nested_states_on_one_lane_stack_and_names_are_sanitised(recorded):
    c, got = recorded
    with api.trace_state("vllm_generate", state_lane_id="replica_0"):
        with api.trace_state("vllm_sleep", state_lane_id="replica_0"):
            pass
    api.metric_histogram("ttft/seconds", 0.3, "doc")
    api.init(config={"histogram_buckets": {"ttft/seconds": [0.1, 1, 10]}})
    api.metric_histogram("ttft/seconds", 0.3)
    api.metric_gauge("ok_name", 1, **{"bad-label": 1, "project": "x"})
    c.buffer.flush(5)
    metrics = [e for e in got if type(e) is Metric]
    assert metrics[0].name == "rl_insight_monitor_ttft_seconds" and metrics[0].buckets is None
    assert metrics[1].buckets == (0.1, 1.0, 10.0)
    assert dict(metrics[2].labels) == {"bad_label": "1", "exported_project": "x"}
    from rl_insight.collector.lanes import LaneCore
    from tests.test_collector import RecordingSender, samples

    lanes = LaneCore(RecordingSender(), "l")
    ident = api.Identity("p", "e")
    events = [e for e in got if type(e) in (StateChange, Span)]
    seen = []
    for ev in events:  # enter generate, enter sleep, sleep's span, generate's span
        lanes.ingest(ident, "h", [ev])
        seen.append(lanes.stats()["current"].get("p/e/replica_0"))
    assert seen == ["vllm_generate", "vllm_sleep", "vllm_generate", None]
    lanes.push_metrics()  # both states ended before it: 0, with their seconds counted
    got_metrics = samples([p[2] for p in lanes.sender.pushes if "project" in p[1]][-1])
    assert all(v == 0 for (n, _), v in got_metrics.items()
               if n == "rl_insight_monitor_lane_state")
    assert {dict(k)["state_name"] for n, k in got_metrics
            if n == "rl_insight_monitor_lane_state_seconds_total"} == {"vllm_generate",
                                                                       "vllm_sleep"}


def test_rollout_registration_checks_and_dedups(recorded, monkeypatch):
    c, _ = recorded
    sent: list = []

    class FakeRegistrar:  # records what the background thread would send
        def submit(self, body):
            key = json.dumps(body, sort_keys=True)
            if key in sent:
                return False
            sent.append(key)
            return True

    monkeypatch.setattr(c, "registrar", lambda: FakeRegistrar())
    with pytest.raises(api.check_rollout_stats.__globals__["RolloutStatsDisabled"],
                       match="disable_log_stats=False"):
        api.register_rollout_replicas(["a:1"], "vllm", disable_log_stats=True)
    api.register_rollout_replicas(["http://10.0.0.1:8000/metrics", "10.0.0.2:8000"], "sglang")
    api.register_rollout_replicas(["http://10.0.0.1:8000/metrics", "10.0.0.2:8000"], "sglang")
    api.register_transfer_queue("10.0.0.3:9000")
    bodies = [json.loads(s) for s in sent]
    assert all(b.pop("owner") == c.owner_key() for b in bodies)
    assert bodies[0] == {"job_name": "sglang", "targets": ["10.0.0.1:8000", "10.0.0.2:8000"],
                         "labels": [{"replica": "0"}, {"replica": "1"}]}
    assert bodies[1] == {"job_name": "transfer_queue", "targets": ["10.0.0.3:9000"]}
    assert len(bodies) == 2


def test_api_signatures_match_the_contract():
    import inspect

    import rl_insight

    sig = {n: str(inspect.signature(getattr(rl_insight, n))) for n in (
        "init", "finish", "metric_count", "metric_gauge", "metric_histogram", "trace_op",
        "trace_span", "update_prometheus_config")}
    assert sig["init"] == "(project: 'str | None' = None, experiment_name: 'str | None' " \
        "= None, config: 'Mapping[str, Any] | None' = None) -> 'None'"
    # the contract's calls, positional or keyword, work; the parameters are positional-only
    # so that a label may share their names (name=, value=, amount=, documentation=)
    # (name= too: upstream documents keyword calls; a missing name is logged, not raised)
    assert sig["metric_count"].startswith("(name: 'str' = <required>, amount: 'float' = 1.0, "
                                          "documentation: 'str' = '', /, **labels")
    assert sig["metric_gauge"].startswith("(name: 'str' = <required>, value: 'float' = "
                                          "<required>, documentation: 'str' = '', /, **labels")
    assert sig["trace_span"].startswith("(*, name: 'str', start_time_ns: 'int', "
                                        "end_time_ns: 'int', attributes")
    assert sig["trace_op"].startswith("(name: 'str | Callable | None' = None, *, "
                                      "extra_labels")
    assert sig["update_prometheus_config"].startswith(
        "(server_addresses: 'Sequence[str] | str', job_name: 'str | None' = None, labels")
    assert "state_lane_id" in str(inspect.signature(rl_insight.trace_state))


SHORT_LIVED = '''
import sys, rl_insight
base = int(sys.argv[2])
for i in range(10):
    rl_insight.update_prometheus_config([f"127.0.0.1:{base + i}"], "vllm", [{"replica": i}])
if sys.argv[1] == "init-after":  # verl's order: registration first, then the run is named
    rl_insight.init(project="short", experiment_name="lived")
if sys.argv[1] in ("finish", "init-after"):
    rl_insight.finish()
'''


@pytest.mark.integration
@pytest.mark.parametrize("ending", ["exit", "finish", "init-after"])
def test_registrations_of_a_short_lived_process_arrive(route_server, ending):
    """A process that registers and exits at once still delivers every registration
    (finish() and interpreter exit wait for them within the exit deadline)."""
    cli, url = route_server.cli, route_server.url  # shared: each ending its own ports
    base = 31000 + 100 * ["exit", "finish", "init-after"].index(ending)
    env = client_env(cli, RL_INSIGHT_SERVER_URL=url, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", SHORT_LIVED, ending, str(base)], env=env,
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    ours = {f"127.0.0.1:{base + i}" for i in range(10)}
    rows = [t for t in requests.get(url + "/api/v1/prometheus/targets", timeout=5).json()
            ["targets"] if t["target"] in ours]
    assert sorted(t["labels"]["replica"] for t in rows) == [str(i) for i in range(10)]
    want = ("short", "lived") if ending == "init-after" else ("", "")
    assert {(t["project"], t["experiment_name"]) for t in rows} == {want}
    assert all(t["awaiting_run"] == (ending != "init-after") for t in rows)


def test_label_names_equal_to_parameter_names_never_raise(recorded):
    c, got = recorded
    api.metric_gauge("loss", 0.1, name="actor")  # a label called name
    api.metric_count("x", 1, amount=3)  # amount given twice: the keyword is a label
    api.metric_count("y", amount=3)  # the contract's keyword form still works
    api.metric_gauge("z", value=2.0, documentation="doc")
    api.metric_histogram("h", 0.5, "help", value="v")
    api.metric_gauge("missing")  # no value at all: counted, not raised
    c.flush(2)
    by_name = {m.name: m for m in got}
    assert dict(by_name["rl_insight_monitor_loss"].labels) == {"name": "actor"}
    x = by_name["rl_insight_monitor_x_total"]
    assert x.value == 1 and dict(x.labels) == {"amount": "3"}
    assert by_name["rl_insight_monitor_y_total"].value == 3
    z = by_name["rl_insight_monitor_z"]
    assert z.value == 2.0 and z.doc == "doc" and z.labels == ()
    assert dict(by_name["rl_insight_monitor_h"].labels) == {"value": "v"}
    assert "rl_insight_monitor_missing" not in by_name


def test_disabled_calls_with_clashing_names_do_not_raise(monkeypatch):
    monkeypatch.setattr(RUNTIME, "client", None)
    monkeypatch.setattr(RUNTIME, "checked", True)
    api.metric_gauge("loss", 0.1, name="actor")
    api.metric_count("x", 1, amount=3)
    api.metric_gauge("x", 1.0, value=2)
