"""Tempo, Grafana and a current Prometheus cannot run here, so what they accept is pinned as
data, read from their sources (tests/upstream_keys/*.json, each naming its tag, commit and
files in `_source`): every key and flag RL-Insight generates must be among them. Tempo and
Prometheus parse their YAML strictly, so an unknown key there stops the service.

- Tempo v2.6.1 config structs (cmd/tempo/app/config.go and the modules' Config types);
- Prometheus v2.54.1 and v2.42.0: cmd/prometheus/main.go flags, config/config.go keys;
- Grafana 13 conf/defaults.ini, provisioning types and built-in panel types (read from
  the newest sources stored before 13.2; see each file's `_source`);
- Alertmanager v0.27.0 config structs and flags (Alertmanager also parses strictly), and
  Prometheus' alerting config and rule-file keys at v2.54.1 and v2.42.0.
"""

from __future__ import annotations

import configparser
import json
from pathlib import Path

import pytest
import yaml

from dashboards import build
from rl_insight import config
from rl_insight.server.analyses import alert_rules
from rl_insight.server.services import SERVICES
from rl_insight.server.services.prometheus import TEXT_FIRST

KEYS = Path(__file__).parent / "upstream_keys"


def pinned(name: str) -> dict:
    return json.loads((KEYS / name).read_text())


@pytest.fixture
def settings(tmp_path):
    return config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})


def unknown_keys(value, tree, path: str = "") -> list[str]:
    """Paths in ``value`` the pinned struct tree does not have. A tree leaf is a Go type
    (anything goes below it), "*" a free-form map, a one-element list a list of structs."""
    if tree == "*" or isinstance(tree, str):
        return []
    if isinstance(tree, list):
        return [p for i, v in enumerate(value) for p in unknown_keys(v, tree[0],
                                                                     f"{path}[{i}]")]
    out = []
    for key, v in value.items():
        if key not in tree:
            out.append(f"{path}.{key}".lstrip("."))
        else:
            out += unknown_keys(v, tree[key], f"{path}.{key}")
    return out


def test_every_generated_tempo_key_is_in_tempo_2_6_1(settings):
    tree = {k: v for k, v in pinned("tempo-v2.6.1.json").items() if not k.startswith("_")}
    for generator in (True, False):
        rendered = SERVICES["tempo"].render(
            config.with_values(settings, {"tempo.metrics_generator": generator}))
        assert unknown_keys(rendered, tree) == []
    assert unknown_keys({"server": {"http_listen_adress": "x"}}, tree) == [
        "server.http_listen_adress"]  # the check can fail


