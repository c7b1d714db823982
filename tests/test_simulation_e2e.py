"""End to end: the simulated RL run on a real Ray cluster against the server and a real
Prometheus (plus Debian's node_exporter); then every PromQL expression of every
dashboard panel, its variables substituted, returns data for that run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import requests

from dashboards import build, panels
from rl_insight.common import netaddr
from tests.conftest import REPO, wait_for

pytestmark = pytest.mark.integration
# the vLLM run names its lanes as verl main does (rollout_replica_<r>, and a teacher's
# teacher_deepseek_r1_replica_<r> whose replica 1 is slow); the others as verl 0.9.1 and
# VeRL-Omni do (replica_<r>)
VERL_MAIN = ("--lanes", "verl-main", "--teacher", "deepseek_r1", "--teacher-slowdown", "3")
TEACHER = "teacher_deepseek_r1"
# each backend's FAKE engine through its real serving path; the asynchronous runs with the
# real TransferQueue driven as verl's V1 trainer drives it (their dashboards have its
# section), vLLM synchronous without it, its engines sleeping and waking between phases;
# vLLM-Omni's as each VeRL-Omni trainer mode logs (tests/verl_omni_keys.py)
RUNS = {  # name -> (backend, mode, experiment, more arguments)
    "vllm": ("vllm", "sync", "e2e-vllm-sync", VERL_MAIN),
    "sglang": ("sglang", "async", "e2e-sglang-async", ()),
    "diffusion": ("vllm_omni", "sync", "e2e-verl-omni-diffusion", ("--trainer", "diffusion")),
    "omni": ("vllm_omni", "sync", "e2e-verl-omni-omni", ("--trainer", "omni")),
    "diffusion_v1": ("vllm_omni", "async", "e2e-verl-omni-diffusion-v1",
                     ("--trainer", "diffusion-v1"))}
# TransferQueue's controller is one named actor per cluster ("TransferQueueController" in
# namespace "transfer_queue"): two runs with it cannot overlap, a run without it can. The
# runs without it split between the two batches: four at once, then one alone, left the
# second batch's CPU idle
BATCHES = (("sglang", "vllm", "diffusion"), ("diffusion_v1", "omni"))
TQ_RUN = "sglang"  # the run the TransferQueue dashboard and its test read
DASHBOARD_RUNS = {  # a dashboard's uid, as far as it names the run it shows
    "verl-omni-diffusion-v1": "diffusion_v1", "verl-omni-diffusion": "diffusion",
    "verl-omni-omni": "omni", "vllm-omni": "diffusion", "sglang": "sglang",
    "transfer-queue": TQ_RUN}


FRAMEWORK_BOARDS = "rl-insight-framework-"  # tests/test_simulation_frameworks.py
# two runs on one board: tests/test_compare_e2e.py fills it with two simulated runs
ELSEWHERE = (FRAMEWORK_BOARDS, "rl-insight-run-vs-run")


def simulate(cluster, name: str) -> subprocess.Popen:
    backend, mode, exp, more = RUNS[name]
    log = tempfile.TemporaryFile("w+")  # a file: side by side, no pipe fills up
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "simulate_rl.py"), "--steps", "3",
         "--replicas", "2", "--ranks", "2", "--mode", mode, "--backend", backend,
         "--step-seconds", "3", "--val-every", "2", "--project", "e2e",
         "--linger", "8",  # Prometheus picks new file_sd targets up within ~5-10 s
         "--experiment-name", exp,
         "--transfer-queue" if mode == "async" else "--no-transfer-queue", *more],
        env=cluster.env(), cwd=cluster.workdir, stdout=log, stderr=subprocess.STDOUT,
        text=True)
    proc.log = log
    return proc


def output(proc: subprocess.Popen) -> str:
    proc.log.seek(0)
    return proc.log.read()


@pytest.fixture(scope="module")
def world(ray_world, framework_runs):
    """The five runs (RUNS), in two batches one after another (BATCHES), on the shared
    server and Ray cluster (tests/worlds.py), plus Debian's node_exporter registered as
    node-a's; the other frameworks' runs (tests/test_simulation_frameworks.py reads them)
    started with the Ray world."""
    cli, url, cluster = ray_world.cli, ray_world.url, ray_world.cluster
    node_exporter = None
    if shutil.which("prometheus-node-exporter"):
        port = netaddr.free_port()
        node_exporter = subprocess.Popen(
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = requests.post(url + "/api/v1/prometheus/targets", json={
            "job_name": "node-exporter", "targets": [f"127.0.0.1:{port}"],
            "labels": {"node": "node-a"}}, timeout=5)
        assert r.status_code == 200, r.text
    runs, procs = {}, {}
    try:
        # each batch's runs start as soon as the runs with TransferQueue before them are
        # done (its controller is one per cluster); the others need not wait
        waiting = [list(b) for b in BATCHES]
        procs = {b: simulate(cluster, b) for b in waiting.pop(0)}
        deadline = time.monotonic() + 300
        while len(runs) < sum(len(b) for b in BATCHES):
            assert time.monotonic() < deadline, f"simulations still running: {procs}"
            for backend, proc in list(procs.items()):
                if backend in runs or proc.poll() is None:
                    continue
                out = output(proc)
                assert proc.returncode == 0, f"{backend}: " + out[-6000:]
                line = next(x for x in out.splitlines() if x.startswith("SIMULATION "))
                runs[backend] = json.loads(line[len("SIMULATION "):])
                runs[backend]["t_done"] = time.time()  # after the endpoints' linger
            if waiting and all(b in runs for b in procs if RUNS[b][1] == "async"):
                procs.update({b: simulate(cluster, b) for b in waiting.pop(0)})
            time.sleep(0.2)
        yield cli, url, runs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if node_exporter:
            node_exporter.terminate()
            node_exporter.wait(10)
            requests.delete(url + "/api/v1/prometheus/targets", json={
                "job_name": "node-exporter", "targets": [f"127.0.0.1:{port}"],
                "labels": {"node": "node-a"}}, timeout=5)


# what simulate_rl.py logs as verl would (a critic, rollout correction, the V1 trainer's
# off-policy tags, rollout log-probs) and as Uni-Agent's router would
SIMULATED = ("critic", "rollout-correction", "v1-trainer", "rollout-log-probs",
             "uni-agent-router")


def substitute(expr: str, run: dict | None) -> str:
    values = {"$project": run["project"] if run else ".*",
              "$experiment_name": run["experiment_name"] if run else ".*",
              "$replica": ".*", "$role": ".*", "$lane_role": ".*", "$node": ".*",
              "$__rate_interval": "10s",
              "$__range": "5m", "$__interval": "2s", "$__interval_ms": "2000"}
    for k in sorted(values, key=len, reverse=True):
        expr = expr.replace(k, values[k])
    assert "$" not in re.sub(r'"\$1"', "", expr), expr
    return expr


def query_range(prom: str, expr: str, start: float, end: float,
                auth: tuple[str, str] | None = None) -> list:
    """``auth``: a Prometheus beyond loopback wants the server-made password."""
    r = requests.get(prom + "/api/v1/query_range", params={
        "query": expr, "start": start, "end": end, "step": "1s"}, timeout=20, auth=auth)
    body = r.json()
    assert body.get("status") == "success", f"{expr}: {body.get('error')}"
    return body["data"]["result"]


def first_seen(prom: str, expr: str, run: dict) -> dict:
    """Where a series missing from its run's window is, for the failure's message: each
    lane's first and last non-zero sample, seconds from the run's start, up to now."""
    end = time.time()
    out = {"t_done": round(run["t_done"] - run["t_start"], 1)}
    for x in query_range(prom, expr, run["t_start"] - 60, end):
        times = [float(t) - run["t_start"] for t, v in x["values"] if float(v) > 0]
        out[x["metric"].get("state_lane_id", str(x["metric"]))] = \
            (round(min(times), 1), round(max(times), 1)) if times else None
    # lanes filed under a run of their own (a worker that never learnt its job's run)
    out["default"] = [x["metric"] for x in query_range(
        prom, 'count by (experiment_name, state_lane_id) '
              '(rl_insight_monitor_lane_state{project="default"})', run["t_start"] - 60, end)]
    return out


def run_for(uid: str, runs: dict) -> dict | None:
    if uid in ("rl-insight-hardware", "rl-insight-self"):
        return None
    for part, name in DASHBOARD_RUNS.items():  # the longest name first
        if part in uid:
            return runs[name]
    return runs["vllm"]


def test_every_panel_query_returns_data_for_the_run(world):
    cli, _, runs = world
    prom = cli.prometheus
    for run in runs.values():  # the trainer's last step reached Prometheus
        q = (f'rl_insight_monitor_step{{experiment_name="{run["experiment_name"]}"}}')
        wait_for(lambda q=q: any(float(x["value"][1]) == 3 for x in requests.get(
            prom + "/api/v1/query", params={"query": q}).json()["data"]["result"]),
            20, f"the last step of {run['experiment_name']}")
    # each run's panels over its own start to now, as its dashboard shows it after the
    # run: on a loaded host what a run handed over can reach Prometheus after it ended
    # (beside a busy loop a CI clone's VeRL-Omni rewards were first scraped 5 s after its
    # driver was done, the server answering late), and the queries name the run
    end_all = time.time()
    empty, checked, skipped = [], 0, []
    for d in build.dashboards():
        if d.uid.startswith(ELSEWHERE):  # with their runs: test_simulation_frameworks
            continue
        run = run_for(d.uid, runs)
        start = (run or min(runs.values(), key=lambda r: r["t_start"]))["t_start"] - 5
        for section in d.sections:
            srun, sstart, send = run, start, end_all
            if section is build.TQ and run is not None and run["mode"] == "sync":
                # the vLLM async dashboard's TransferQueue section: the run with the queue
                srun = runs[TQ_RUN]
                sstart = srun["t_start"] - 5
            for panel in section.panels:
                if panel.repeat.startswith("k_"):  # one per listed name: below,
                    continue  # test_every_logged_key_has_a_row_of_all_trainer_metrics
                if panel.needs and panel.needs not in (*SIMULATED, "node-exporter"):
                    skipped.append(f"{d.uid}/{panel.title} (needs {panel.needs})")
                    continue
                if panel.needs == "node-exporter" and not shutil.which(
                        "prometheus-node-exporter"):
                    skipped.append(f"{d.uid}/{panel.title} (no node_exporter here)")
                    continue
                for q in panel.queries:
                    if q.datasource != "prometheus":
                        continue
                    expr = substitute(q.expr, srun)
                    checked += 1
                    if not query_range(prom, expr, sstart, send):
                        where = first_seen(prom, expr, srun) if srun else ""
                        empty.append(f"{d.uid} / {panel.title}: {expr} {where}")
    assert checked > 150
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # GPUs and NPUs are not here; alert panels have rows only while an alert fires
    # (tests/test_anatomy_e2e.py makes them fire)
    # VeRL-Omni's direct-preference trainers (DPO, DiffusionNFT) and its agentic rewards
    # are not simulated: their panels' keys reach their rows (test_dashboards.py)
    # the engines' request spans: tests/test_anatomy_e2e.py's run traces them; what
    # changed: tests/test_changes_e2e.py's run drifts; a rank straggler:
    # tests/test_culprit_ranks.py's gloo ranks; the kernels and experts of profiled steps:
    # an import of profiler files (tests/test_gpu_anatomy.py)
    assert all(any(n in s for n in ("dcgm", "npu", "needs alerts", "direct-preference",
                                    "agentic-reward", "engine-traces", "regression",
                                    "rank-straggler", "profiler-import"))
               for s in skipped), \
        skipped


def test_dashboard_variables_list_the_run(world):
    cli, _, runs = world
    prom = cli.prometheus
    for d in build.dashboards():
        if d.uid.startswith(ELSEWHERE):
            continue
        model = build.model(d)
        run = run_for(d.uid, runs)
        for var in model["templating"]["list"]:
            if var["name"].startswith("k_"):  # a key group's names; may be empty
                continue
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["definition"])
            assert m, var["definition"]
            selector, label = m.groups()
            selector = substitute(selector, run)
            r = requests.get(prom + f"/api/v1/label/{label}/values",
                             params={"match[]": selector}, timeout=10).json()
            assert r["status"] == "success" and r["data"], (d.uid, var["name"], selector)
            if run and label in ("project", "experiment_name"):
                assert run[label] in r["data"]


def label_values(prom: str, label: str, selector: str) -> set[str]:
    r = requests.get(prom + f"/api/v1/label/{label}/values", params={"match[]": selector},
                     timeout=10).json()
    assert r["status"] == "success", (selector, r)
    return set(r["data"])


def test_every_logged_key_has_a_row_of_all_trainer_metrics(world):
    """Every name the trainer logged is listed by exactly one key group's variable (the
    rows repeated over it in the training dashboard), and nothing of RL-Insight's own."""
    cli, _, runs = world
    run = runs[next(iter(runs))]
    ident = {"project": run["project"], "experiment_name": run["experiment_name"]}
    logged = label_values(cli.prometheus, "__name__", '{__name__=~"rl_insight_monitor_.+",'
                          f'project="{ident["project"]}",experiment_name="'
                          f'{ident["experiment_name"]}"}}')
    listed: dict[str, list[str]] = {}
    for group in panels.key_groups():
        for name in label_values(cli.prometheus, "__name__", substitute(group.selector(), run)):
            listed.setdefault(name, []).append(group.title)
    twice = {n: g for n, g in listed.items() if len(g) > 1}
    assert not twice, twice
    own = {n for n in logged if re.match(r"rl_insight_monitor_(lane_state|lanes_in_state|"
                                         r"state_duration_seconds|agent_loop_|step$)", n)
           or re.fullmatch(f"rl_insight_monitor_({panels.ROUTER_NAMES})", n)}
    assert set(listed) == logged - own, sorted(logged - own ^ set(listed))
    rows = {g[0] for g in listed.values()}
    assert {"actor/*", "critic/*", "timing_s/*", "rollout_corr/*", "val-core/*"} <= rows


