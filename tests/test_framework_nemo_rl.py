"""NeMo-RL's single-controller mode (NVIDIA-NeMo/RL 7ea279ab
examples/run_grpo_single_controller.py, nemo_rl/algorithms/single_controller.py): its
``SingleControllerActor``, a Ray actor, builds its own ``Logger`` (l.162-168), out of
reach of ``attach()`` in the driver, and logs each step's ``timing/train`` dict without
``step_finished`` (l.1201-1206). Its command run by ``python -m
rl_insight.integrations.nemo_rl`` puts the site hook on ``PYTHONPATH``, which NeMo-RL's
``init_ray`` hands every Ray worker: the hook patches ``nemo_rl.utils.logger`` where the
actor imports it (the table's ``on_import``); each step then reaches the server and is
explained.

The integration test runs tests/frameworks/nemo_rl_sc_run.py on the Ray world's cluster
(through that command; Ray started as ``init_ray`` starts it; the actor a Ray actor; the
Logger a FAKE stand-in, tests/frameworks/stand_ins/nemo_rl). The fast tests replay the
actor's calls in-process through the same patch.
"""

from __future__ import annotations

import sys

import pytest
import requests

from rl_insight import frameworks
from rl_insight.frameworks import table
from rl_insight.integrations import onimport
from rl_insight.wire.attributes import STEP_ATTR
from rl_insight.wire.frameworks import STEP_TIMING, TIMING_PREFIX
from tests import framework_checks as checks
from tests.conftest import REPO

STAND_INS = REPO / "tests" / "frameworks" / "stand_ins"
NEMO = frameworks.named("nemo_rl")
RUN = "nemo_rl_sc"  # its run among the Ray world's framework runs (tests/worlds.py)
SLOW_STEP, SLOWED = 3, "phase:update_weights"


@pytest.fixture
def sent(monkeypatch):
    """What the backend hands the client: the run's names, its configuration, the step
    gauges and the step_timing records."""
    from rl_insight.client import api

    got = {"init": [], "config": [], "steps": [], "timings": []}

    def trace_span(*, name, start_time_ns, end_time_ns, attributes):
        if name == STEP_TIMING:
            got["timings"].append(dict(attributes))
    monkeypatch.setattr(api, "enabled", lambda: True)
    monkeypatch.setattr(api, "init", lambda *a, **k: got["init"].append(a[:2]))
    monkeypatch.setattr(api, "log_config", lambda config, source=None:
                        got["config"].append((source, config)))
    monkeypatch.setattr(api, "metric_gauge", lambda name, value, doc="", **kw:
                        got["steps"].append(value) if name == "step" else None)
    monkeypatch.setattr(api, "trace_span", trace_span)
    return got


@pytest.fixture
def hooked():
    """NeMo-RL's import patch installed, as the site hook's sitecustomize (or the Ray
    worker setup hook) installs every table's, then its logger module imported fresh from
    the FAKE stand-ins, as the actor's process imports it."""
    def forget():
        for name in [m for m in sys.modules if m == "nemo_rl" or m.startswith("nemo_rl.")]:
            del sys.modules[name]
    forget()
    sys.path.insert(0, str(STAND_INS))
    onimport.install(dict(NEMO.on_import))  # NeMo-RL's of framework_patches()
    try:
        from nemo_rl.utils import logger

        yield logger
    finally:
        onimport.uninstall()
        sys.path.remove(str(STAND_INS))
        forget()


MASTER = {"logger": {"log_dir": "logs/exp_001", "wandb_enabled": False,
                     "wandb": {"project": "nemo-p", "name": "sc-run"}},
          "grpo": {"num_prompts_per_step": 4, "max_num_steps": 3},
          "async_rl": {"max_buffered_rollouts": 64}}


def sc_step(step: int) -> dict[str, float]:
    """The timing dict single_controller.py's train pump logs (l.1172-1185)."""
    return {"total_step_time": 2.0, "exposed_generation": 0.4, "logprob_inference_prep": 0.05,
            "policy_and_reference_logprobs": 0.3, "advantage_calculation": 0.05,
            "training_prep": 0.05, "policy_training": 0.6, "weight_sync": 0.5 * step,
            "valid_tokens_per_sec_per_gpu": 812.0}


def test_the_single_controllers_own_logger_reports_its_steps(sent, hooked):
    """The actor's calls in its order: Logger(master_config.logger), the hyperparameters,
    the setup timings at step 0; per step the watchdog's rollout/* at the current step,
    then train and timing/train with no step_finished. Each step is marked once and its
    timing keys sent, the run named after wandb's names, its config handed over once."""
    logger = hooked.Logger(MASTER["logger"])  # single_controller.py l.164
    logger.log_hyperparams(MASTER)  # l.165: master_config.model_dump()
    logger.log_metrics({"total": 12.5}, step=0, prefix="timing/setup")  # l.166-168
    for step in range(1, 4):
        logger.log_metrics({"rollout/inflight": 4.0}, step=step - 1)  # the watchdog
        logger.log_metrics({"loss": 0.01, "reward": 0.4}, step=step, prefix="train")
        logger.log_metrics(sc_step(step), step=step, prefix="timing/train")
    logger.finish()
    assert sent["init"] == [("nemo-p", "sc-run")]
    assert sent["config"] == [("nemo_rl", MASTER)]
    assert sent["steps"] == [1.0, 2.0, 3.0]
    assert [t[STEP_ATTR] for t in sent["timings"]] == [1, 2, 3]
    parts = table.parts(NEMO, {k[len(TIMING_PREFIX):]: v for k, v in sent["timings"][2].items()
                               if k.startswith(TIMING_PREFIX)})
    assert parts.weight_update_s == pytest.approx(1.5)
    assert parts.generate_s == pytest.approx(0.4) and parts.step_s == pytest.approx(2.0)
    assert parts.phases["actor_update"] == pytest.approx(0.65)


