"""OpenRLHF: the Ray job's runtime environment, nothing else (rl_insight/integrations/
openrlhf.py, the worker setup hook rl_insight.ray.hooks.worker_setup).

The integration test runs OpenRLHF's own entry point, ``python -m
openrlhf.cli.train_ppo_ray`` of openrlhf 0.11.2 (.venv/frameworks/openrlhf), once
synchronous and once asynchronous, on a Ray cluster of its own beside the route server's
other tests (tests/frameworks/openrlhf_run.py says what is real and what is FAKE: vLLM,
the model actors, the forward passes, DeepSpeed's strategy, tokenizer and dataset). The
prompts of step 4 go to a slow reward function (OpenRLHF's ``--reward.remote_url
<file>.py``, run in the engines' actors): step 4's generation is slow. The ground truth is
what OpenRLHF printed for every step (``Global step N: {...}``).

The fast-tier tests load OpenRLHF's real ppo_trainer.py as its own tests do
(tests/test_ppo_trainer.py of openrlhf 0.11.2: ``ray``, ``tqdm`` and eleven of its
modules stubbed, torch real) and drive the patched ``BasePPOTrainer`` methods.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time
from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import requests

from rl_insight import frameworks
from rl_insight.frameworks import openrlhf as table
from rl_insight.integrations import onimport
from rl_insight.integrations import openrlhf as adapter
from rl_insight.runconfig.diff import diff
from rl_insight.wire import naming
from tests import framework_checks as checks
from tests import worlds
from tests.conftest import REPO, prom_query, wait_for

OPENRLHF_PATH = REPO / ".venv" / "frameworks" / "openrlhf" / "site-packages"
OVERLAY = REPO / "tests" / "frameworks" / "stand_ins" / "openrlhf_cpu"
DRIVER = REPO / "tests" / "frameworks" / "openrlhf_run.py"
PROJECT = "framework-openrlhf"
STEPS, SLOW, SLEEP = 6, 4, 1.5
LEFT_S = 0.15  # the least the slow batch leaves its step to wait, by OpenRLHF's timing


def _command(url: str, work) -> tuple[list[str], dict, object]:
    """OpenRLHF's runs, started beside the route server's other tests (tests/worlds.py).
    The one setting: Ray's runtime-env hook in the driver's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RL_INSIGHT_", "VERL_"))}
    env.update({"RL_INSIGHT_SERVER_URL": url, "VERL_RL_INSIGHT_ENABLE": "1",
                "RAY_RUNTIME_ENV_HOOK": "rl_insight.ray.hooks.runtime_env_hook",
                # the lanes tick as often as this world's Prometheus scrapes
                "RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "1",
                "OPENRLHF_SLOW_REWARD_S": str(SLEEP), "RAY_DEDUP_LOGS": "0",
                "PYTHONPATH": os.pathsep.join([str(REPO), str(OVERLAY),
                                               str(OPENRLHF_PATH)])})
    return ([sys.executable, str(DRIVER), "--out", str(work / "truth.json"), "--steps",
             str(STEPS), "--slow-step", str(SLOW)], env, work)


worlds.background("openrlhf", "tests/test_framework_openrlhf.py", _command)


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _rows(url: str, run: str) -> list[dict]:
    params = {"project": PROJECT, "experiment_name": run}

    def rows():
        a = requests.get(url + "/api/v1/anatomy", params=params, timeout=10)
        steps = a.json()["steps"] if a.status_code == 200 else []
        return steps if [s["step"] for s in steps] == list(range(1, STEPS + 1)) else None

    return wait_for(rows, 30, f"{run}: anatomy rows of steps 1-{STEPS}", interval=0.5)


def _over(mode: dict, key: str, step: int) -> float:
    """What OpenRLHF printed for ``key`` at ``step``, over the median of the steps before
    it (the explanation's baseline, anatomy/explain.py)."""
    printed = {int(n): s[key] for n, s in mode["steps"].items()}
    return printed[step] - statistics.median(v for n, v in printed.items() if n < step)