def test_transfer_queue_storage_units_found_and_scraped(world):
    """verl registers only the controller; the client finds both storage units of the real
    TransferQueue and registers them, and their request types are TransferQueue's own."""
    cli, _, runs = world
    run = runs[TQ_RUN]
    sel = f'project="e2e",experiment_name="{run["experiment_name"]}"'
    r = requests.get(cli.prometheus + "/api/v1/query_range", params={
        "query": f'count by (job) (up{{job=~"transfer_queue.*",{sel}}} == 1)',
        "start": run["t_start"], "end": run["t_done"], "step": "1s"}, timeout=10).json()
    seen = {x["metric"]["job"]: max(int(v) for _, v in x["values"])
            for x in r["data"]["result"]}
    assert seen == {"transfer_queue": 1, "transfer_queue_storage": 2}, seen
    series = requests.get(cli.prometheus + "/api/v1/series", params={
        "match[]": f"tq_storage_request_total{{{sel}}}", "start": run["t_start"],
        "end": run["t_done"]}, timeout=10).json()["data"]
    assert {s["op_type"] for s in series} >= {"PUT_DATA", "GET_DATA", "CLEAR_DATA"}
    ops = requests.get(cli.prometheus + "/api/v1/series", params={
        "match[]": f"tq_controller_request_total{{{sel}}}", "start": run["t_start"],
        "end": run["t_done"]}, timeout=10).json()["data"]
    assert {"NOTIFY_DATA_UPDATE", "GET_META", "KV_LIST", "CLEAR_META"} <= \
        {s["op_type"] for s in ops}


