"""prime-rl: ``python -m rl_insight.integrations.prime_rl rl @ rl.toml``
(rl_insight/integrations/prime_rl.py, the table rl_insight/frameworks/prime_rl.py).

prime-rl's files, PrimeIntellect-ai/prime-rl 559b4477: src/prime_rl/monitors/__init__.py
(``setup`` l.41-84, building its monitors on rank 0 only; ``log`` l.101-113 and
``finalize`` l.116-122, fanning out and never raising), trainer/rl/train.py (``setup``
l.86-90, the metrics server l.98-105, each step's five ``monitors.log`` calls l.651-693
with ``time/step``, ``wait_for_batch``, ``load_data``, ``broadcast_weights``,
``save_ckpt``, ``forward_backward`` l.679-688), orchestrator/orchestrator.py (``setup``
l.220-228, its step's dict l.698-747 with ``time/step``, ``pack``, ``save_ckpt``,
``wait_for_policy``, ``finalize`` l.506), entrypoints/rl.py (``$PRL_RUN_NAME`` l.618-620,
the two processes l.288-356). prime-rl needs Python 3.12 and GPUs and is not on PyPI, so
its exact calls are replayed (tests/frameworks/prime_rl_run.py) through FAKE stand-ins of
the modules it reports with (tests/frameworks/stand_ins/prime_rl/).

The integration test runs the replay as a user runs prime-rl: the launcher under
``python -m rl_insight.integrations.prime_rl``, its orchestrator and trainer as processes
of their own, the adapter reaching them through the site hook alone; batch 4 generated
1 s slower. The fast tier drives the adapter on the stand-ins in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace as NS

import pytest
import requests

import rl_insight
from rl_insight import frameworks
from rl_insight.frameworks import table
from rl_insight.integrations import prime_rl as adapter
from rl_insight.wire import naming
from rl_insight.wire.events import Identity
from rl_insight.wire.frameworks import STEP_TIMING
from tests import framework_checks as checks
from tests import worlds
from tests.conftest import REPO, prom_query, wait_for
from tests.test_framework_tables import PROTOBUF, sent, state  # noqa: F401 (fixtures)

STAND_INS = REPO / "tests" / "frameworks" / "stand_ins"
DRIVER = REPO / "tests" / "frameworks" / "prime_rl_run.py"
RUN = {"project": "prime-rl", "experiment_name": "reverse-text--qwen3--e2e"}
STEPS, SLOW_BATCH, SLOW = 6, 4, 1.0
FW = frameworks.named("prime_rl")


def _command(url: str, work):
    """The launcher as a user starts it: prime-rl's command behind the adapter's runner."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RL_INSIGHT_", "VERL_", "PRL_"))}
    env.update({"RL_INSIGHT_SERVER_URL": url,
                "PYTHONPATH": os.pathsep.join([str(REPO), str(STAND_INS)])})
    return ([sys.executable, "-m", "rl_insight.integrations.prime_rl", sys.executable,
             str(DRIVER), "--out", str(work / "truth.json"), "--run-name",
             RUN["experiment_name"], "--steps", str(STEPS), "--slow-batch", str(SLOW_BATCH),
             "--slow", str(SLOW), "--linger", "30"], env, work)  # until scraped, at most


worlds.background("prime_rl", "tests/test_framework_prime_rl.py", _command)


def _rows(url: str):
    a = requests.get(url + "/api/v1/anatomy", params=RUN, timeout=10)
    got = a.json()["steps"] if a.status_code == 200 else []
    return got if [s["step"] for s in got] == list(range(1, STEPS + 1)) else None