def test_attach_where_the_hook_added_the_backend_keeps_one(sent, hooked):
    """run_grpo.py's driver with the hook's patch applied before setup() (the client
    patches imported modules when it names a run): attach finds the backend there."""
    import rl_insight.integrations.nemo_rl as adapter

    logger = hooked.Logger(MASTER["logger"])
    backend = adapter.attach(logger, MASTER)
    assert logger.loggers == [backend]
    assert sent["config"] == [("nemo_rl", MASTER)]


def test_a_process_without_monitoring_builds_its_logger_unchanged(hooked, monkeypatch):
    from rl_insight.client import api

    monkeypatch.setattr(api, "enabled", lambda: False)
    assert hooked.Logger(MASTER["logger"]).loggers == []


def test_the_command_line_puts_the_site_hook_first_and_says_what_is_missing(
        monkeypatch, capsys):
    """``python -m rl_insight.integrations.nemo_rl COMMAND``: NeMo-RL's command with the
    site hook first on PYTHONPATH (kept once); without a command, its usage; a command
    that cannot start, why and what to do; no server URL, said."""
    import rl_insight.integrations.nemo_rl as adapter
    from rl_insight.integrations import kit

    env = kit.with_site_hook({"PYTHONPATH": "/opt/nemo-rl"})
    assert env["PYTHONPATH"].split(":") == [str(kit.SITE_HOOK), "/opt/nemo-rl"]
    assert kit.with_site_hook(env) == env
    assert adapter.main([]) == 2 and "usage:" in capsys.readouterr().err
    monkeypatch.delenv("RL_INSIGHT_SERVER_URL", raising=False)
    monkeypatch.delenv("RL_INSIGHT_OTLP_ENDPOINT", raising=False)
    assert adapter.main(["--", "/nonexistent/uv", "run", "x.py"]) == 127
    err = capsys.readouterr().err
    assert "RL_INSIGHT_SERVER_URL is not set, so NeMo-RL runs unmonitored" in err
    assert "cannot run '/nonexistent/uv'" in err and "uv run python -m" in err


def test_recompute_kv_scales_is_a_part_of_its_own():
    """grpo.py l.3339-3350, grpo_sync.py l.942-960 (7ea279ab): the FP8 KV-cache scales
    calibrated after the policy update, beside policy_training, for the next refit."""
    got = table.timing_values(NEMO, [("timing/train/recompute_kv_scales", 0.7),
                                     ("timing/train/policy_training", 3.0)])
    assert table.parts(NEMO, got).phases == {"recompute_kv_scales": 0.7, "actor_update": 3.0}


# ---------------------------------------------------------------- integration tier


@pytest.fixture(scope="module")
def run(ray_world, framework_runs):
    return framework_runs.results((RUN,))[RUN]


@pytest.mark.integration
def test_the_single_controllers_steps_arrive_and_its_slow_weight_sync_is_explained(
        run, ray_world):
    """The replay started by its command line alone: a row per step from its
    timing keys, each part what the actor's timer logged; step 3's weight sync (four
    times as long) named first by the API and by ``rl-insight report --step 3``; the
    config the actor logged kept with the run; every key it logged in one row."""
    from tests.test_simulation_frameworks import steps_of

    rows = {r["step"]: r for r in steps_of(ray_world.url, run)}
    assert sorted(rows) == list(range(1, run["steps"] + 1)), sorted(rows)
    for truth in run["truth"]:
        row = rows[truth["step"]]
        assert row["source"] == "timing_keys" and row["framework"] == "nemo_rl", row
        # the actor's own timer's figures, exactly (they were held within 0.06 s; measured
        # 2026-12-07, 4 runs beside one busy loop: 0 apart, 80 figures)
        assert row["duration_s"] == pytest.approx(truth["total_step_time"], abs=1e-6)
        assert row["weight_update_s"] == pytest.approx(truth["weight_sync"], abs=1e-6)
        assert row["generate_s"] == pytest.approx(truth["exposed_generation"], abs=1e-6)
        assert row["phases"]["actor_update"] == pytest.approx(
            truth["training_prep"] + truth["policy_training"], abs=1e-6), row
    params = {"project": run["project"], "experiment_name": run["experiment_name"]}
    got = requests.get(ray_world.url + "/api/v1/anatomy/explain", timeout=5,
                       params={**params, "step": SLOW_STEP}).json()
    top = got["contributions"][0]
    # its weight sync four times as long: 0.75 s over the steps before (measured
    # 2026-12-07, 4 runs beside one busy loop: 0.749-0.751 s)
    assert top["part"] == SLOWED and top["over_s"] > 0.5, got["contributions"][:3]
    out = ray_world.cli.run("report", "--project", run["project"], "--experiment-name",
                            run["experiment_name"], "--step", str(SLOW_STEP))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    top_line = next(i for i, x in enumerate(lines) if x.startswith("where the time went"))
    assert SLOWED in lines[top_line + 1], out.stdout
    config = checks.run_config(ray_world.url, run, "nemo_rl")
    assert config["async_rl.max_buffered_rollouts"] == 64
    assert config["data_plane.enabled"] is True
    logged, off = checks.keys_not_in_one_row(ray_world.cli.prometheus, "nemo_rl", run)
    assert logged > 8 and not off, off