def _explained(url: str, run: str, step: int) -> dict:
    r = requests.get(url + "/api/v1/anatomy/explain", params={
        "project": PROJECT, "experiment_name": run, "step": step}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.integration
def test_openrlhf_runs_report_their_steps_parts_and_engines(route_server):
    """OpenRLHF's sync and async GRPO runs, 6 steps each, step 4's generation 1.5 s slow:
    every number OpenRLHF printed is a series at its last value; a row per step from its
    timing keys; why step 4 was slow (sync: generation) and, in the async run, the step
    that waited for it (step 3's broadcast waits on vLLM's lock while step 4's batch
    generates); each engine's vLLM metrics per replica without an endpoint (relayed, no
    target registered); its dashboard with data in every panel."""
    assert (OPENRLHF_PATH / "openrlhf" / "trainer" / "ppo_trainer.py").exists(), (
        f"openrlhf is not in {OPENRLHF_PATH}: run `make setup` (it installs "
        "OPENRLHF_PACKAGES there without their dependencies)")
    cli, url = route_server.cli, route_server.url
    run_bg = route_server.background["openrlhf"]
    code, output = run_bg.result(240)
    assert code == 0, output[-6000:]
    truth = json.loads((run_bg.cwd / "truth.json").read_text())
    assert truth["openrlhf"] == "0.11.2"
    sync, async_ = truth["modes"]["sync"], truth["modes"]["async"]
    for mode in (sync, async_):
        assert sorted(int(n) for n in mode["steps"]) == list(range(1, STEPS + 1))

    # a. every number OpenRLHF printed is a series of its run, at the last step's value
    for run, mode in (("grpo-sync", sync), ("grpo-async", async_)):
        last = {k: float(v) for k, v in mode["steps"][str(STEPS)].items() if _numeric(v)}
        assert {"policy_loss", "rollout/reward_mean", "timing/step_total"} <= set(last)
        want = {naming.metric_name(k, "gauge")[0]: v for k, v in last.items()}
        got: dict = {}

        def series(run=run, want=want, got=got) -> bool:
            got.clear()
            for x in prom_query(cli.prometheus,
                                f'{{project="{PROJECT}",experiment_name="{run}"}}'):
                got[x["metric"]["__name__"]] = float(x["value"][1])
            return all(n in got and math.isclose(got[n], v, rel_tol=1e-6, abs_tol=1e-9)
                       for n, v in want.items())

        wait_for(series, 30, f"{run}: every number OpenRLHF printed, at its last value")
        # the evaluations' (eval_<dataset>_pass1, ...), which OpenRLHF prints apart
        assert any(n.startswith(naming.metric_name("eval_gsm8k_pass1", "gauge")[0])
                   for n in got), sorted(got)

    # b. sync: a row per step, each part as OpenRLHF timed it; step 4's generation first
    steps = _rows(url, "grpo-sync")
    for row in steps:
        logged = sync["steps"][str(row["step"])]
        assert row["source"] == "timing_keys" and row["framework"] == "openrlhf", row
        assert row["duration_s"] == pytest.approx(logged["timing/step_total"], abs=1e-3)
        assert row["generate_s"] == pytest.approx(logged["timing/generation"], abs=1e-3)
        assert row["phases"]["make_experience"] == pytest.approx(
            logged["timing/make_experience"], abs=1e-3)
        assert row["phases"]["actor_update"] == pytest.approx(logged["timing/ppo_train"],
                                                              abs=1e-3)
        assert row["weight_update_s"] == pytest.approx(logged["timing/broadcast"], abs=1e-3)
        assert not row.get("waits"), row  # the synchronous trainer waits for nothing
    gen = {row["step"]: row["generate_s"] for row in steps}
    # the slow step's generation holds the reward function's whole sleep, as OpenRLHF
    # timed it; how far it stands out of the steps before is the machine's (quiet, 9 runs
    # beside one busy loop: 1.26-1.86 s over their median; on a CI host beside one, the
    # others' generations took 0.2-2.1 s). So the explanation is held to OpenRLHF's own
    # timing: the generation's seconds over the median of the steps before (explain.py's
    # baseline), exactly, and the parts ranked by what they cost
    assert gen[SLOW] >= SLEEP, gen
    parts = _explained(url, "grpo-sync", SLOW)["contributions"]
    gen_part = next(c for c in parts if c["part"] == "generate:rollout")
    assert gen_part["over_s"] == pytest.approx(
        _over(sync, "timing/generation", SLOW), abs=2e-3), parts
    assert [c["over_s"] for c in parts] == sorted((c["over_s"] for c in parts),
                                                  reverse=True), parts

    # c. async: the generation overlaps the step before (no part of its step); the
    # broadcast is its weight sync and its wait on vLLM's lock; the queue wait its own
    steps = _rows(url, "grpo-async")
    for row in steps:
        logged = async_["steps"][str(row["step"])]
        assert row["duration_s"] == pytest.approx(logged["timing/step_total"], abs=1e-3)
        assert row["generate_s"] == 0, row
        waits = row.get("waits", {})
        assert row["weight_update_s"] + waits.get(table.BROADCAST_WAIT, 0.0) == \
            pytest.approx(logged["timing/broadcast"], abs=1e-3), row
    waited = {row["step"]: row.get("waits", {}).get(table.BROADCAST_WAIT, 0.0)
              for row in steps}
    # step n's broadcast waits on vLLM's lock for batch n+1, whose generation began when
    # step n took its batch (ppo_trainer_async.py l.227-230, 129-140): what is left of it
    # after step n's own work. OpenRLHF timed both sides, so each wait is known from its
    # log, whatever the machine made of each generation (on CI step 2 once waited 4.7 s,
    # longer than step 3 for the slow batch, on no sleep of ours)
    timed = {int(n): s for n, s in async_["steps"].items()}
    expected = {n: max(0.0, timed[n + 1]["timing/generation"]
                       - timed[n]["timing/make_experience"] - timed[n]["timing/ppo_train"])
                for n in timed if n + 1 in timed}
    # the rest is the slot's and the lock's round trips, which start batch n+1 late
    # (measured 2026-12-07, 7 runs, 4 beside one busy loop: -0.02 to +0.05 s a step). On a
    # saturated host the generator itself starts late or early against the trainer
    # (a fresh clone beside a busy core and the suite: -0.41 and +1.26 s; a slow quiet
    # clone: -2.0 s, its timing leaving step 4, with no sleep of ours, 3.1 s to wait), so
    # only the slow batch's wait is held to it: at least half what OpenRLHF's timing left
    # to wait, in its step or the next (a fresh clone beside a busy core, 2026-12-08: the
    # timing left step 3 4.32 s to wait; it waited 1.27 s, step 4 3.71 s)
    assert expected[SLOW - 1] > LEFT_S, (waited, expected)
    assert waited[SLOW - 1] + waited[SLOW] >= expected[SLOW - 1] / 2, (waited, expected)
    held = max((SLOW - 1, SLOW), key=waited.get)
    # the slow batch's wait, explained by its seconds over the steps before, as waited
    parts = _explained(url, "grpo-async", held)["contributions"]
    wait_part = next(c for c in parts if c["part"] == f"wait:{table.BROADCAST_WAIT}")
    assert wait_part["over_s"] == pytest.approx(waited[held] - statistics.median(
        waited[n] for n in waited if n < held), abs=2e-3), parts
    # where OpenRLHF's own timing has it stand out of every other step's wait (the quiet
    # case: 1.00-1.23 s over the others, 9 runs beside one busy loop), it comes first
    if waited[held] - max(waited[n] for n in waited if n != held) > SLEEP / 4:
        assert parts[0] is wait_part, parts
    r = cli.run("report", "--project", PROJECT, "--experiment-name", "grpo-async",
                "--step", str(held))
    assert r.returncode == 0 and table.BROADCAST_WAIT in r.stdout, r.stdout + r.stderr

    # d. the engines: vLLM's series per replica, relayed (OpenRLHF serves no /metrics)
    for run in ("grpo-sync", "grpo-async"):
        def engines(run=run) -> bool:
            got = prom_query(cli.prometheus, f'vllm:request_success_total{{project='
                             f'"{PROJECT}",experiment_name="{run}"}}')
            return {x["metric"].get("replica") for x in got} >= {"0", "1"}

        wait_for(engines, 30, f"{run}: both engines' vLLM series, per replica")
    targets = requests.get(url + "/api/v1/targets", params={"project": PROJECT},
                           timeout=10).json()
    assert not [t for t in targets.get("targets", []) if t["job_name"] == "vllm"], targets

    # e. its dashboard: every panel with data, every key in exactly one row
    run = {"project": PROJECT, "experiment_name": "grpo-sync",
           "t_start": sync["t_start"], "t_done": time.time()}
    checked, empty = checks.empty_panels(cli.prometheus, route_server.tempo.spans,
                                         "openrlhf", run)
    assert checked > 10 and not empty, empty
    logged, off = checks.keys_not_in_one_row(cli.prometheus, "openrlhf",
                                             {**run, "experiment_name": "grpo-async"})
    assert logged > 20 and not off, off


@pytest.mark.integration
def test_the_parsed_arguments_are_each_runs_configuration(route_server):
    """OpenRLHF's arguments as its CLI parsed them (``hierarchize``'s nested namespaces),
    handed over by the trainer's patch: both runs', which differ in what their flags do."""
    code, output = route_server.background["openrlhf"].result(400)
    assert code == 0, output[-3000:]
    sync, async_ = (checks.run_config(route_server.url, {
        "project": PROJECT, "experiment_name": f"grpo-{m}"}, "openrlhf")
        for m in ("sync", "async"))
    assert sync["algo.advantage.estimator"] == "group_norm"
    assert sync["vllm.num_engines"] == 2 and sync["algo.kl.init_coef"] == 0.001
    assert sync["train.async_enable"] is False and async_["train.async_enable"] is True
    assert sync["logger.wandb.key"] is None  # unset; a key given is masked
    differ = {r["key"] for r in diff(sync, async_)["keys"] if r["status"] != "same"}
    assert differ == {"train.async_enable", "logger.wandb.run_name", "ckpt.path"}, differ


# ---------------------------------------------------------------- the fast tier


class _Pbar:
    def __init__(self, *args, **kwargs):
        pass

    def update(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def set_postfix(self, *args, **kwargs):
        pass


STUBBED = ("openrlhf.datasets", "openrlhf.datasets.utils",
           "openrlhf.trainer.ppo_utils.experience",
           "openrlhf.trainer.ppo_utils.experience_maker",
           "openrlhf.trainer.ppo_utils.kl_controller",
           "openrlhf.trainer.ppo_utils.samples_generator", "openrlhf.trainer.ray.launcher",
           "openrlhf.trainer.ray.vllm_engine", "openrlhf.utils.deepspeed",
           "openrlhf.utils.logging_utils", "openrlhf.utils.utils")


@pytest.fixture
def ppo_module(monkeypatch):
    """openrlhf 0.11.2's trainer/ppo_trainer.py, loaded as its own tests load it
    (tests/test_ppo_trainer.py l.21-54: ``@ray.remote`` and ``ray.get`` the identity, the
    modules that need Ray actors, vLLM, DeepSpeed or datasets stubbed, torch real)."""
    path = OPENRLHF_PATH / "openrlhf" / "trainer" / "ppo_trainer.py"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make setup`")
    fake_ray = MagicMock()
    fake_ray.remote.side_effect = lambda obj=None, **_: (lambda c: c) if obj is None else obj
    fake_ray.get.side_effect = lambda value: value
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    monkeypatch.setitem(sys.modules, "tqdm", SimpleNamespace(tqdm=_Pbar))
    for name in STUBBED:
        monkeypatch.setitem(sys.modules, name, MagicMock())
    spec = importlib.util.spec_from_file_location("_openrlhf_ppo_trainer_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trainer(module, async_enable: bool = False):
    """A trainer as OpenRLHF's tests build one (``__new__``, its fields set), logging
    to neither wandb nor TensorBoard, saving no checkpoint at these steps."""
    t = module.PPOTrainer.__new__(module.PPOTrainer)
    t.args = SimpleNamespace(
        logger=SimpleNamespace(logging_steps=1, wandb=SimpleNamespace(
            project="proj", run_name="ppo_1206T04:00"), tensorboard_dir=None),
        ckpt=SimpleNamespace(save_steps=100), vllm=SimpleNamespace(enable_sleep=False),
        train=SimpleNamespace(async_enable=async_enable, async_queue_size=2))
    t.wandb_logger = t.tensorboard_logger = None
    t.actor_model_group = MagicMock()
    t.best_eval_metric_key, t.best_eval_metric_value = "none", float("-inf")
    t._latest_eval_metric_value = None
    return t


@pytest.fixture
def sent(monkeypatch):
    """What the patched trainer hands the tracker, (data, step) per call."""
    calls: list = []
    fake = SimpleNamespace(log=lambda data, step=None: calls.append((dict(data), step)))
    monkeypatch.setattr(adapter, "_tracker", fake)
    return calls


def test_every_step_of_openrlhf_is_logged_with_wandb_and_tensorboard_off(ppo_module, sent):
    """``save_logs_and_checkpoints`` patched on ``BasePPOTrainer`` (which both trainers
    inherit): each dict at its ``global_step``, ``generated_samples`` left out, the
    trainer's own dict untouched and its own method still run; an evaluation's metrics
    (``save_best_checkpoint``, both trainers) with no step."""
    base = ppo_module.BasePPOTrainer
    own = base.save_logs_and_checkpoints
    assert adapter.patch_trainer(ppo_module) and adapter.patch_trainer(ppo_module)
    assert base.save_logs_and_checkpoints.__wrapped__ is own  # once, however often asked
    t = _trainer(ppo_module)
    logs = {"policy_loss": 0.5, "timing/generation": 1.5, "timing/step_total": 2.0,
            "generated_samples": ["text", 1.0]}
    t.save_logs_and_checkpoints(7, logs, {"global_step": 7})
    assert sent == [({"policy_loss": 0.5, "timing/generation": 1.5,
                      "timing/step_total": 2.0}, 7)]
    assert "generated_samples" in logs
    t.save_best_checkpoint({"eval_gsm8k_pass1": 0.25}, 7)
    assert sent[-1] == ({"eval_gsm8k_pass1": 0.25}, None)
    # logging_steps sets wandb's and TensorBoard's cadence, not ours
    t.args.logger.logging_steps = 10
    t.save_logs_and_checkpoints(8, {"policy_loss": 0.25})
    assert sent[-1] == ({"policy_loss": 0.25}, 8)


def test_the_async_trainers_waits_are_told_apart(ppo_module, sent, monkeypatch):
    """In the asynchronous trainer the adapter adds its mark and splits
    ``timing/broadcast`` into the weight sync (``BasePPOTrainer.broadcast_to_vllm``
    itself, which ``TrainingActor``'s override calls under vLLM's lock) and the wait; the
    queue wait is the time from the step before's logging to ``train_step``. The table
    then keeps the generation and the whole broadcast out of the step's parts."""
    adapter.patch_trainer(ppo_module)
    t = _trainer(ppo_module, async_enable=True)
    clock = iter([100.0, 100.25])  # the step before's logging ended; train_step started
    monkeypatch.setattr(adapter.time, "time", lambda: next(clock))
    t.save_logs_and_checkpoints(1, {})
    sent.clear()
    adapter.clock(t).step_started()
    adapter.clock(t).weight_sync = 0.5
    monkeypatch.setattr(adapter.time, "time", lambda: 101.0)
    t.save_logs_and_checkpoints(2, {"timing/broadcast": 2.0, "timing/generation": 3.0,
                                    "timing/step_total": 4.0})
    (data, step), = sent
    assert step == 2 and data[table.ASYNC_MARK] == 2.0
    assert data[table.WEIGHT_SYNC] == 0.5 and data[table.BROADCAST_WAIT] == 1.5
    assert data[table.QUEUE_WAIT] == pytest.approx(0.25)
    fw = frameworks.named("openrlhf")
    parts = table_parts(fw, data)
    assert parts.generate_s == 0 and parts.weight_update_s == 0.5
    assert parts.waits == {table.BROADCAST_WAIT: 1.5, table.QUEUE_WAIT: 0.25}
    # the synchronous trainer's dict: every key its own, the broadcast the weight sync
    sync = table_parts(fw, {"timing/broadcast": 2.0, "timing/generation": 3.0,
                            "timing/step_total": 5.0})
    assert sync.generate_s == 3.0 and sync.weight_update_s == 2.0 and not sync.waits


def table_parts(fw, data: dict):
    from rl_insight.frameworks.table import parts, timing_values

    return parts(fw, timing_values(fw, data.items()))


def test_the_real_broadcast_and_train_step_feed_the_clock(ppo_module, sent):
    """The patched ``broadcast_to_vllm`` and ``train_step`` are OpenRLHF's own, timed:
    the base's broadcast (wake-up off, the actor group's broadcast awaited) adds to the
    weight sync; ``train_step`` starts the step's clock whatever it raises."""
    adapter.patch_trainer(ppo_module)
    t = _trainer(ppo_module, async_enable=True)
    t.broadcast_to_vllm()
    assert t.actor_model_group.async_run_method.call_args.kwargs == {
        "method_name": "broadcast_to_vllm"}
    assert adapter.clock(t).weight_sync > 0
    t.experience_maker = MagicMock()
    t.experience_maker.make_experience_batch.side_effect = RuntimeError("no GPU")
    adapter.clock(t).ready = 0.0
    with pytest.raises(RuntimeError):
        t.train_step([], 3)
    assert adapter.clock(t).weight_sync == 0 and adapter.clock(t).queue_wait > 0


def test_run_names(configured):
    """The environment's names first (as the client's configuration read them), else
    wandb's project and run name as OpenRLHF sets them (with wandb on or off), else
    ``openrlhf`` / ``ppo``."""
    configured()
    args = SimpleNamespace(logger=SimpleNamespace(wandb=SimpleNamespace(
        project="openrlhf_train_ppo", run_name="ppo_1206T04:00")))
    assert adapter.run_names(args) == ("openrlhf_train_ppo", "ppo_1206T04:00")
    assert adapter.run_names(SimpleNamespace()) == ("openrlhf", "ppo")
    configured(RL_INSIGHT_PROJECT="team")  # a project alone: the run keeps its own name
    assert adapter.run_names(args) == ("team", "ppo_1206T04:00")


def test_the_run_ends_when_the_trainers_fit_closes_its_loggers(ppo_module, sent):
    """Both trainers close their loggers when ``fit`` ends: the adapter's stand-in in the
    TensorBoard slot ends the run there (and passes everything on to TensorBoard's
    logger where the run has one)."""
    ends: list = []
    adapter._tracker.finish = lambda: ends.append(1)
    adapter.patch_trainer(ppo_module)
    t = _trainer(ppo_module)
    board = MagicMock()
    t.tensorboard_logger = board
    t.vllm_engines = None
    adapter.started(t)
    assert isinstance(t.tensorboard_logger, adapter.RunEnd)
    t.save_logs_and_checkpoints(1, {"policy_loss": 0.5})
    board.log_train.assert_called_once_with(1, {"policy_loss": 0.5})
    assert not ends
    t.tensorboard_logger.close()
    board.close.assert_called_once_with()
    assert ends == [1]
    none = _trainer(ppo_module)
    adapter.started(none)
    assert none.tensorboard_logger  # truthy: OpenRLHF calls its close
    none.tensorboard_logger.log_train(1, {})
    none.tensorboard_logger.close()
    assert ends == [1, 1]


def test_the_hook_patches_a_module_only_when_its_process_imports_it(tmp_path, monkeypatch):
    """``onimport.install``: nothing is imported by installing (not the framework, not
    vLLM or DeepSpeed); the patch runs once the process imports the module itself, at
    once where it was imported already, once however often installed; a patch that
    fails leaves the import whole."""
    pkg = tmp_path / "fw_under_test"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "trainer.py").write_text("class Trainer:\n    patched = 0\n")
    (pkg / "broken.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "fw_patches.py").write_text(
        "def patch(module):\n    module.Trainer.patched += 1\n"
        "def fails(module):\n    raise RuntimeError('upstream changed')\n")
    before = set(sys.modules)
    try:
        onimport.install({"fw_under_test.trainer": "fw_patches:patch",
                          "fw_under_test.broken": "fw_patches:fails"})
        onimport.install({"fw_under_test.trainer": "fw_patches:patch"})
        assert not {m for m in set(sys.modules) - before if m.startswith("fw_")}
        import fw_under_test.broken
        import fw_under_test.trainer

        assert fw_under_test.trainer.Trainer.patched == 1
        assert fw_under_test.broken.VALUE == 1
        # installed after its import: patched at once
        (tmp_path / "fw_patches2.py").write_text(
            "def again(module):\n    module.Trainer.patched += 10\n")
        assert onimport.install({"fw_under_test.trainer": "fw_patches2:again"}) == [
            "fw_under_test.trainer"]
        assert fw_under_test.trainer.Trainer.patched == 11
    finally:
        onimport.uninstall()
        for m in [m for m in sys.modules if m.startswith("fw_")]:
            sys.modules.pop(m)


def test_the_worker_hook_imports_no_framework():
    """The job's worker setup hook names OpenRLHF's trainer module and imports none of
    OpenRLHF, vLLM, DeepSpeed or torch into the process (a model worker's, an engine's)."""
    patches = onimport.framework_patches()
    assert patches["openrlhf.trainer.ppo_trainer"] == \
        "rl_insight.integrations.openrlhf:patch_trainer"
    before = set(sys.modules)
    try:
        onimport.install(patches)
        new = set(sys.modules) - before
    finally:
        onimport.uninstall()
    assert not {m for m in new if m.split(".")[0] in
                ("openrlhf", "vllm", "deepspeed", "torch", "flash_attn")}, new