@pytest.mark.integration
def test_prime_rls_two_processes_make_one_run_whose_steps_are_explained(route_server):
    """Its trainer's steps from their time/* keys, exactly as it timed them, the wait for
    the orchestrator's batch a named wait; the orchestrator's dicts in the same run
    without a mark or a part of their own; step 4 (its batch 1 s late) explained by that
    wait; the trainer's own /metrics and the inference server registered; its dashboard
    filled from its table; its configuration the orchestrator's."""
    cli, url = route_server.cli, route_server.url
    bg = route_server.background["prime_rl"]
    t0 = time.monotonic()
    code, output = bg.result(120)
    assert code == 0, output[-6000:]
    truth = json.loads((bg.cwd / "truth.json").read_text())
    print(f"the prime-rl replay took {time.monotonic() - t0:.1f}s")
    # the site hook reached both processes through the launcher's environment alone
    assert truth["sitehook"] == str(adapter.SITEHOOK) and truth["codes"] == {
        "orchestrator": 0, "trainer": 0}
    trainer = {x["step"]: x for x in truth["lines"] if "time/forward_backward" in x}
    orch = {x["step"]: x for x in truth["lines"] if "time/pack" in x}
    assert sorted(trainer) == sorted(orch) == list(range(1, STEPS + 1))

    # a. a row per trainer step from its timing keys: the logged values themselves
    steps = wait_for(lambda: _rows(url), 40, f"anatomy rows of steps 1-{STEPS}",
                     interval=0.5)
    for row in steps:
        t = trainer[row["step"]]
        assert (row["source"], row["framework"]) == ("timing_keys", "prime_rl"), row
        assert row["duration_s"] == t["time/step"], (row, t)
        assert row["waits"] == {"time/wait_for_batch": t["time/wait_for_batch"]} or (
            t["time/wait_for_batch"] == 0 and row["waits"] == {}), (row, t)
        want = {"data_processing": t["time/load_data"],
                "actor_update": t["time/forward_backward"],
                "update_weights": t["time/broadcast_weights"],
                "save_checkpoint": t["time/save_ckpt"]}
        assert row["phases"] == {k: v for k, v in want.items() if v > 0}, (row, t)
        assert row["generate_s"] == 0 and row["overlap_s"] == 0, row  # the trainer's step
        inside = sum(want.values()) + t["time/wait_for_batch"]
        assert row["other_s"] == pytest.approx(t["time/step"] - inside, abs=1e-9)
    waits = {n: trainer[n]["time/wait_for_batch"] for n in trainer}
    # the slow batch's 1 s, less what the trainer's own step covered (measured 2026-12-07,
    # 10 runs beside one busy loop: 0.79-0.88 s, the steps before it 0.0001 s at most)
    assert waits[SLOW_BATCH] > 0.5 + max(waits[n] for n in (2, 3)), waits

    # b. why step 4 was slow: the trainer waited for the orchestrator's batch
    explained = requests.get(url + "/api/v1/anatomy/explain",
                             params={**RUN, "step": SLOW_BATCH}, timeout=10).json()
    top = explained["contributions"][0]
    assert top["part"] == "wait:time/wait_for_batch", explained["contributions"]
    assert top["seconds"] == waits[SLOW_BATCH]
    r = cli.run("report", "--project", RUN["project"], "--experiment-name",
                RUN["experiment_name"], "--step", str(SLOW_BATCH))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("where the time went"))
    assert "wait:time/wait_for_batch" in lines[head + 1], r.stdout
    assert "prime_rl's timing keys" in r.stdout, r.stdout

    # c. both processes' scalars in the one run; the steps the trainer's
    sel = ",".join(f'{k}="{v}"' for k, v in RUN.items())
    got = {x["metric"]["__name__"]: float(x["value"][1])
           for x in prom_query(cli.prometheus, f'{{__name__=~"rl_insight_monitor_.+",{sel}}}')}
    assert got["rl_insight_monitor_step"] == STEPS, got
    assert got[naming.metric_name("time/step", "gauge")[0]] == trainer[STEPS]["time/step"]
    assert got[naming.metric_name("orchestrator/time/step", "gauge")[0]] == \
        orch[STEPS]["time/step"]
    assert got[naming.metric_name("progress/tokens", "gauge")[0]] == \
        orch[STEPS]["progress/tokens"]

    # d. the trainer's own Prometheus server and the inference server, registered
    targets = requests.get(url + "/api/v1/prometheus/targets", timeout=10).json()["targets"]
    mine = {(t["job_name"], t["target"].rsplit(":", 1)[1]) for t in targets}
    assert (adapter.TRAINER_JOB, str(truth["metrics_port"])) in mine, targets
    wait_for(lambda: checks.has_data(
        cli.prometheus, f'trainer_step{{job="{adapter.TRAINER_JOB}",{sel}}}',
        truth["t_start"], time.time()), 30, "the trainer's own trainer_step scraped")
    assert [t["labels"] for t in targets if t["job_name"] == "vllm" and
            t.get("project") in (None, RUN["project"])][:1] == [{"replica": "0"}], targets

    # e. its dashboard: every panel with data, every key in exactly one row
    run = {**RUN, "t_start": truth["t_start"], "t_done": time.time()}
    checked, empty = checks.empty_panels(cli.prometheus, route_server.tempo.spans,
                                         "prime_rl", run)
    # but the generation: a trainer step generates nothing itself (its table: the
    # rollout's share of the step is its wait for the batch, named above)
    empty = [e for e in empty if "rl_insight_step_role_generate_seconds" not in e]
    assert checked > 10 and not empty, "\n".join(empty)
    logged, off = checks.keys_not_in_one_row(cli.prometheus, "prime_rl", run)
    assert logged > 20 and not off, off

    # f. the run's configuration: the orchestrator's; the run ended by the trainer
    values = checks.run_config(url, RUN, "prime_rl")
    assert values["batch_size"] == 8 and values["model.client.base_url"].endswith("/v1")
    exps = requests.get(url + "/api/v1/experiments", timeout=5).json()["experiments"]
    assert [e["status"] for e in exps if e["experiment_name"] == RUN["experiment_name"]
            ] == ["finished"], exps


