"""prime-rl (PrimeIntellect-ai/prime-rl): a monitor in its monitors list.

prime-rl runs no Ray: its launcher (``rl @ rl.toml``) starts the orchestrator and the
trainer (``torchrun -m prime_rl.trainer.rl.train``) as processes of their own, each of
which builds its monitors once (``prime_rl.monitors.setup``, rank 0 only: W&B, the
platform, the JSON-lines file; monitors/__init__.py l.41-84 at 559b4477) and hands every
dict to each (``monitors.log(data, step)``, l.101-113). Its monitors are fixed by its
config, so the one setting is the command line:

    python -m rl_insight.integrations.prime_rl rl @ rl.toml

which starts prime-rl's command with this package's ``sitecustomize`` on ``PYTHONPATH``
(rl_insight/integrations/sitehook/): every process the launcher starts inherits it, and
when one imports ``prime_rl.monitors`` its ``setup`` appends :class:`RLInsightMonitor`
to the list it built. ``RL_INSIGHT_SERVER_URL`` as for every framework (or in
prime-rl's ``env_vars``).

- The run: ``$PRL_RUN_NAME`` (the launcher's ``run.name``, given to every process it
  starts: entrypoints/rl.py l.618-620), so both processes report into one run; the
  project is W&B's (``monitors.wandb.project``, the same in both) or ``prime-rl``.
- The trainer's dicts at its step (``time/*`` the step's parts: rl_insight/frameworks/
  prime_rl.py) and its step marks; the orchestrator's at its batch's step, which is the
  trainer's step that trains it, without marks (its batch N is shipped before the
  trainer's step N starts) and its ``time/*`` as ``orchestrator/time/*`` (both log a
  ``time/step``). The orchestrator's config is the run's (its W&B shared-mode primary).
- Endpoints: the trainer's own Prometheus server (``metrics_server``, the master rank's,
  utils/metrics_server.py) as job ``prime_rl_trainer``; the inference servers whose
  ``/metrics`` the orchestrator's own collector reads (``model.client.admin_base_url``,
  else ``base_url``: utils/client.py l.128-156) as job ``vllm``, label ``replica``.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import rl_insight
from rl_insight import frameworks
from rl_insight.frameworks.prime_rl import ORCHESTRATOR as ORCHESTRATOR_PREFIX
from rl_insight.integrations import kit

log = logging.getLogger(__name__)

FRAMEWORK = frameworks.named("prime_rl")
TRAINER, ORCHESTRATOR = "trainer", "orchestrator"
TRAINER_JOB = "prime_rl_trainer"  # the trainer's own /metrics (trainer_step, trainer_loss)
SITEHOOK = kit.SITE_HOOK
PATCHED = "_rl_insight_patched"


def role_of(kwargs: Mapping[str, Any]) -> str | None:
    """Which of prime-rl's processes calls ``monitors.setup``: the orchestrator names its
    train environments (orchestrator.py l.220-228), the RL trainer nothing beyond the
    common four (trainer/rl/train.py l.86-90); the SFT trainer and evals say
    ``overview_flavor="sft"`` and are not RL steps (None: not monitored)."""
    if kwargs.get("train_env_names") is not None:
        return ORCHESTRATOR
    if kwargs.get("overview_flavor", "rl") != "rl":
        return None
    return TRAINER


def run_names(config: Any, output_dir: Any) -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` if set; else the W&B
    project the config names (prime-rl's default ``prime-rl``) and the launcher's run name
    (``$PRL_RUN_NAME``), W&B's run name, or the run directory's name (both processes'
    ``output_dir`` is the run directory: configs/rl.py l.390)."""
    wandb = getattr(getattr(config, "monitors", None), "wandb", None)
    return kit.run_names(
        (getattr(wandb, "project", None),),
        (os.environ.get("PRL_RUN_NAME"), getattr(wandb, "name", None),
         Path(output_dir).name if output_dir else None),
        "prime-rl", "prime-rl")


def _host_port(url: str) -> str | None:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.netloc or None


def engine_addresses(config: Any) -> list[str]:
    """The inference servers the orchestrator's collector reads ``/metrics`` of: its admin
    clients (``admin_base_url``, else ``base_url``, utils/client.py l.128-156)."""
    client = getattr(getattr(config, "model", None), "client", None)
    urls = getattr(client, "admin_base_url", None) or [getattr(client, "base_url", None)]
    return [a for a in (_host_port(str(u)) for u in urls if u) if a]


def trainer_endpoint(config: Any) -> str | None:
    """The trainer's own Prometheus server (``metrics_server``: port 8000, host 0.0.0.0
    by default, configs/shared.py l.209-214), which its master rank serves."""
    server = getattr(config, "metrics_server", None)
    if server is None:
        return None
    return f"{getattr(server, 'host', '0.0.0.0')}:{int(server.port)}"