def test_vllm_omni_replica_is_the_rl_replica_and_its_own_is_engine_replica(world):
    """Prometheus would rename vLLM-Omni's own `replica` to exported_replica; the generated
    config names it engine_replica, and `replica` stays the RL replica of the target."""
    cli, _, runs = world
    run = runs["diffusion"]
    series = requests.get(cli.prometheus + "/api/v1/series", params={
        "match[]": f'vllm:num_requests_running{{experiment_name="{run["experiment_name"]}"}}',
        "start": run["t_start"], "end": run["t_done"]}, timeout=10).json()["data"]
    assert sorted(s["replica"] for s in series) == ["0", "1"]
    assert {(s["engine_replica"], s["stage"]) for s in series} == {("0", "0")}
    assert not any("exported_replica" in s for s in series)


def test_step_anatomy_in_both_modes(world):
    """Separate-asynchronous: the next batch is generated while the ranks train, so
    rollout and training overlap and the trainer consumes a batch one weight update old;
    synchronous: neither."""
    _, url, runs = world

    def rows(run):
        r = requests.get(url + "/api/v1/anatomy", params={
            "project": run["project"], "experiment_name": run["experiment_name"]},
            timeout=5)
        steps = r.json()["steps"] if r.status_code == 200 else []
        return steps if len(steps) == 3 else None

    def settled(run):
        """A row made before a slow lane actor's spans arrived is made again when they
        do (late spans, docs/anatomy.md): wait for rows that have both replicas."""
        steps = rows(run)
        return steps if steps and all(
            {r for r, v in s["replicas"].items() if v["role"] == "rollout"} == {"0", "1"}
            for s in steps) else None

    for name, (_, mode, _, _) in RUNS.items():
        wait_for(lambda n=name: rows(runs[n]), 20, f"3 steps of {name}")
        steps = settled(runs[name]) or wait_for(lambda n=name: settled(runs[n]), 40,
                                                f"3 steps of {name}, both replicas in each")
        assert [s["step"] for s in steps] == [1, 2, 3]
        assert all({r for r, v in s["replicas"].items() if v["role"] == "rollout"}
                   == {"0", "1"} for s in steps)
        if mode == "async":  # the last step generates nothing: no next batch
            for s in steps[:2]:
                assert all(r["generate_s"] > 0 for r in s["replicas"].values()), s
                assert s["overlap_s"] > 0.1, s
            assert {"switch_to_trainer", "switch_to_rollout"} <= set(steps[1]["phases"])
            # step 3 reads 0: step 2's validation generated after its weight update, and
            # the lanes cannot tell a validation batch from a training one (docs/anatomy.md)
            assert [s["staleness"] for s in steps[:2]] == [0, 1], steps
        else:
            for s in steps:
                assert all(r["generate_s"] > 0 for r in s["replicas"].values()), s
                assert s["staleness"] == 0 and s["overlap_s"] < 0.05, s