# ---------------------------------------------------------------- the fast tier

TRAINER_DICT = {"time/step": 10.0, "time/wait_for_batch": 4.0, "time/load_data": 0.5,
                "time/broadcast_weights": 1.0, "time/save_ckpt": 0.0,
                "time/forward_backward": 3.5, "step": 7}
ORCH_DICT = {"time/step": 9.0, "time/pack": 0.2, "time/save_ckpt": 0.1,
             "time/wait_for_policy": 2.0, "progress/tokens": 4096.0, "step": 7}


@pytest.fixture
def prime(monkeypatch):
    """The FAKE ``prime_rl.monitors`` of a fresh process, patched as the site hook does."""
    monkeypatch.syspath_prepend(str(STAND_INS))
    for name in [m for m in sys.modules if m == "prime_rl" or m.startswith("prime_rl.")]:
        monkeypatch.delitem(sys.modules, name)
    import prime_rl.monitors as monitors

    adapter.patch_monitors(monitors)
    yield monitors
    for name in [m for m in sys.modules if m == "prime_rl" or m.startswith("prime_rl.")]:
        del sys.modules[name]


def config(**extra):
    return NS(monitors=NS(wandb=None), model=NS(client=NS(base_url="http://10.0.0.5:8000/v1",
                                                           admin_base_url=None)),
              metrics_server=None, **extra)


def test_its_trainer_times_are_its_steps_parts_and_its_wait_for_the_batch_a_named_one():
    got = table.parts(FW, table.timing_values(FW, TRAINER_DICT.items()))
    assert (got.step_s, got.generate_s, got.weight_update_s) == (10.0, 0.0, 1.0)
    assert got.phases == {"data_processing": 0.5, "actor_update": 3.5,
                          "update_weights": 1.0, "save_checkpoint": 0.0}
    assert got.waits == {"time/wait_for_batch": 4.0}
    assert table.wait_causes(FW, got.waits) == {
        "time/wait_for_batch": table.WAITING_FOR_SAMPLES}
    # the orchestrator's, as the adapter renames them: scalars, no part of the step
    renamed = adapter.RLInsightMonitor.keys(NS(role=adapter.ORCHESTRATOR), ORCH_DICT)
    assert sorted(renamed) == ["orchestrator/time/pack", "orchestrator/time/save_ckpt",
                               "orchestrator/time/step", "orchestrator/time/wait_for_policy",
                               "progress/tokens"]
    assert table.timing_values(FW, renamed.items()) == {}


def test_both_processes_join_one_run_the_trainer_marking_the_steps(
        prime, sent, state, monkeypatch, tmp_path):  # noqa: F811 (fixtures)
    """The trainer's and the orchestrator's monitors, each as its process builds it: the
    trainer's dicts give the step marks and the record the row is made from, the
    orchestrator's only scalars (its ``step`` key and ``time/step`` would otherwise be a
    second mark and replace the trainer's step time)."""
    registered = []
    monkeypatch.setattr(rl_insight, "update_prometheus_config",
                        lambda addrs, job, labels=None: registered.append((addrs, job, labels)))
    monkeypatch.setenv("PRL_RUN_NAME", "reverse-text--qwen3--0001")
    asyncio.run(prime.setup(file=None, output_dir=tmp_path,
                            run_config=config(max_steps=9), train_env_names=["rt"]))
    orch = prime.MONITORS[-1]
    prime.MONITORS.clear()
    asyncio.run(prime.setup(file=None, output_dir=tmp_path, run_config=NS(
        monitors=NS(wandb=None), metrics_server=NS(host="0.0.0.0", port=8000))))
    trainer = prime.MONITORS[-1]
    assert (orch.role, trainer.role) == (adapter.ORCHESTRATOR, adapter.TRAINER)
    assert orch.tracker.marks is False and trainer.tracker.marks is True
    assert registered == [(["10.0.0.5:8000"], "vllm", [{"replica": 0}]),
                          (["0.0.0.0:8000"], adapter.TRAINER_JOB, None)]
    for step in (7, 8):  # each process's dicts to its own monitors (one list each)
        asyncio.run(orch.log({**ORCH_DICT, "step": step}, step=step))
        asyncio.run(prime.log({"loss/mean": 0.1, "step": step}, step=step))
        asyncio.run(prime.log({**TRAINER_DICT, "step": step}, step=step))
    assert [v for n, v in sent["gauges"] if n == "step"] == [7.0, 7.0, 8.0, 8.0], sent
    names = {n for n, _ in sent["gauges"]}
    assert {"orchestrator/time/step", "time/step", "progress/tokens"} <= names
    records = [dict(s.attributes) for s in sent["spans"] if s.name == STEP_TIMING]
    assert [r["step"] for r in records] == [7, 8]
    assert all(r["timing.time/step"] == 10.0 and "timing.orchestrator/time/step" not in r
               for r in records)
    now = time.time_ns()
    from rl_insight.collector.otlp_encode import encode
    from rl_insight.server.ingest import intake

    body = encode([(Identity("prime-rl", "reverse-text--qwen3--0001"), "x",
                    s._replace(start_ns=now + i, end_ns=now + i))
                   for i, s in enumerate(sent["spans"])])
    intake.accept_spans(state, body, PROTOBUF, "")
    state.anatomy.update(now / 1e9 + 10)
    (row,) = state.anatomy.rows("prime-rl", "reverse-text--qwen3--0001")
    assert (row.step, row.duration_s, row.waits, row.other_s) == (
        7, 10.0, {"time/wait_for_batch": 4.0}, 1.0)


