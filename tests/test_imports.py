"""What importing a part of RL-Insight loads: the CLI, the server and node agents do not
pull in the client, OpenTelemetry or Ray; the client API loads on first use."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def fresh_python(code: str) -> None:
    """Run ``code`` in a new interpreter (nothing imported yet); it asserts itself."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.integration  # starts a process
def test_the_cli_and_the_package_load_no_client_stack_until_used():
    code = ("import sys, rl_insight.commands.main, rl_insight.server.services.supervisor, "
            "rl_insight.common.childproc\n"
            "heavy = [m for m in sys.modules if m.startswith(('rl_insight.client', "
            "'opentelemetry', 'ray'))]\n"
            "assert not heavy, heavy\n"
            "import rl_insight\n"
            "rl_insight.metric_gauge('x', 1.0)  # the API loads on first use\n"
            "assert 'rl_insight.client.api' in sys.modules\n")
    fresh_python(code)


@pytest.mark.integration  # starts a process
def test_the_client_reaches_ray_only_through_its_transport_interface():
    """client/ never imports rl_insight.ray or Ray itself; ray/ implements the transport."""
    code = ("import sys, rl_insight.client.api, rl_insight.client.core, "
            "rl_insight.client.transports\n"
            "bad = [m for m in sys.modules if m == 'ray' or m.startswith(('ray.', "
            "'rl_insight.ray'))]\n"
            "assert not bad, bad\n"
            "from rl_insight.client.transports import DirectTransport, Transport\n"
            "from rl_insight.ray.transport import RayTransport\n"
            "for kind in (DirectTransport, RayTransport):\n"
            "    missing = [n for n in ('export', 'register_run', 'upkeep', 'finish', "
            "'close', 'in_ray') if not hasattr(kind, n)]\n"
            "    assert not missing, (kind, missing)\n")
    fresh_python(code)


# server/ by floors (README, "How it fits together"): a module imports its own floor and
# the floors below, never one above, type-only imports included
SERVER_FLOORS = {
    "auth": 1, "doors": 1, "endpoints": 1, "httpio": 1, "runfile": 1, "threads": 1,
    "ingest": 2, "services": 2, "analyses": 2,
    "state": 3,
    "routes": 4,
    "app": 5, "lifecycle": 5,
}


def server_floor(module: str) -> int | None:
    """The floor of ``rl_insight.server.<part>...``; None outside the server package."""
    parts = module.split(".")
    if parts[:2] != ["rl_insight", "server"] or len(parts) < 3:
        return None
    return SERVER_FLOORS[parts[2]]


def imported(tree: ast.AST) -> list[str]:
    """Every module an ``import`` names anywhere in a file, TYPE_CHECKING blocks and
    function bodies included (``from rl_insight.server import doors`` names the module)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [f"{node.module}.{a.name}" if node.module == "rl_insight.server"
                    else node.module for a in node.names]
    return out


def test_no_server_module_imports_a_floor_above_its_own():
    climbs = []
    for path in sorted((REPO / "rl_insight" / "server").rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        module = ".".join(rel.parts)
        if path.name == "__init__.py" and rel.parent.name == "server":
            continue
        own = server_floor(module if path.name != "__init__.py" else ".".join(rel.parts[:-1]))
        for target in imported(ast.parse(path.read_text())):
            floor = server_floor(target)
            if floor is not None and floor > own:
                climbs.append(f"{module} (floor {own}) imports {target} (floor {floor})")
    assert not climbs, "\n".join(climbs)
    # and outside the server, only the operator tools read it (the CLI and its commands)
    outside = []
    for path in sorted((REPO / "rl_insight").rglob("*.py")):
        rel = path.relative_to(REPO / "rl_insight")
        if rel.parts[0] in ("server", "commands"):
            continue
        outside += [f"{rel} imports {t}" for t in imported(ast.parse(path.read_text()))
                    if server_floor(t) is not None]
    assert not outside, "\n".join(outside)


@pytest.mark.integration  # starts a process
def test_the_frameworks_tables_load_without_the_client_ray_or_any_framework():
    """The server reads the frameworks' tables (rl_insight.integrations): importing them
    loads no client, Ray, OpenTelemetry SDK or framework."""
    code = ("import sys, rl_insight.integrations, rl_insight.server.ingest.framework_spans\n"
            "heavy = [m for m in sys.modules if m.startswith(('rl_insight.client', "
            "'ray', 'opentelemetry.sdk', 'trl', 'areal', 'skyrl', 'slime', 'roll', "
            "'nemo_rl', 'torch', 'transformers'))]\n"
            "assert not heavy, heavy\n")
    fresh_python(code)
