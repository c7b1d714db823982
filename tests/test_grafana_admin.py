"""The admin password reaches Grafana however its data directory looks: on a first start
(Grafana creates the admin user from [security]) and on a later one with a changed
setting (only Grafana's own reset command changes a stored password). Grafana runs here
as a FAKE (tests/fakes/grafana.py) with the real command lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import Cli, free_port_overrides, wait_for

pytestmark = pytest.mark.integration


def fake_grafana_home(root: Path) -> Path:
    home = root / "grafana-13.0.0"
    (home / "bin").mkdir(parents=True)
    (home / "conf").mkdir()
    (home / "conf" / "defaults.ini").write_text("# FAKE Grafana home\n")
    binary = home / "bin" / "grafana"
    fake = Path(__file__).parent / "fakes" / "grafana.py"
    binary.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(fake)!r}\n"
                      "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    binary.chmod(0o755)
    return binary


def test_admin_password_applies_on_an_existing_data_directory(tmp_path):
    binary = fake_grafana_home(tmp_path)
    home = tmp_path / "home"
    stored = home / "data" / "grafana" / "FAKE-admin-password"
    ports = free_port_overrides()
    for password in ("first-Secret-1", "second-Secret-2"):  # the second: data dir exists
        cli = Cli(home, ports + [f"grafana.binary={binary}", "tempo.enabled=false",
                                 f"grafana.admin_password={password}"])
        cli.start()
        try:
            wait_for(lambda p=password: stored.is_file() and stored.read_text() == p, 30,
                     f"Grafana's stored admin password to become {password}")
        finally:
            cli.stop()
