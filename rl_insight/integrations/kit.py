"""What every framework adapter does the same way: name the run (the environment's names
as the client's configuration read them, then the framework's own, then its defaults),
tell this process's rank, and start a framework's command with the site hook (and the
variables rl_insight/client/handover.py hands a child)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

SITE_HOOK = Path(__file__).resolve().parent / "sitehook"
ENDPOINT_ENVS = ("RL_INSIGHT_SERVER_URL", "RL_INSIGHT_OTLP_ENDPOINT")


def first(*candidates: object) -> str | None:
    """The first candidate that says something (not None, not empty)."""
    for c in candidates:
        if c not in (None, ""):
            return str(c)
    return None


def configured_names() -> tuple[str, str]:
    """``RL_INSIGHT_PROJECT`` / ``RL_INSIGHT_EXPERIMENT_NAME`` as this process's resolved
    configuration holds them (resolved now where nothing asked yet); empty when
    monitoring is off, where no name is used."""
    from rl_insight.client import api

    api.enabled()
    config = api.configuration()
    return config.names if config is not None else ("", "")


def run_names(projects: Iterable[object], experiments: Iterable[object], project: str,
              experiment: str) -> tuple[str, str]:
    """The environment's names where set, else the first of the framework's own names
    that says something, else its defaults."""
    env_project, env_experiment = configured_names()
    return (first(env_project, *projects) or project,
            first(env_experiment, *experiments) or experiment)


def process_rank() -> int:
    """This process's rank: torch.distributed's where the framework set it up (never
    imported here for it), else ``RANK``."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def with_site_hook(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the site hook first on ``PYTHONPATH``: every Python process started
    with it patches the frameworks' modules it imports itself (their tables' ``on_import``;
    rl_insight/integrations/sitehook/), as the Ray worker setup hook does inside a job."""
    env = dict(environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(SITE_HOOK) not in paths:
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_HOOK), *paths])
    return env


def exec_with_site_hook(argv: Sequence[str], usage: str, framework: str, hint: str) -> int:
    """Run a framework's command (``argv``, after an optional ``--``) in this process's
    place with the site hook on its ``PYTHONPATH``, so a framework that starts processes
    of its own gets the adapter in them; says what is missing instead of failing silently.
    Returns only when the command did not start: its exit status. ``hint``: how to run
    this where the framework's command runs."""
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args or args[0] in ("-h", "--help"):
        print(usage, file=sys.stderr)
        return 0 if args else 2
    if not any(os.environ.get(k) for k in ENDPOINT_ENVS):
        print(f"rl-insight: RL_INSIGHT_SERVER_URL is not set, so {framework} runs "
              "unmonitored; export it (http://<server>:18080, `rl-insight server status` "
              "prints it)", file=sys.stderr)
    from rl_insight.client.handover import child_env

    try:  # this process's run, if it named one, handed over with the hook
        os.execvpe(args[0], args, with_site_hook({**os.environ, **child_env()}))
    except OSError as e:
        print(f"rl-insight: cannot run {args[0]!r} ({e}); {hint}", file=sys.stderr)
        return 127
    return 0  # not reached: exec replaced this process
