"""The server's OpenAPI schema tells the truth: schemathesis (the real CLI) runs its four
phases (examples, coverage, fuzzing, stateful) over every operation, positive and
negative data, every check, with the token, against a server with its real Prometheus.
A request the schema allows must be accepted, one it forbids refused, every status
answered must be documented, and a 405 must name the path's methods. The push bodies'
format is written by tests/reliability/schema_hooks.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration
TOKEN = "schema-token"
ST = str(Path(sys.executable).with_name("st"))


def test_schemathesis_finds_no_failure_in_any_phase(cli):
    cli.env["RL_INSIGHT_TOKEN"] = TOKEN
    url = cli.start("prometheus.scrape_interval=1s",
                    "traces.relay_url=http://127.0.0.1:9/v1/traces")
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.reliability.schema_hooks",
           "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    r = subprocess.run(
        [ST, "--config-file", str(Path(__file__).with_name("schemathesis.toml")), "run",
         url + "/openapi.json", "--header", f"Authorization: Bearer {TOKEN}",
         "--phases", "examples,coverage,fuzzing,stateful", "--checks", "all",
         "--mode", "all", "--max-examples", "60", "--seed", "1", "--no-color",
         "--request-timeout", "20"],
        env=env, capture_output=True, text=True, timeout=600, cwd=cli.home)
    out = r.stdout + r.stderr
    selected = re.search(r"Selected: (\d+)/(\d+)", out)
    tested = re.search(r"Tested: (\d+)", out)
    cases = re.search(r"(\d+) generated, (\d+) passed", out)
    assert r.returncode == 0, out[-6000:]
    assert selected and selected.group(1) == selected.group(2), out[-3000:]
    assert tested and int(tested.group(1)) >= 24, out[-3000:]  # every operation
    assert cases and cases.group(1) == cases.group(2) and int(cases.group(1)) > 1500, \
        out[-3000:]