@pytest.mark.parametrize("version", ["2.54.1", "2.42.0"])
@pytest.mark.integration  # starts a process
def test_every_prometheus_key_and_flag_is_in_that_version(settings, version, tmp_path):
    sections = pinned(f"prometheus-v{version}-config.json")["sections"]

    def keys(title_start: str) -> set[str]:
        return set(next(v for k, v in sections.items() if k.startswith(title_start))["keys"])

    rendered = SERVICES["prometheus"].render(settings, version)
    assert set(rendered) <= keys("Config (top level)")
    assert set(rendered["global"]) <= keys("GlobalConfig")
    if "scrape_protocols" in rendered["global"]:
        valid = next(v for k, v in sections.items() if k.startswith("GlobalConfig"))
        assert set(rendered["global"]["scrape_protocols"]) <= set(
            valid["scrape_protocols_valid_values"])
        assert rendered["global"]["scrape_protocols"] == TEXT_FIRST
    for scrape in rendered["scrape_configs"]:
        assert set(scrape) <= keys("ScrapeConfig"), scrape
        assert set(scrape.get("basic_auth", {})) <= keys("BasicAuth"), scrape
        assert set(scrape.get("authorization", {})) <= keys("Authorization"), scrape
        for item in scrape.get("static_configs", []):
            assert set(item) <= keys("static_configs")
        for item in scrape.get("file_sd_configs", []):
            assert set(item) <= keys("file_sd_configs")
        for rule in scrape.get("metric_relabel_configs", []):
            assert set(rule) <= keys("relabel.Config"), rule
            relabel = next(v for k, v in sections.items() if k.startswith("relabel.Config"))
            assert rule.get("action", "replace") in relabel["actions"]

    alerting = pinned("prometheus-alerting.json")["versions"][version]
    with_am = SERVICES["prometheus"].render(settings, version, alertmanager=True)
    assert set(with_am["alerting"]) <= set(alerting["AlertingConfig (alerting:)"])
    for am in with_am["alerting"]["alertmanagers"]:
        # HTTPClientConfig is inlined (prometheus/common): basic_auth beyond loopback
        assert set(am) <= set(alerting["AlertmanagerConfig (alerting.alertmanagers[])"]) | \
            keys("HTTPClientConfig"), am
        assert set(am.get("basic_auth", {})) <= keys("BasicAuth"), am
        assert am["api_version"] in alerting["alertmanager_api_versions"]
        for item in am["static_configs"]:
            assert set(item) <= keys("static_configs")
    rules = alert_rules.render(settings)
    assert set(rules) <= set(alerting["RuleGroups (rule file top level)"])
    for group in rules["groups"]:
        assert set(group) <= set(alerting["RuleGroup (groups[])"])
        for rule in group["rules"]:
            assert set(rule) <= set(alerting["RuleNode (groups[].rules[])"]), rule

    flags = set(pinned(f"prometheus-v{version}-flags.json")["flags"])
    launch = SERVICES["prometheus"].launch(settings, Path("/usr/bin/prometheus"))
    used = {a[2:].split("=", 1)[0] for a in launch.argv[1:]}
    assert used <= flags, used - flags


def test_every_alertmanager_key_and_flag_is_in_alertmanager_0_27_0(settings):
    pin = pinned("alertmanager-v0.27.0-config.json")
    sections = pin["sections"]

    def keys(title_start: str) -> set[str]:
        return set(next(v for k, v in sections.items() if k.startswith(title_start)))

    for key, value in (("webhook_urls", "http://127.0.0.1:9/a,http://127.0.0.1:9/b"),
                       ("slack_api_url", "https://hooks.slack.com/services/T/B/x"),
                       ("slack_channel", "#rl"), ("email_to", "team@example.com"),
                       ("email_from", "rl@example.com"),
                       ("smtp_smarthost", "smtp.example.com:587"),
                       ("smtp_auth_username", "rl"), ("smtp_auth_password", "pw")):
        settings = config.with_values(settings, {f"alertmanager.{key}": value})
    rendered = SERVICES["alertmanager"].render(settings)
    assert set(rendered) <= keys("Config (top level)")
    assert set(rendered["route"]) <= keys("Route")
    for receiver in rendered["receivers"]:
        assert set(receiver) <= keys("Receiver"), receiver
        for kind, title in (("webhook_configs", "WebhookConfig"),
                            ("slack_configs", "SlackConfig"), ("email_configs", "EmailConfig")):
            assert receiver[kind], kind  # every receiver kind is checked here
            for item in receiver[kind]:
                assert set(item) <= keys(title), (kind, item)

    launch = SERVICES["alertmanager"].launch(settings, Path("/usr/bin/alertmanager"))
    used = {a[2:].split("=", 1)[0] for a in launch.argv[1:]}
    assert used <= set(pin["flags"]), used - set(pin["flags"])
    assert launch.ready_url.endswith(pin["ready_path"])