def test_the_run_is_the_launchers_and_only_rank_zero_with_monitoring_on_joins(
        prime, monkeypatch, tmp_path):
    monkeypatch.setattr(rl_insight, "update_prometheus_config", lambda *a, **k: None)
    monkeypatch.delenv("PRL_RUN_NAME", raising=False)
    assert adapter.run_names(config(), tmp_path / "my-run") == ("prime-rl", "my-run")
    monkeypatch.setenv("PRL_RUN_NAME", "r1")
    wandb = NS(monitors=NS(wandb=NS(project="p", name="w")))
    assert adapter.run_names(wandb, tmp_path) == ("p", "r1")
    monkeypatch.setenv("RANK", "1")  # its other ranks build no monitors (l.59-61)
    asyncio.run(prime.setup(file=None, output_dir=tmp_path, run_config=config()))
    assert prime.MONITORS == []
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(rl_insight, "enabled", lambda: False)  # monitoring off
    asyncio.run(prime.setup(file=None, output_dir=tmp_path, run_config=config()))
    assert prime.MONITORS == []
    monkeypatch.setattr(rl_insight, "enabled", lambda: True)
    prime.MONITORS.clear()
    asyncio.run(prime.setup(file=None, output_dir=tmp_path, run_config=config(),
                            overview_flavor="sft"))  # its SFT trainer: no RL step
    assert prime.MONITORS == []


def test_a_monitor_that_cannot_start_leaves_prime_rls_own_running(prime, monkeypatch,
                                                                  tmp_path, caplog):
    from prime_rl.configs.monitors import FileMonitorConfig

    monkeypatch.setattr(rl_insight, "enabled", lambda: True)

    def broken(*a, **k):
        raise RuntimeError("no client here")
    monkeypatch.setattr(adapter, "RLInsightMonitor", broken)
    asyncio.run(prime.setup(file=FileMonitorConfig(), output_dir=tmp_path,
                            run_config=config()))
    assert [type(m).__name__ for m in prime.MONITORS] == ["FileMonitor"]
    assert "runs unmonitored" in caplog.text
    adapter.patch_monitors(prime)  # once: a second patch keeps the one wrapper
    assert prime.setup.__wrapped__.__name__ == "setup"


def test_the_runner_puts_the_site_hook_first_and_says_what_is_missing(capsys, monkeypatch):
    env = adapter.command_env({"PYTHONPATH": "/a:/b"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(adapter.SITEHOOK), "/a", "/b"]
    assert adapter.command_env(env)["PYTHONPATH"] == env["PYTHONPATH"]
    assert adapter.main([]) == 2 and "rl @ rl.toml" in capsys.readouterr().err
    monkeypatch.delenv("RL_INSIGHT_SERVER_URL", raising=False)
    monkeypatch.delenv("RL_INSIGHT_OTLP_ENDPOINT", raising=False)
    assert adapter.main(["--", "no-such-prime-rl-command"]) == 127
    err = capsys.readouterr().err
    assert "RL_INSIGHT_SERVER_URL is not set" in err and "prime-rl's environment" in err


@pytest.mark.integration  # starts a process
def test_the_site_hook_patches_prime_rl_in_a_fresh_process_and_runs_the_one_it_hides(
        tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_HOOK'] = 'ran'\n")
    code = ("import os, prime_rl.monitors as m\n"
            "print(getattr(m.setup, '_rl_insight_patched', False), os.environ.get('OTHER_HOOK'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        **os.environ, "PYTHONPATH": os.pathsep.join(
            [str(adapter.SITEHOOK), str(other), str(STAND_INS), str(REPO)])}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "ran"], r.stdout + r.stderr