def test_verl_mains_lanes_by_role_fill_timeline_engines_and_anatomy(world):
    """The vLLM run names its lanes as verl main does: the timeline has a panel per role
    (the policy's rollout, the teacher, the ranks) holding exactly that role's lanes, the
    teacher's engines are a row of their own, and the step anatomy gives the teacher its
    own straggler (its replica 1, 3x slower), never the policy's."""
    cli, url, runs = world
    run = runs["vllm"]
    prom, sel = cli.prometheus, (f'project="{run["project"]}",'
                                 f'experiment_name="{run["experiment_name"]}"')
    lane_roles = label_values(prom, "role", f"rl_insight_monitor_lane_state{{{sel}}}")
    assert lane_roles == {"rollout", TEACHER, "ranks"}, lane_roles
    panel = next(p for p in panels.TIMELINE_PROM if p.repeat == "lane_role")
    expect = {"rollout": {"rollout_replica_0", "rollout_replica_1"},
              TEACHER: {f"{TEACHER}_replica_0", f"{TEACHER}_replica_1"},
              "ranks": {"rank_0", "rank_1"}}
    for role, lanes in expect.items():
        expr = substitute(panel.queries[0].expr.replace("$lane_role", role), run)
        got = {x["metric"]["state_lane_id"]
               for x in query_range(prom, expr, run["t_start"] - 5, run["t_done"] + 2)}
        assert got == lanes, (role, got, first_seen(prom, expr, run))
    # the teacher's engines apart from the policy's: the rows repeat per role
    for role, replicas in (("rollout", {"0", "1"}), (TEACHER, {f"{TEACHER}_0",
                                                               f"{TEACHER}_1"})):
        got = label_values(prom, "replica", f'vllm:num_requests_running{{{sel},'
                                            f'role="{role}"}}')
        assert got == replicas, (role, got)
    steps = requests.get(url + "/api/v1/anatomy", params={
        "project": run["project"], "experiment_name": run["experiment_name"]},
        timeout=5).json()["steps"]
    for s in steps:
        teacher, rollout = s["roles"][TEACHER], s["roles"]["rollout"]
        assert teacher["slowest_replica"] == f"{TEACHER}_1", s
        # two replicas, one 3x slower: 3 / median(1, 3) = 1.5 (engines vary around it)
        assert teacher["straggler_ratio"] > 1.35, s
        assert rollout["straggler_ratio"] < teacher["straggler_ratio"], s
        assert s["straggler_ratio"] == rollout["straggler_ratio"], s
        assert s["slowest_replica"] in ("0", "1"), s
    # the anatomy dashboard's per-role straggler series carry the teacher's own
    got = requests.get(prom + "/api/v1/query_range", params={
        "query": f'rl_insight_step_role_straggler_ratio{{{sel},role="{TEACHER}"}}',
        "start": run["t_start"], "end": run["t_done"] + 30, "step": "1s"}, timeout=10).json()
    assert got["data"]["result"], got


