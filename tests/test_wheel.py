"""The package as a user installs it: a wheel built from this checkout, installed into a
fresh venv outside it. The dashboards and runtime-env files ship inside; Grafana's
generated provisioning points at the installed copies; the server starts from there.

The fresh venv borrows the dependencies of the project's venv through a plain path entry
(not a site directory, so the checkout's editable install is not picked up): only the
wheel's own files decide what `rl_insight` is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dashboards import build
from tests.conftest import REPO, free_port_overrides

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = next(out.glob("rl_insight-*.whl"))
    venv = out / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "project-deps.pth").write_text("\n".join(deps) + "\n")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q",
                        "--target", str(site), str(wheel)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return wheel, venv, site


def run_in(venv: Path, code: str, cwd: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH",) and not k.startswith("RL_INSIGHT_")}
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd,
                       env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_the_wheel_holds_every_dashboard_and_runtime_env_file(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    dashboards = {n for n in names if n.startswith("rl_insight/dashboards/")}
    assert dashboards == {f"rl_insight/dashboards/{f}" for f in build.render_all()}
    assert {"rl_insight/ray/runtime_env/rl_insight.yaml",
            "rl_insight/ray/runtime_env/rl_insight.template.yaml"} <= names


def test_grafana_provisioning_points_at_the_installed_dashboards(installed, tmp_path):
    _, venv, site = installed
    code = (
        "import json, sys, yaml\nfrom pathlib import Path\n"
        "import rl_insight\nfrom rl_insight import config\n"
        "from rl_insight.server.services.grafana import Grafana\n"
        "s = config.load()\ng = Grafana()\ng.launch(s, Path('/usr/bin/true'))\n"
        "prov = g.work_dir(s) / 'provisioning' / 'dashboards' / 'rl-insight.yaml'\n"
        "p = yaml.safe_load(prov.read_text())['providers'][0]['options']['path']\n"
        "print(json.dumps({'package': rl_insight.__file__, 'path': p, "
        "'files': sorted(x.name for x in Path(p).glob('*.json'))}))\n")
    got = json.loads(run_in(venv, code, tmp_path, RL_INSIGHT_HOME=str(tmp_path / "home")))
    assert Path(got["package"]).is_relative_to(site)  # the wheel's copy, not the checkout
    assert Path(got["path"]) == site / "rl_insight" / "dashboards"
    assert got["files"] == sorted(build.render_all())


def test_the_installed_server_starts_outside_the_checkout(installed, tmp_path):
    _, venv, site = installed
    home = tmp_path / "home"
    overrides = []
    for o in free_port_overrides():
        overrides += ["--set", o]
    cli = [str(venv / "bin" / "python"), "-m", "rl_insight"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_INSIGHT_")}
    env["RL_INSIGHT_HOME"] = str(home)
    try:
        r = subprocess.run(cli + ["server", "start", "--detach", *overrides], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run(cli + ["server", "status", "--json", *overrides], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
        status = json.loads(r.stdout)
        assert status["running"], status
        prom = next(x for x in status["services"] if x["name"] == "prometheus")
        assert prom["state"] == "ready", status
        r = subprocess.run(cli + ["ray-env", "--path"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
        path = Path(r.stdout.strip())
        assert path.is_relative_to(site) and "worker_process_setup_hook" in path.read_text()
    finally:
        subprocess.run(cli + ["server", "stop", *overrides], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
