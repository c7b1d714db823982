"""What importing a part of RL-Insight loads: the CLI, the server and node agents do not
pull in the client, OpenTelemetry or Ray; the client API loads on first use."""

from __future__ import annotations

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
    code = ("import sys, rl_insight.cli, rl_insight.server.services.supervisor, "
            "rl_insight.childproc\n"
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