# -- upstream rl-insight's own dashboards (its 0.3.0 wheel: verl/, verl-omni/,
# agent_loop_trajectory/) on this package's data ------------------------------------------
UPSTREAM_RUNS = {"verl/verl_tainer_v1_with_sglang_engine.json": "sglang",
                 "verl/verl_tainer_v1_with_vllm_engine.json": "vllm",
                 "verl-omni/verl_omni_trainer_v1_with_vllm_omni_engine.json": "diffusion_v1"}
UPSTREAM_GAPS = REPO / "docs" / "upstream-dashboards.md"


def upstream_substitute(expr: str, run: dict, **values: str) -> str:
    """Grafana's $var and ${var[:format]} as upstream's dashboards use them: the run's
    project and experiment, every other variable All (``.*``)."""
    known = {"project": run["project"], "experiment_name": run["experiment_name"],
             "experiment": run["experiment_name"], "__rate_interval": "10s",
             "interval": "10s", "__interval": "2s", "__range": "5m", **values}
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)",
                  lambda m: known.get(m.group(1) or m.group(2), ".*"), expr)


def upstream_gaps() -> dict[tuple[str, str], str]:
    """(dashboard, panel) -> why, from the table in docs/upstream-dashboards.md."""
    rows = re.findall(r"^\| `([^`]+)` \| (.+?) \| (.+?) \|$", UPSTREAM_GAPS.read_text(), re.M)
    return {(d, p.strip()): why for d, p, why in rows}


