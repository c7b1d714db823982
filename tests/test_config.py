"""Configuration layering: defaults < file < environment < flags."""

from __future__ import annotations

import pytest
import yaml

from rl_insight import config
from rl_insight.commands import main as cli
from rl_insight.commands import server


def test_defaults_are_the_documented_ports(home):
    s = config.load(environ={"RL_INSIGHT_HOME": str(home)})
    assert (s.server.port, s.prometheus.port, s.tempo.port, s.grafana.port) == (
        18080, 9090, 3200, 3000)
    assert (s.tempo.otlp_grpc_port, s.tempo.otlp_http_port) == (4317, 4318)
    assert s.home_path == home.resolve()


def test_each_layer_overrides_the_one_before(home, tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("server:\n  port: 1001\nprometheus:\n  port: 2001\n  scrape_interval: 2s\n"
                 "tempo:\n  port: 3001\n")
    env = {"RL_INSIGHT_HOME": str(home), "RL_INSIGHT_PROMETHEUS_PORT": "2002",
           "RL_INSIGHT_TEMPO_PORT": "3002"}
    s = config.load(f, ["tempo.port=3003"], environ=env)
    assert s.server.port == 1001  # file
    assert s.prometheus.port == 2002 and s.prometheus.scrape_interval == "2s"  # env > file
    assert s.tempo.port == 3003  # flag > env


def test_home_config_file_is_read_by_default(home):
    (home / "config.yaml").write_text("grafana:\n  admin_password: s3cret\n")
    s = config.load(environ={"RL_INSIGHT_HOME": str(home)})
    assert s.grafana.admin_password == "s3cret"
    assert config.as_dict(s)["grafana"]["admin_password"] == "***"


def test_short_aliases(home):
    s = config.load(environ={"RL_INSIGHT_HOME": str(home), "RL_INSIGHT_TOKEN": "t",
                             "RL_INSIGHT_HOST": "127.0.0.1",
                             "RL_INSIGHT_SERVER_URL": "http://x:1"})  # a client variable
    assert s.server.token == "t" and s.bind_host("grafana") == "127.0.0.1"
    assert config.env_name("server.token") == "RL_INSIGHT_TOKEN"
    assert config.env_name("prometheus.port") == "RL_INSIGHT_PROMETHEUS_PORT"


@pytest.mark.parametrize("override, message", [
    ("server.port=abc", "server.port: expected a whole number"),
    ("server.port=70000", "server.port: a port is 0..65535"),
    ("prometheus.enabled=maybe", "expected true or false"),
    ("nosuch.key=1", "unknown setting 'nosuch.key'"),
    ("server=1", "unknown setting 'server'"),
    ("novalue", "expected section.field=value"),
])
def test_bad_values_name_the_setting(home, override, message):
    with pytest.raises(config.ConfigError, match=message.replace(".", r"\.")):
        config.load(overrides=[override], environ={"RL_INSIGHT_HOME": str(home)})


def test_bad_file_is_reported(home, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("tempo:\n  prot: 1\n")
    with pytest.raises(config.ConfigError, match="bad.yaml: unknown setting 'tempo.prot'"):
        config.load(f, environ={})
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(tmp_path / "missing.yaml", environ={})


def test_remote_write_settings_from_the_environment_and_flags_with_secrets_masked(
        home, capsys):
    env = {"RL_INSIGHT_HOME": str(home),
           "RL_INSIGHT_PROMETHEUS_REMOTE_WRITE_URLS": "http://a:1/w,http://b:2/w",
           "RL_INSIGHT_PROMETHEUS_REMOTE_WRITE_PASSWORD": "PW-1"}
    s = config.load(overrides=["prometheus.remote_write_bearer_token=TOK-2"], environ=env)
    assert s.prometheus.remote_write_urls == "http://a:1/w,http://b:2/w"
    shown = config.as_dict(s)["prometheus"]
    assert shown["remote_write_password"] == shown["remote_write_bearer_token"] == "***"
    assert config.as_dict(s, redact=False)["prometheus"]["remote_write_password"] == "PW-1"
    secrets = ["prometheus.remote_write_password=PW-1",
               "prometheus.remote_write_bearer_token=TOK-2"]
    flags = [x for item in secrets for x in ("--set", item)]
    assert cli.main(["server", "config", *flags]) == 0
    out = capsys.readouterr().out
    assert "PW-1" not in out and "TOK-2" not in out
    assert yaml.safe_load(out)["prometheus"]["remote_write_password"] == "***"
    # a detached start passes them through its environment, never its command line
    passed, environ = server.passthrough(cli.build_parser().parse_args(
        ["server", "start", "--detach", *flags,
         "--set", "prometheus.remote_write_urls=http://a:1/w"]))
    assert passed == ["--set", "prometheus.remote_write_urls=http://a:1/w"]
    assert environ == {"RL_INSIGHT_PROMETHEUS_REMOTE_WRITE_PASSWORD": "PW-1",
                       "RL_INSIGHT_PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN": "TOK-2"}


# upstream rl-insight 0.3.0's server config (the wheel's rl_insight/config/config.yaml):
# its keys and default values, as a user's file holds them
UPSTREAM = """
server: {backend: local, enable: true, port: 18081}
prometheus: {binary_path: "", enable: true, min_version: 2.30.0, install_version: 2.54.1,
             prometheus_port: 9095, retention_time: 30d,
             config_file: "${service_root}/services/prometheus/prometheus.yml"}
otel: {otel_port: 4318}
tempo: {binary_path: /opt/tempo/tempo, enable: false, min_version: 2.0.0,
        install_version: 2.6.1, query_port: 3201, retention_time: 30d,
        config_file: "${service_root}/services/tempo/tempo.yaml"}
grafana: {binary_path: "", enable: true, min_version: 13.0.0, install_version: 13.0.0,
          port: 3001, config_file: "${service_root}/services/grafana/grafana.ini",
          provisioning_dir: "${service_root}/services/grafana/provisioning",
          dashboards_dir: "${service_root}/services/grafana/dashboards"}
"""


def test_an_upstream_server_config_is_read_as_the_same_settings(home, tmp_path, caplog):
    f = tmp_path / "server.yaml"
    f.write_text(UPSTREAM)
    s = config.load(f)
    assert (s.server.port, s.prometheus.port, s.prometheus.retention) == (18081, 9095, "30d")
    assert (s.tempo.enabled, s.tempo.binary, s.tempo.port) == (False, "/opt/tempo/tempo", 3201)
    assert s.tempo.block_retention == "720h"  # Tempo takes hours
    assert (s.grafana.port, s.grafana.min_version, s.grafana.dashboards_dir) == (
        3001, "13.0.0", "")  # upstream's interpolated default path: ours instead
    said = caplog.text
    assert said.count("upstream rl-insight's server config") == 1  # one line
    assert "prometheus.prometheus_port read as prometheus.port" in said
    assert "otel.otel_port ignored: spans come in on the server's own port" in said


@pytest.mark.parametrize("text, message", [
    ("server: {backend: kubernetes}", "remove the key"),
    ("server: {enable: false}", "nothing to start"),
])
def test_upstream_values_that_cannot_be_honoured_say_what_to_write(home, tmp_path, text,
                                                                   message):
    f = tmp_path / "server.yaml"
    f.write_text(text)
    with pytest.raises(config.ConfigError, match=message):
        config.load(f)


def test_client_settings_set_for_the_job_travel_in_its_runtime_env(home, capsys,
                                                                   monkeypatch):
    # a worker reads its own environment, not the driver's: `ray-env` and attach's
    # runtime_env carry the client settings the operator set, and nothing else of ours
    monkeypatch.setenv("RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S", "1")
    monkeypatch.setenv("RL_INSIGHT_PROMETHEUS_SCRAPE_INTERVAL", "1s")
    assert cli.main(["ray-env", "--server-url", "http://10.0.0.1:18080"]) == 0
    env_vars = yaml.safe_load(capsys.readouterr().out)["env_vars"]
    assert env_vars["RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S"] == "1"
    assert "RL_INSIGHT_PROMETHEUS_SCRAPE_INTERVAL" not in env_vars
    from rl_insight.ray import runtime_env
    merged = runtime_env({"env_vars": {"RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S": "2"}})
    assert merged["env_vars"]["RL_INSIGHT_CLIENT_LANE_FLUSH_INTERVAL_S"] == "2"  # the job's
    assert config.load(environ=env_vars).client.lane_flush_interval_s == 1.0