def test_every_grafana_ini_key_and_provisioning_field_is_in_grafana_13(settings, tmp_path):
    sections = pinned("grafana-v13-ini.json")["sections"]
    home = tmp_path / "grafana-13.0.0"
    (home / "bin").mkdir(parents=True)
    (home / "conf").mkdir()
    (home / "conf" / "defaults.ini").write_text("")
    launch = SERVICES["grafana"].launch(settings, home / "bin" / "grafana")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(launch.argv[launch.argv.index("--config") + 1])
    for section in ini.sections():
        assert section in sections, section
        assert set(ini[section]) <= set(sections[section]), (section, set(ini[section]))
    assert ini["plugins"]["preinstall_disabled"] == "true"

    prov_fields = pinned("grafana-v13-provisioning.json")
    prov = Path(ini["paths"]["provisioning"])
    ds = yaml.safe_load((prov / "datasources" / "rl-insight.yaml").read_text())
    assert set(ds) <= set(prov_fields["datasources"]["top_level_v1"])
    for d in ds["datasources"]:
        assert set(d) <= set(prov_fields["datasources"]["datasources_item_v1"]), d
    dash = yaml.safe_load((prov / "dashboards" / "rl-insight.yaml").read_text())
    assert set(dash) <= set(prov_fields["dashboards"]["top_level_v1"])
    for p in dash["providers"]:
        assert set(p) <= set(prov_fields["dashboards"]["providers_item_v1"]), p
        assert set(p["options"]) <= {"path", "foldersFromFilesStructure"}


def test_every_panel_type_ships_with_grafana_13_and_every_datasource_is_provisioned(
        settings):
    core = set(pinned("grafana-v13-panels.json")["core_panels"]["ids"]) | {"row"}
    uids = {d["uid"] for d in SERVICES["grafana"].render_datasources(settings)["datasources"]}
    for name, text in build.render_all().items():
        for panel in json.loads(text)["panels"]:
            assert panel["type"] in core, (name, panel["type"])
            if panel["type"] == "row":
                continue
            refs = [panel["datasource"]] + [t["datasource"] for t in panel["targets"]]
            assert {r["uid"] for r in refs} <= uids, (name, panel["title"])


@pytest.mark.parametrize("version", ["2.54.1", "2.42.0"])
def test_remote_write_and_the_external_scrape_configs_are_in_that_version(settings, version):
    """remote_write with basic auth or a bearer token, both by *_file, and the jobs a
    Prometheus of one's own adds (http_sd), key by key against that version's structs."""
    from rl_insight.server.services.prometheus import external_scrape_configs

    sections = pinned(f"prometheus-v{version}-config.json")["sections"]

    def keys(title_start: str) -> set[str]:
        return set(next(v for k, v in sections.items() if k.startswith(title_start))["keys"])

    settings = config.with_values(settings, {
        "prometheus.remote_write_urls": "http://10.0.0.9:8428/api/v1/write,https://x/w"})
    auth_kinds = {}
    for auth in ({"remote_write_username": "rl", "remote_write_password": "pw"},
                 {"remote_write_bearer_token": "tok"}):
        settings = config.with_values(settings, {
            f"prometheus.{key}": auth.get(key, "") for key in (
                "remote_write_username", "remote_write_password",
                "remote_write_bearer_token")})
        rendered = SERVICES["prometheus"].render(settings, version)
        assert "remote_write" in keys("Config (top level)")
        assert len(rendered["remote_write"]) == 2
        for rw in rendered["remote_write"]:
            assert set(rw) <= keys("RemoteWriteConfig"), rw
            for kind, title in (("basic_auth", "BasicAuth"),
                                ("authorization", "Authorization")):
                if kind in rw:
                    assert set(rw[kind]) <= keys(title), rw[kind]
                    auth_kinds[kind] = rw[kind]
    assert auth_kinds["basic_auth"]["password_file"] and auth_kinds["authorization"][
        "credentials_file"]  # both kinds were checked, each by file
    assert not ({"password", "credentials"} & (set(auth_kinds["basic_auth"])
                                               | set(auth_kinds["authorization"])))

    for scrape in external_scrape_configs("https://10.0.0.5:18080/rli/", "2s"):
        assert set(scrape) <= keys("ScrapeConfig"), scrape
        for item in scrape.get("static_configs", []):
            assert set(item) <= keys("static_configs")
        for item in scrape.get("http_sd_configs", []):
            assert set(item) <= keys("http_sd_configs"), item
        for rule in scrape.get("metric_relabel_configs", []):
            assert set(rule) <= keys("relabel.Config"), rule
    # the checks can fail: a misspelt key, and one this version may not have
    assert not {"url", "queue_confg"} <= keys("RemoteWriteConfig")
    assert ("username_file" in keys("BasicAuth")) == (version == "2.54.1")