def test_upstream_dashboards_read_this_packages_metrics_query_by_query(world, ray_world):
    """Every PromQL query of upstream's verl and verl-omni dashboards returns data for
    the matching run, and every TraceQL filter matches its spans, except the panels
    docs/upstream-dashboards.md lists with the reason (and only those)."""
    from tests import upstream_env
    from tests.traceql import span_filter

    cli, _, runs = world
    boards = upstream_env.dashboards()
    spans = ray_world.tempo.spans
    empty: dict[tuple[str, str], str] = {}
    checked = 0
    for path, name in UPSTREAM_RUNS.items():
        for title, group, expr in upstream_env.panel_queries(boards[path]):
            # TransferQueue's panels: the run with the queue (as ours: see above)
            run = runs[TQ_RUN if "tq_" in expr and runs[name]["mode"] == "sync" else name]
            q = upstream_substitute(expr, run)
            checked += 1
            if group == "tempo":
                keep = span_filter(q)
                if not any(keep(a, s) for a, s in spans):
                    empty[(path, title)] = q
            elif not query_range(cli.prometheus, q, run["t_start"] - 5, run["t_done"] + 2):
                empty[(path, title)] = q
    assert checked > 400
    gaps = upstream_gaps()
    undocumented = {k: v for k, v in empty.items() if k not in gaps}
    assert not undocumented, "upstream panels without data, not in " \
        f"{UPSTREAM_GAPS.name}:\n" + "\n".join(f"| `{d}` | {p} | {q}" for (d, p), q in
                                               sorted(undocumented.items()))
    answered = [k for k in gaps if k[0] in UPSTREAM_RUNS and k not in empty]
    assert not answered, f"{UPSTREAM_GAPS.name} lists panels that have data: {answered}"


