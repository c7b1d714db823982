"""Bring your own Grafana: `rl-insight dashboards install` against a FAKE of Grafana's
folder and dashboard API (tests/fakes/grafana_api.py, on loopback; Grafana cannot run
here) and `rl-insight dashboards export`. The folder is made once, every shipped dashboard
lands in it with its uid, data sources are mapped everywhere, errors name the fix, and
the token travels only in the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import requests

from dashboards import build
from rl_insight.commands import main as cli
from rl_insight.common import netaddr
from rl_insight.grafana import install as dash
from rl_insight.grafana.mapping import map_datasources, referenced
from rl_insight.server.services import grafana as managed
from tests.conftest import Cli
from tests.fakes.grafana_api import FakeGrafanaAPI

TOKEN = "glsa_FAKEeditorToken0123456789_abcdef01"
VIEWER = "glsa_FAKEviewerToken0123456789_abcdef02"
SHIPPED = dash.shipped()
MAPPING = {"prometheus": "prom-a", "tempo": "tempo-b"}
CREDENTIAL_VARS = ("GRAFANA_TOKEN", "RL_INSIGHT_GRAFANA_TOKEN", "GRAFANA_USER",
                   "GRAFANA_PASSWORD")


@pytest.fixture
def grafana():
    g = FakeGrafanaAPI(tokens={TOKEN: "Editor", VIEWER: "Viewer"},
                       users={"admin": "FAKE-admin-pw"},
                       datasources=[{"id": 1, "uid": "prom-a", "name": "Mimir",
                                     "type": "prometheus"},
                                    {"id": 2, "uid": "tempo-b", "name": "Traces",
                                     "type": "tempo"}]).start()
    yield g
    g.release.set()
    g.stop()


@pytest.fixture
def env(monkeypatch):
    """The credentials the test names, and none from the surrounding environment."""
    for name in CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)

    def put(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
    return put


def install(grafana: FakeGrafanaAPI, capsys, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["dashboards", "install", "--grafana-url", grafana.url, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def posts(grafana: FakeGrafanaAPI, path: str) -> list[dict]:
    return [r for r in grafana.requests if r["method"] == "POST" and r["path"] == path]


def test_install_makes_the_folder_once_and_every_dashboard_lands_in_it(grafana, env,
                                                                       capsys):
    env(GRAFANA_TOKEN=TOKEN)
    code, out, err = install(grafana, capsys)
    assert code == 0, out + err
    assert list(grafana.folders) == ["rl-insight"]
    assert grafana.folders["rl-insight"]["title"] == "RL-Insight"
    assert set(grafana.dashboards) == set(SHIPPED) and len(SHIPPED) >= 16
    for uid, stored in grafana.dashboards.items():
        assert stored["folderUid"] == "rl-insight", uid
        assert stored["version"] == 1
        assert stored["dashboard"]["title"] == SHIPPED[uid]["title"]
    for i, uid in enumerate(SHIPPED, 1):  # progress: one line per dashboard
        assert f"[{i:>2}/{len(SHIPPED)}] {uid}" in out
    assert out.count(" created (version 1)") == len(SHIPPED)
    assert f"{grafana.url}/d/rl-insight-training/" in out
    assert "folder 'RL-Insight' created (uid rl-insight)" in out

    code, out, err = install(grafana, capsys)  # again: the same folder, new versions
    assert code == 0, out + err
    assert len(posts(grafana, "/api/folders")) == 1
    assert list(grafana.folders) == ["rl-insight"]
    assert {d["version"] for d in grafana.dashboards.values()} == {2}
    assert out.count(" updated (version 2)") == len(SHIPPED)
    assert f"{len(SHIPPED)} dashboards in folder 'RL-Insight': {len(SHIPPED)} updated" in out
    code, out, _ = install(grafana, capsys, "--overwrite")
    assert code == 0 and {d["version"] for d in grafana.dashboards.values()} == {3}


def test_no_overwrite_keeps_what_is_there(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    assert install(grafana, capsys)[0] == 0
    before = json.dumps(grafana.dashboards, sort_keys=True)
    code, out, err = install(grafana, capsys, "--no-overwrite")
    assert code == 0, out + err
    assert out.count("kept: already in Grafana (--overwrite replaces it)") == len(SHIPPED)
    assert json.dumps(grafana.dashboards, sort_keys=True) == before  # Grafana said 412
    assert f"{len(SHIPPED)} kept" in out


def test_datasource_uids_are_mapped_everywhere(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    code, out, err = install(grafana, capsys, "--datasource", "prometheus=prom-a",
                             "--datasource", "tempo=tempo-b")
    assert code == 0, out + err
    assert "warning" not in err  # both mapped uids exist in this Grafana
    inverse = {v: k for k, v in MAPPING.items()}
    for uid, stored in grafana.dashboards.items():
        model = stored["dashboard"]
        text = json.dumps(model)
        assert '"uid": "prometheus"' not in text and '"uid": "tempo"' not in text, uid
        assert set(referenced(model)) <= set(MAPPING.values())
        shipped_text = json.dumps(SHIPPED[uid])
        assert text.count('"uid": "prom-a"') == shipped_text.count('"uid": "prometheus"')
        assert text.count('"uid": "tempo-b"') == shipped_text.count('"uid": "tempo"')
        for var in model["templating"]["list"]:
            assert var["datasource"] == {"type": "prometheus", "uid": "prom-a"}
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                assert target["datasource"]["uid"] in MAPPING.values()
        # nothing else changed: mapped back, it is the shipped model (Grafana added the
        # id and version it assigns)
        back = map_datasources({k: v for k, v in model.items() if k not in ("id", "version")},
                               inverse)
        assert back == dash.prepare(SHIPPED[uid], {})
    assert any('"uid": "tempo-b"' in json.dumps(d["dashboard"])
               for d in grafana.dashboards.values())


def test_a_missing_datasource_is_a_warning_naming_the_flag(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    code, out, err = install(grafana, capsys, "--datasource", "prometheus=prom-a")
    assert code == 0, out + err  # uploaded anyway: the data source can come later
    assert set(grafana.dashboards) == set(SHIPPED)
    assert "no data source with uid 'tempo'" in err
    assert "--datasource tempo=<uid>" in err and "prom-a" not in err


def test_a_datasource_of_another_type_is_a_warning(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    code, _, err = install(grafana, capsys, "--datasource", "prometheus=tempo-b",
                           "--datasource", "tempo=tempo-b")
    assert code == 0
    assert "'tempo-b' (Traces) is of type 'tempo', the panels expect 'prometheus'" in err


@pytest.mark.parametrize("variable", ["GRAFANA_TOKEN", "RL_INSIGHT_GRAFANA_TOKEN"])
def test_a_wrong_token_exits_1_naming_the_variable(grafana, env, capsys, variable):
    env(**{variable: "glsa_wrong_token_0000"})
    code, out, err = install(grafana, capsys)
    assert code == 1
    assert f"refused the credentials from {variable} (401: Invalid API key)" in err
    assert f"set {variable} to a service-account token" in err
    assert "glsa_wrong_token_0000" not in out + err
    assert grafana.folders == {} and grafana.dashboards == {}


def test_the_rl_insight_variable_wins_over_grafanas(grafana, env, capsys):
    env(RL_INSIGHT_GRAFANA_TOKEN=TOKEN, GRAFANA_TOKEN="glsa_wrong_token_0000")
    assert install(grafana, capsys)[0] == 0
    assert {r["authorization"] for r in grafana.requests if r["path"] != "/api/health"} \
        == {f"Bearer {TOKEN}"}


def test_no_credentials_exit_2_before_any_call(grafana, env, capsys):
    code, _, err = install(grafana, capsys)
    assert code == 2
    assert "GRAFANA_TOKEN" in err and "RL_INSIGHT_GRAFANA_TOKEN" in err
    assert "GRAFANA_USER and GRAFANA_PASSWORD" in err
    assert grafana.requests == []


def test_basic_auth_from_user_and_password(grafana, env, capsys):
    env(GRAFANA_USER="admin", GRAFANA_PASSWORD="FAKE-admin-pw")
    code, out, err = install(grafana, capsys)
    assert code == 0, out + err
    assert set(grafana.dashboards) == set(SHIPPED)
    env(GRAFANA_PASSWORD="wrong")
    code, _, err = install(grafana, capsys)
    assert code == 1 and "GRAFANA_USER/GRAFANA_PASSWORD" in err and "wrong" not in err


def test_a_viewer_token_is_told_which_role_it_needs(grafana, env, capsys):
    env(GRAFANA_TOKEN=VIEWER)
    code, _, err = install(grafana, capsys)
    assert code == 1
    assert "may not create folder 'RL-Insight' (403" in err and "Editor role" in err


def test_a_folder_the_token_cannot_see_is_a_permissions_message(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    grafana.dashboards["rl-insight"] = {"id": 99, "uid": "rl-insight", "version": 1,
                                        "folderUid": "", "dashboard": {"title": "x"}}
    code, _, err = install(grafana, capsys)
    assert code == 1
    assert "uid 'rl-insight' exists but the account cannot read it (409" in err
    assert "View permission" in err and "--folder" in err


def test_an_existing_folder_of_that_title_is_used(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    grafana.create_folder({"uid": "hand-made-1", "title": "RL-Insight"})
    code, out, err = install(grafana, capsys)
    assert code == 0, out + err
    assert posts(grafana, "/api/folders") == []
    assert {d["folderUid"] for d in grafana.dashboards.values()} == {"hand-made-1"}


def test_another_folder_title_gets_its_own_stable_uid(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    assert install(grafana, capsys, "--folder", "Team RL / Monitoring")[0] == 0
    assert install(grafana, capsys, "--folder", "Team RL / Monitoring")[0] == 0
    assert list(grafana.folders) == ["team-rl-monitoring"]
    assert len(posts(grafana, "/api/folders")) == 1


def test_connection_refused_names_the_url_flag(env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    url = f"http://127.0.0.1:{netaddr.free_ports(1)[0]}"
    code = cli.main(["dashboards", "install", "--grafana-url", url])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot reach Grafana at {url} (connection refused)" in err
    assert "--grafana-url" in err


def test_a_url_that_is_not_grafana_says_so(grafana, env, capsys):
    env(GRAFANA_TOKEN=TOKEN)
    code = cli.main(["dashboards", "install", "--grafana-url", grafana.url + "/sub"])
    err = capsys.readouterr().err
    assert code == 1 and "--grafana-url" in err and "Grafana" in err
    code = cli.main(["dashboards", "install", "--grafana-url", "grafana:3000"])
    assert code == 1 and "with its scheme" in capsys.readouterr().err


@pytest.mark.parametrize("flag, says", [
    ("loki=abc", "refer to data sources prometheus, tempo"),
    ("prometheus", "write NAME=UID"),
    ("prometheus=has space", "is not a Grafana uid"),
])
def test_bad_datasource_flags_exit_2(grafana, env, capsys, flag, says):
    env(GRAFANA_TOKEN=TOKEN)
    code, _, err = install(grafana, capsys, "--datasource", flag)
    assert code == 2 and says in err
    assert grafana.requests == []


def test_export_writes_every_dashboard_as_install_uploads_it(grafana, env, capsys,
                                                             tmp_path):
    env(GRAFANA_TOKEN=TOKEN)
    flags = ["--datasource", "prometheus=prom-a", "--datasource", "tempo=tempo-b"]
    assert install(grafana, capsys, *flags)[0] == 0
    uploaded = {r["body"]["dashboard"]["uid"]: r["body"]
                for r in posts(grafana, "/api/dashboards/db")}
    out_dir = tmp_path / "gitops"
    assert cli.main(["dashboards", "export", str(out_dir), *flags]) == 0
    assert f"{len(SHIPPED)} dashboards in {out_dir}" in capsys.readouterr().out
    files = {p.name: p for p in out_dir.iterdir()}
    assert set(files) == {p.name for p in build.HERE.glob("*.json")}  # names as shipped
    for uid, body in uploaded.items():
        assert json.loads(files[f"{uid}.json"].read_text()) == body["dashboard"]
        assert body["folderUid"] == "rl-insight" and body["overwrite"] is True
        assert "id" not in body["dashboard"] and "version" not in body["dashboard"]
    # without a mapping the export is the shipped model, uids prometheus and tempo
    plain = tmp_path / "plain"
    assert cli.main(["dashboards", "export", str(plain)]) == 0
    for uid, model in SHIPPED.items():
        assert json.loads((plain / f"{uid}.json").read_text()) == dash.prepare(model, {})


def test_mapping_is_pure_and_touches_only_datasource_objects():
    model = SHIPPED["rl-insight-training"]
    before = json.dumps(model, sort_keys=True)
    mapped = map_datasources(model, {"prometheus": "x1"})
    assert json.dumps(model, sort_keys=True) == before
    assert mapped["uid"] == "rl-insight-training"
    assert set(referenced(mapped)) == {"x1"}
    assert map_datasources({"uid": "prometheus", "a": {"uid": "prometheus"}},
                           {"prometheus": "x"}) == {"uid": "prometheus",
                                                   "a": {"uid": "prometheus"}}


def test_the_shipped_references_and_folder_are_the_managed_grafanas():
    assert dash.datasources(SHIPPED) == {v["uid"]: v["type"]
                                         for v in build.DATASOURCES.values()}
    assert dash.DEFAULT_FOLDER == managed.FOLDER
    assert dash.folder_uid(dash.DEFAULT_FOLDER) == managed.FOLDER_UID


def test_the_fake_answers_as_grafana_documents(grafana):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = requests.get(grafana.url + "/api/folders/nope", headers=auth, timeout=5)
    assert r.status_code == 404 and r.json() == {"status": "not-found",
                                                 "message": "folder not found"}
    r = requests.post(grafana.url + "/api/dashboards/db", headers=auth, timeout=5,
                      json={"dashboard": {"uid": "a", "title": "A"}, "folderUid": "nope"})
    assert r.status_code == 400 and r.json()["message"] == "folder not found"
    d = {"dashboard": {"uid": "a", "title": "A"}, "overwrite": False}
    first = requests.post(grafana.url + "/api/dashboards/db", headers=auth, json=d,
                          timeout=5).json()
    assert first["version"] == 1 and first["status"] == "success"
    r = requests.post(grafana.url + "/api/dashboards/db", headers=auth, json=d, timeout=5)
    assert r.status_code == 412 and r.json()["status"] == "version-mismatch"
    d["dashboard"]["version"] = 1  # the version Grafana holds: an update, no overwrite
    r = requests.post(grafana.url + "/api/dashboards/db", headers=auth, json=d, timeout=5)
    assert r.status_code == 200 and r.json()["version"] == 2
    r = requests.get(grafana.url + "/api/folders", timeout=5)
    assert r.status_code == 401 and r.json() == {"message": "Unauthorized"}


def test_no_flag_takes_a_secret(capsys):
    with pytest.raises(SystemExit):
        cli.main(["dashboards", "install", "--help"])
    flags = [w for line in capsys.readouterr().out.splitlines()
             for w in line.split() if w.startswith("--")]
    assert "--grafana-url" in flags
    assert not [f for f in flags if "token" in f or "password" in f or "user" in f]


@pytest.mark.integration  # starts a process
def test_the_real_cli_takes_the_token_from_the_environment_only(grafana, tmp_path):
    """`rl-insight dashboards install` as a subprocess: while it talks to Grafana its
    command line holds no token, its environment does, and Grafana got it as Bearer."""
    c = Cli(tmp_path / "home", [])
    for name in CREDENTIAL_VARS:
        c.env.pop(name, None)
    c.env["GRAFANA_TOKEN"] = TOKEN
    grafana.hold_first.set()
    proc = c.popen("dashboards", "install", "--grafana-url", grafana.url,
                   "--datasource", "prometheus=prom-a")
    try:
        assert grafana.held.wait(60), "the CLI never called Grafana's API"
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert all(TOKEN.encode() not in a for a in argv), argv
        assert f"GRAFANA_TOKEN={TOKEN}".encode() in environ
    finally:
        grafana.release.set()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert TOKEN not in out
    assert f"{len(SHIPPED)} dashboards in folder 'RL-Insight': {len(SHIPPED)} created" in out
    seen = {r["authorization"] for r in grafana.requests if r["path"] != "/api/health"}
    assert seen == {f"Bearer {TOKEN}"}
    assert os.environ.get("GRAFANA_TOKEN") != TOKEN  # the test's own process never had it