class RLInsightMonitor:
    """A prime-rl monitor as its fan-out calls one (``log(data, step=, kind=, subset=)``,
    ``finalize()``: monitors/__init__.py l.111, l.120): dicts of scalars become the run's
    series and steps; episodes are no series (their scalars come in the dicts)."""

    def __init__(self, role: str, config: Any = None, output_dir: Any = None) -> None:
        from rl_insight.integrations.tracker import FrameworkTracker

        self.role = role
        project, experiment = run_names(config, output_dir)
        # one configuration per run: the orchestrator's, W&B's shared-mode primary
        # (monitors/wandb/monitor.py l.54)
        self.tracker = FrameworkTracker(FRAMEWORK, project, experiment,
                                        marks=role == TRAINER,
                                        run_config=config if role == ORCHESTRATOR else None)
        if role == TRAINER:  # prime-rl's trainer never finalizes its monitors
            atexit.register(self.tracker.finish)

    async def log(self, data: Any, step: int, kind: str = "train",
                  subset: str = "effective") -> None:
        if isinstance(data, Mapping):
            await self.log_metrics(data, step)

    async def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        self.tracker.log(self.keys(metrics), step)

    def keys(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The dict as it goes out: without its ``step`` (the step is the call's), the
        orchestrator's ``time/*`` under ``orchestrator/``."""
        out = {}
        for key, value in metrics.items():
            if key == "step":
                continue
            if self.role == ORCHESTRATOR and key.startswith("time/"):
                key = ORCHESTRATOR_PREFIX + key
            out[key] = value
        return out

    async def log_episodes(self, episodes: Sequence[Any], step: int, kind: str,
                           subset: str) -> None:
        """Nothing: an episode is no time series."""

    async def finalize(self) -> None:
        """The orchestrator's clean exit (orchestrator.py l.506): what is buffered goes
        out; the trainer, whose last steps may still run, ends the run at its exit."""
        if self.role == ORCHESTRATOR:
            rl_insight.flush()
        else:
            self.tracker.finish()


def register_endpoints(role: str, config: Any) -> None:
    """The trainer's own Prometheus server; the inference servers (orchestrator)."""
    try:
        if role == TRAINER:
            address = trainer_endpoint(config)
            if address:
                rl_insight.update_prometheus_config([address], TRAINER_JOB)
        else:
            addresses = engine_addresses(config)
            if addresses:
                rl_insight.update_prometheus_config(
                    addresses, "vllm", [{"replica": i} for i in range(len(addresses))])
    except Exception:
        log.warning("rl-insight: registering prime-rl's endpoints failed; add them with "
                    "`rl-insight server targets add`", exc_info=True)


async def join(module: Any, kwargs: Mapping[str, Any]) -> None:
    """After prime-rl's own ``setup``: the monitor joins its list, in the processes
    whose monitors it builds (rank 0: monitors/__init__.py l.59-61), with monitoring on."""
    try:
        role = role_of(kwargs)
        rank = int(os.environ.get("RANK", os.environ.get("DP_RANK", "0")))
        if role is None or rank != 0 or not rl_insight.enabled():
            return
        config = kwargs.get("run_config")
        monitor = RLInsightMonitor(role, config, kwargs.get("output_dir"))
        module.MONITORS.append(monitor)
        register_endpoints(role, config)
    except Exception:
        log.warning("rl-insight: prime-rl's monitor could not be added; this process "
                    "runs unmonitored (is rl_insight importable in prime-rl's environment?)",
                    exc_info=True)


def patch_monitors(module: Any) -> None:
    """``prime_rl.monitors``, once a process imports it: its ``setup`` adds our monitor
    after its own (both processes call it through the module: ``monitors.setup``)."""
    setup = module.setup
    if getattr(setup, PATCHED, False):
        return

    @functools.wraps(setup)
    async def setup_and_join(*args: Any, **kwargs: Any) -> None:
        await setup(*args, **kwargs)
        await join(module, kwargs)

    setattr(setup_and_join, PATCHED, True)
    module.setup = setup_and_join


def command_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment prime-rl's command runs in: the site hook first on PYTHONPATH."""
    return kit.with_site_hook(environ)


USAGE = ("usage: python -m rl_insight.integrations.prime_rl COMMAND [ARGS...]\n"
         "  e.g. python -m rl_insight.integrations.prime_rl rl @ rl.toml\n"
         "runs prime-rl's COMMAND with RL-Insight's monitor in its trainer and orchestrator")


def main(argv: Sequence[str] | None = None) -> int:
    """Run prime-rl's command (``rl @ rl.toml``, ``trainer ...``) in its place, its
    processes with our monitor; says what is missing instead of failing silently."""
    return kit.exec_with_site_hook(
        sys.argv[1:] if argv is None else argv, USAGE, "prime-rl",
        "run this in prime-rl's environment (`uv run python -m "
        "rl_insight.integrations.prime_rl rl @ rl.toml`)")


if __name__ == "__main__":
    sys.exit(main())