@pytest.mark.parametrize("mode", ["diffusion", "diffusion-v1", "omni"])
def test_each_verl_omni_run_logs_its_trainers_keys(world, mode):
    """The simulated VeRL-Omni runs log what VeRL-Omni's trainers log (tests/
    verl_omni_keys.py, read from its source), so their dashboards are filled by the
    keys real runs write."""
    from tests import verl_omni_keys

    cli, _, runs = world
    run = runs[mode.replace("-", "_")]
    logged = label_values(cli.prometheus, "__name__", '{__name__=~"rl_insight_monitor_.+",'
                          f'experiment_name="{run["experiment_name"]}"}}')
    want = {panels.gauge_key(k) for k in verl_omni_keys.MODES[mode]}
    if mode != "omni":  # the omni run's validation is verl's own (openai/gsm8k)
        want |= {panels.gauge_key(k) for k in verl_omni_keys.VALIDATION}
    assert not want - logged, sorted(want - logged)


def test_uni_agents_spans_fill_both_agent_loop_dashboards(world, ray_world):
    """The simulation's agent loops call this API as Uni-Agent does (examples/
    simulate_rl.py ``agent_loop``, after uni_agent/framework/framework.py and
    uni_agent/rl_insight/adapter.py): every Tempo panel of this package's agent-loop
    dashboard and of upstream's agent_loop_trajectory dashboard matches the delivered
    spans, global_steps compared as a number as upstream's step filter does."""
    from tests import upstream_env
    from tests.traceql import span_filter

    _, _, runs = world
    run = runs["vllm"]
    mine = [(a, s) for a, s in ray_world.tempo.spans
            if a.get("experiment_name") == run["experiment_name"]]
    gen = wait_for(lambda: [(a, s) for a, s in mine if s.name == "gateway_generation"],
                   10, "the run's gateway_generation spans")
    ident, _ = gen[0]
    assert isinstance(ident["global_steps"], int) and isinstance(ident["turn"], int)
    assert {s.name for _, s in mine} >= {"agent_session", "agent_task", "gateway_generation"}
    ours = next(d for d in build.dashboards() if d.uid == "rl-insight-agent-loop")
    queries = [q.expr for sec in ours.sections for p in sec.panels for q in p.queries
               if q.datasource == "tempo"]
    upstream = upstream_env.dashboards()["agent_loop_trajectory/agent_loop_trajectory.json"]
    values = {"step": str(ident["global_steps"]), "traj": ident["traj"],
              "session": f"sample={ident['sample']}/session={ident['session']}"}
    queries += [upstream_substitute(q, run, **values)
                for _, group, q in upstream_env.panel_queries(upstream) if group == "tempo"]
    assert len(queries) == 5
    for q in queries:
        q = substitute(q, run) if "$" in q else q
        keep = span_filter(q)
        assert any(keep(a, s) for a, s in mine), q
