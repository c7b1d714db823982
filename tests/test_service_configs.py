"""The generated configs of Prometheus, Tempo and Grafana.

Prometheus' is checked by the real `promtool`. Tempo and Grafana cannot run here, so
their files are checked field by field against the documented formats (pages named at
each test).
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rl_insight import config
from rl_insight.server.services import SERVICES
from rl_insight.server.services.grafana import FOLDER


@pytest.fixture
def settings(home):
    return config.load(overrides=["host=127.0.0.1", "prometheus.port=19191",
                                  "tempo.port=13222", "server.port=18999"])


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool comes with Debian's "
                    "prometheus package, which `make test` installs")
@pytest.mark.integration  # starts a process
def test_prometheus_config_passes_promtool(settings):
    launch = SERVICES["prometheus"].launch(settings, Path("/usr/bin/prometheus"))
    cfg = Path(launch.cwd) / "prometheus.yml"
    r = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr
    data = yaml.safe_load(cfg.read_text())
    jobs = {j["job_name"]: j for j in data["scrape_configs"]}
    server = jobs["rl_insight_server"]
    assert server["honor_labels"] is True
    assert server["static_configs"][0]["targets"] == ["127.0.0.1:18999"]
    assert "--web.enable-lifecycle" in launch.argv
    assert "--web.listen-address=127.0.0.1:19191" in launch.argv
    assert launch.ready_url == "http://127.0.0.1:19191/-/ready"


@pytest.mark.integration  # starts a process
def test_prometheus_ipv6_hosts_are_bracketed(home):
    s = config.load(overrides=["host=::1", "server.port=18080", "prometheus.port=9090"])
    data = SERVICES["prometheus"].render(s)
    assert data["scrape_configs"][0]["static_configs"][0]["targets"] == ["[::1]:18080"]
    launch = SERVICES["prometheus"].launch(s, Path("/usr/bin/prometheus"))
    assert "--web.listen-address=[::1]:9090" in launch.argv


def test_tempo_config_for_one_binary_on_any_bind_host(settings, home):
    # Tempo 2.6.1 (cmd/tempo/main.go L210-220, modules/modules.go L298-303): target `all`
    # puts its rings on 127.0.0.1 and dials 127.0.0.1:<grpc port>; every key is checked
    # against its config structs in test_upstream_keys.py
    launch = SERVICES["tempo"].launch(settings, Path("/opt/tempo"))
    assert launch.argv == ["/opt/tempo", f"-config.file={Path(launch.cwd) / 'tempo.yaml'}"]
    assert launch.ready_url == "http://127.0.0.1:13222/ready"
    data = yaml.safe_load((Path(launch.cwd) / "tempo.yaml").read_text())
    assert data["target"] == "all"
    assert data["server"] == {"http_listen_address": "127.0.0.1", "http_listen_port": 13222,
                              "grpc_listen_address": "127.0.0.1", "grpc_listen_port": 9095,
                              "log_level": "info"}
    otlp = data["distributor"]["receivers"]["otlp"]["protocols"]
    assert otlp == {"grpc": {"endpoint": "127.0.0.1:4317"},
                    "http": {"endpoint": "127.0.0.1:4318"}}
    assert data["compactor"]["compaction"]["block_retention"] == "336h"
    assert data["memberlist"] == {"bind_addr": ["127.0.0.1"]}
    trace = data["storage"]["trace"]
    assert trace["backend"] == "local"
    for key in ("local", "wal"):
        assert set(trace[key]) == {"path"}
        assert Path(trace[key]["path"]).is_relative_to(home)  # stored under RL_INSIGHT_HOME
    assert data["usage_report"] == {"reporting_enabled": False}
    # span metrics and service graphs, remote-written to the managed Prometheus
    gen = data["metrics_generator"]["storage"]
    assert gen["remote_write"] == [{"url": "http://127.0.0.1:19191/api/v1/write"}]
    assert Path(gen["path"]).is_relative_to(home)
    assert data["overrides"]["defaults"]["metrics_generator"]["processors"] == [
        "service-graphs", "span-metrics"]

    # a routable bind host: Tempo checks no credential, so every listener of it stays on
    # loopback (spans come through the server, Grafana reads it locally)
    settings = config.with_values(settings, {"host": "10.1.2.3"})
    data = SERVICES["tempo"].render(settings)
    assert data["server"]["http_listen_address"] == "127.0.0.1"
    assert data["server"]["grpc_listen_address"] == "127.0.0.1"
    assert data["distributor"]["receivers"]["otlp"]["protocols"]["grpc"] == {
        "endpoint": "127.0.0.1:4317"}
    ports = {p.key: p.host for p in SERVICES["tempo"].ports(settings)}
    assert set(ports.values()) == {"127.0.0.1"}
    # and Prometheus beyond loopback wants its password for the generator's writes
    assert data["metrics_generator"]["storage"]["remote_write"][0]["basic_auth"] == {
        "username": "rl-insight",
        "password_file": str(settings.state_dir / "prometheus.password")}
    with pytest.raises(config.ConfigError, match="Tempo checks no credential"):
        SERVICES["tempo"].render(config.with_values(settings, {"tempo.host": "0.0.0.0"}))

    settings = config.with_values(settings, {"tempo.metrics_generator": False})
    assert "metrics_generator" not in SERVICES["tempo"].render(settings)


def test_grafana_files_match_provisioning_reference(settings, home, tmp_path):
    # Formats: https://grafana.com/docs/grafana/latest/administration/provisioning/
    # (datasources: apiVersion 1, name/type/uid/access/url/isDefault/jsonData/editable;
    # dashboard providers: name/orgId/folder/folderUid/type/disableDeletion/
    # updateIntervalSeconds/allowUiUpdates/options.path/options.foldersFromFilesStructure)
    # and https://grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/ (ini).
    gh = tmp_path / "grafana-13.0.0"
    (gh / "bin").mkdir(parents=True)
    (gh / "conf").mkdir()
    (gh / "conf" / "defaults.ini").write_text("")
    binary = gh / "bin" / "grafana"
    binary.write_text("")
    settings = config.with_values(settings, {"grafana.port": 13000})
    launch = SERVICES["grafana"].launch(settings, binary)
    work = Path(launch.cwd)
    assert launch.argv[:2] == [str(binary), "server"]
    assert launch.argv[2:4] == ["--homepath", str(gh)]
    assert launch.ready_url == "http://127.0.0.1:13000/api/health"

    ini = configparser.ConfigParser(interpolation=None)
    ini.read(launch.argv[5])
    assert ini["server"]["http_port"] == "13000" and ini["server"]["http_addr"] == "127.0.0.1"
    assert ini["security"]["admin_user"] == "admin"
    prov = Path(ini["paths"]["provisioning"])
    for key in ("data", "logs", "plugins", "provisioning"):
        assert Path(ini["paths"][key]).is_relative_to(home)
    assert ini["analytics"]["reporting_enabled"] == "false"
    assert work == gh  # Grafana runs from its home

    ds = yaml.safe_load((prov / "datasources" / "rl-insight.yaml").read_text())
    assert ds["apiVersion"] == 1
    allowed = {"name", "type", "uid", "access", "url", "isDefault", "jsonData", "editable",
               "orgId", "secureJsonData", "basicAuth", "version", "user", "database"}
    by_uid = {d["uid"]: d for d in ds["datasources"]}
    assert set(by_uid) == {"prometheus", "tempo"}
    for d in ds["datasources"]:
        assert set(d) <= allowed and d["access"] == "proxy"
    assert by_uid["prometheus"]["type"] == "prometheus"
    assert by_uid["prometheus"]["url"] == "http://127.0.0.1:19191"
    assert by_uid["tempo"]["type"] == "tempo"
    assert by_uid["tempo"]["url"] == "http://127.0.0.1:13222"

    dash = yaml.safe_load((prov / "dashboards" / "rl-insight.yaml").read_text())
    assert dash["apiVersion"] == 1
    (p,) = dash["providers"]
    assert set(p) <= {"name", "orgId", "folder", "folderUid", "type", "disableDeletion",
                      "updateIntervalSeconds", "allowUiUpdates", "options"}
    assert p["folder"] == FOLDER == "RL-Insight" and p["type"] == "file"
    assert set(p["options"]) == {"path", "foldersFromFilesStructure"}
    assert p["options"]["foldersFromFilesStructure"] is False  # folder is set, so false
    assert Path(p["options"]["path"]).name == "dashboards"


def test_distribution_grafana_server_layout(settings, tmp_path):
    binary = tmp_path / "grafana-server"
    binary.write_text("")
    launch = SERVICES["grafana"].launch(settings, binary)
    assert launch.argv[1] == "--homepath"  # grafana-server takes no `server` subcommand


def test_engine_names_survive_openmetrics_negotiation(home):
    """2.49+ scrapes text first; every version restores `vllm:`/`sglang:` names that an
    OpenMetrics answer of prometheus_client >= 0.23 rewrote, and names vLLM-Omni's own
    replica label engine_replica."""
    import re

    from rl_insight.server.services.prometheus import TEXT_FIRST

    s = config.load(overrides=["host=127.0.0.1"])
    prom = SERVICES["prometheus"]
    assert "scrape_protocols" not in prom.render(s, "2.42.0")["global"]  # Debian's refuses it
    assert prom.render(s, "2.54.1")["global"]["scrape_protocols"] == TEXT_FIRST
    job = next(j for j in prom.render(s)["scrape_configs"]
               if j["job_name"] == "rl_insight_targets")
    rule = job["metric_relabel_configs"][0]

    def relabel(name: str) -> str:  # Prometheus anchors the regex; Go's ${1} is \1
        m = re.fullmatch(rule["regex"], name)
        return rule["replacement"].replace("${1}", m[1]).replace("${2}", m[2]) if m else name

    assert relabel("sglang_num_running_reqs") == "sglang:num_running_reqs"
    assert relabel("vllm_prompt_tokens_total") == "vllm:prompt_tokens_total"
    assert relabel("vllm_omni_stage_gen_time_s_bucket") == "vllm_omni:stage_gen_time_s_bucket"
    for kept in ("vllm:num_requests_running", "vllm_omni:stage_gen_time_s_count",
                 "sglang:token_usage", "tq_partitions_total", "node_cpu_seconds_total"):
        assert relabel(kept) == kept


@pytest.mark.integration  # starts a process
def test_remote_write_credentials_live_in_0600_files_not_in_the_yaml_or_argv(home):
    import os

    urls = "http://10.0.0.9:8428/api/v1/write, https://lts.example/api/v1/push"
    s = config.load(overrides=["host=127.0.0.1", f"prometheus.remote_write_urls={urls}",
                               "prometheus.remote_write_username=rl",
                               "prometheus.remote_write_password=PW-secret-1"])
    prom = SERVICES["prometheus"]
    work = prom.work_dir(s)
    pw, tok = work / "remote_write_password", work / "remote_write_bearer_token"

    def launched() -> dict:
        launch = prom.launch(s, Path("/usr/bin/prometheus"))
        text = (Path(launch.cwd) / "prometheus.yml").read_text()
        for secret in ("PW-secret-1", "TOK-secret-2"):
            assert secret not in text and not any(secret in a for a in launch.argv)
        assert not launch.env
        return yaml.safe_load(text)

    data = launched()
    assert data["remote_write"] == [
        {"url": u, "basic_auth": {"username": "rl", "password_file": str(pw)}}
        for u in ("http://10.0.0.9:8428/api/v1/write", "https://lts.example/api/v1/push")]
    assert pw.read_text() == "PW-secret-1" and os.stat(pw).st_mode & 0o777 == 0o600
    if shutil.which("promtool"):
        r = subprocess.run(["promtool", "check", "config", str(work / "prometheus.yml")],
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stdout + r.stderr

    s = config.with_values(s, {"prometheus.remote_write_username": "",
                               "prometheus.remote_write_password": "",
                               "prometheus.remote_write_bearer_token": "TOK-secret-2"})
    data = launched()
    assert data["remote_write"][0]["authorization"] == {"type": "Bearer",
                                                        "credentials_file": str(tok)}
    assert tok.read_text() == "TOK-secret-2" and os.stat(tok).st_mode & 0o777 == 0o600
    assert not pw.exists()  # a secret no setting asks for is not left behind

    s = config.with_values(s, {"prometheus.remote_write_urls": ""})
    assert "remote_write" not in launched() and not tok.exists()


@pytest.mark.parametrize("overrides, message", [
    (["prometheus.remote_write_urls=10.0.0.9:8428/api/v1/write"], "expected an http://"),
    (["prometheus.remote_write_username=u", "prometheus.remote_write_bearer_token=t"],
     "exclude each other"),
    (["prometheus.remote_write_password=p"], "needs prometheus.remote_write_username"),
])
def test_bad_remote_write_settings_name_the_setting(home, overrides, message):
    s = config.load(overrides=["prometheus.remote_write_urls=http://x:1/w", *overrides])
    with pytest.raises(config.ConfigError, match=message):
        SERVICES["prometheus"].render(s)


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool comes with Debian's "
                    "prometheus package, which `make test` installs")
@pytest.mark.integration  # starts a process
def test_the_external_prometheus_block_passes_promtool(tmp_path):
    from rl_insight.commands import main as cli
    from rl_insight.server.services.prometheus import external_config_text

    text = external_config_text("http://10.0.0.5:18080", "15s")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 15s}\n" + text)
    r = subprocess.run(["promtool", "check", "config", str(cfg)], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(text)["scrape_configs"]}
    assert jobs["rl_insight_server"]["honor_labels"] is True
    assert jobs["rl_insight_server"]["static_configs"] == [{"targets": ["10.0.0.5:18080"]}]
    assert jobs["rl_insight_targets"]["http_sd_configs"] == [
        {"url": "http://10.0.0.5:18080/api/v1/prometheus/sd", "refresh_interval": "15s"}]
    managed = next(j for j in SERVICES["prometheus"].render(config.Settings())[
        "scrape_configs"] if j["job_name"] == "rl_insight_targets")
    assert jobs["rl_insight_targets"]["metric_relabel_configs"] == managed[
        "metric_relabel_configs"]  # the same engine-name restoration as the managed one
    # a server behind an https path prefix
    (https_server, _) = yaml.safe_load(external_config_text("https://mon.example/rli/"))[
        "scrape_configs"]
    assert (https_server["scheme"], https_server["metrics_path"]) == ("https", "/rli/metrics")
    # docs/server.md shows exactly this block for its example address
    readme = (Path(__file__).resolve().parents[1] / "docs" / "server.md").read_text()
    assert external_config_text("http://10.0.0.5:18080") in readme
    # the CLI prints exactly this text
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["server", "prometheus-config", "--server-url",
                         "http://10.0.0.5:18080", "--refresh-interval", "15s"]) == 0
    assert out.getvalue() == text
