"""A server that listens beyond loopback without a token makes one (0600) at first start
and keeps it; clients of the same user on its machine find it, every other host is told
to export it (`server start` prints the line, `rl-insight ray-env` writes it)."""

from __future__ import annotations

import stat

import pytest
import yaml

from rl_insight import config
from rl_insight.commands import main as cli
from rl_insight.common import secret
from rl_insight.server import lifecycle


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.5"])
def test_a_loopback_server_needs_no_token(home, host):
    s = config.load(overrides=[f"host={host}"])
    assert secret.server_token(s) == ("", "none")
    assert not secret.token_path(s).exists()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "monitor.example"])
def test_beyond_loopback_a_token_is_made_once_and_kept(home, host):
    s = config.load(overrides=[f"host={host}"])
    token, how = secret.server_token(s)
    assert how == "made" and len(token) >= 40
    path = secret.token_path(s)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == token
    assert secret.server_token(config.load(overrides=[f"host={host}"])) == (token, "kept")


def test_the_default_server_binds_beyond_loopback_and_so_gets_a_token(home):
    token, how = secret.server_token(config.load())
    assert how == "made" and token


def test_a_configured_token_wins_and_nothing_is_written(home, monkeypatch):
    monkeypatch.setenv("RL_INSIGHT_TOKEN", "mine")
    s = config.load(overrides=["host=0.0.0.0"])
    assert secret.server_token(s) == ("mine", "configured")
    assert not secret.token_path(s).exists()


def test_a_server_section_host_on_loopback_decides_not_the_top_level_one(home):
    s = config.load(overrides=["host=0.0.0.0", "server.host=127.0.0.1"])
    assert secret.server_token(s) == ("", "none")


def test_clients_of_this_user_on_the_server_machine_find_the_made_token(home, monkeypatch):
    made, _ = secret.server_token(config.load(overrides=["host=0.0.0.0"]))
    assert secret.client_token(config.load()) == made
    monkeypatch.setenv("RL_INSIGHT_TOKEN", "exported")
    assert secret.client_token(config.load()) == "exported"


def test_ray_env_writes_the_made_token_into_the_runtime_env(home, capsys):
    made, _ = secret.server_token(config.load(overrides=["host=0.0.0.0"]))
    assert cli.main(["ray-env", "--server-url", "http://10.0.0.1:18080"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc["env_vars"]["RL_INSIGHT_TOKEN"] == made
    assert doc["env_vars"]["RL_INSIGHT_SERVER_URL"] == "http://10.0.0.1:18080"


def test_ray_env_without_a_token_anywhere_writes_none(home, capsys):
    assert cli.main(["ray-env", "--server-url", "http://10.0.0.1:18080"]) == 0
    assert "RL_INSIGHT_TOKEN" not in yaml.safe_load(capsys.readouterr().out)["env_vars"]


def test_start_prints_the_export_line_and_says_why_and_where(home):
    s = config.load(overrides=["host=0.0.0.0"])
    token, how = secret.server_token(s)
    report = {"all_ready": True, "services": [],
              "clients": {"server_url": "http://10.0.0.7:18080"}}
    text = lifecycle.summary(report, lifecycle.token_advice(s, how))
    assert f"  export RL_INSIGHT_TOKEN={token}\n" in text
    assert "made now in " + str(secret.token_path(s)) in text and "0600" in text
    assert lifecycle.token_advice(s, "none") == []
    assert "<your server.token>" in "\n".join(lifecycle.token_advice(s, "configured"))
