"""`rl-insight server install`: local archives, host binaries, downloads, failures."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest

from rl_insight import config
from rl_insight.server.services import binaries
from rl_insight.server.services.base import machine_arch
from rl_insight.server.services.installer import Installer, parse_checksums
from tests import archives

ARCH = machine_arch()
NAMES = ("prometheus", "tempo", "grafana", "alertmanager")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("upstream")
    archives.build(d, ARCH)
    return d


@pytest.fixture
def archive_dir(upstream: Path, tmp_path: Path) -> Path:
    """A private copy the test may damage."""
    d = tmp_path / "archives"
    shutil.copytree(upstream, d)
    return d


def leftovers(services_dir: Path) -> list[str]:
    """Anything but the manifest and finished installs: temp folders, partial files."""
    if not services_dir.exists():
        return []
    return sorted(p.name for p in services_dir.iterdir() if p.name.startswith("."))


def manifest(home: Path) -> dict:
    return json.loads((home / "services" / "manifest.json").read_text())["services"]


@pytest.mark.integration  # starts a process
def test_local_archive_install_writes_manifest_and_is_idempotent(cli, home, archive_dir):
    r = cli.run("server", "install", "--local-archive", str(archive_dir), "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    m = manifest(home)
    assert set(m) == set(NAMES)
    prom = m["prometheus"]
    assert prom["source"] == "local-archive" and prom["version"] == "2.54.1"
    assert prom["binary_version"] == "2.42.0"  # the real Debian binary inside
    assert prom["checksum_verified"] is True
    prom_archive = archive_dir / f"prometheus-2.54.1.linux-{ARCH}.tar.gz"
    assert prom["sha256"] == archives.sha256(prom_archive)
    for name in NAMES:
        assert Path(m[name]["path"]).is_file()
        assert Path(m[name]["path"]).is_relative_to(home / "services" / name)
        assert m[name]["origin"].startswith(str(archive_dir))
    assert (home / "services" / "prometheus" / "2.54.1" / "promtool").is_file()
    assert (home / "services" / "grafana" / "13.0.0" / "conf" / "defaults.ini").is_file()
    am = m["alertmanager"]  # the binary beside amtool in promu's layout; one checksum file
    assert am["version"] == "0.27.0" and Path(am["path"]).name == "alertmanager"
    assert am["checksum_verified"] is True
    assert (home / "services" / "alertmanager" / "0.27.0" / "amtool").is_file()
    assert leftovers(home / "services") == []

    before = (home / "services" / "manifest.json").read_text()
    again = cli.run("server", "install", "--local-archive", str(archive_dir), "--no-progress")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already installed") == len(NAMES)
    assert (home / "services" / "manifest.json").read_text() == before

    # The installed (not the host's) Prometheus is what start would run.
    s = config.load()
    found = binaries.locate(binaries_service("prometheus"), s).found
    assert found.source == "installed" and str(found.path) == m["prometheus"]["path"]


def binaries_service(name):
    from rl_insight.server.services import SERVICES
    return SERVICES[name]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
@pytest.mark.integration  # starts a process
def test_corrupt_archive_is_rejected_and_leaves_nothing(cli, home, archive_dir, damage):
    target = archive_dir / f"tempo_2.6.1_linux_{ARCH}.tar.gz"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x1f\x8bnot" * 50)
    (archive_dir / "SHA256SUMS").unlink()  # so the tar integrity check is what catches it
    r = cli.run("server", "install", "tempo", "--local-archive", str(archive_dir))
    assert r.returncode != 0
    assert "corrupt or truncated" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert not (home / "services" / "tempo").exists()
    assert leftovers(home / "services") == []
    assert "tempo" not in (manifest(home) if (home / "services/manifest.json").exists() else {})


@pytest.mark.integration  # starts a process
def test_checksum_mismatch_is_rejected(cli, home, archive_dir):
    sums = archive_dir / f"grafana-13.0.0.linux-{ARCH}.tar.gz.sha256"
    sums.write_text("ab" * 32 + "\n")
    r = cli.run("server", "install", "grafana", "--local-archive", str(archive_dir))
    assert r.returncode != 0
    digest = archives.sha256(archive_dir / f"grafana-13.0.0.linux-{ARCH}.tar.gz")
    # both digests named, and what to do about a re-upload
    assert f"the file's sha256 is {digest}" in r.stdout and "ab" * 32 in r.stdout
    assert f"--sha256 {digest}" in r.stdout
    assert not (home / "services" / "grafana").exists() and leftovers(home / "services") == []
    # the digest read on the download page wins over a stale checksum file
    r = cli.run("server", "install", "grafana", "--local-archive", str(archive_dir),
                "--sha256", digest)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sha256 verified (--sha256)" in r.stdout
    assert manifest(home)["grafana"]["checksum_verified"] is True


@pytest.mark.integration  # starts a process
def test_grafana_archive_under_the_download_pages_name(cli, home, archive_dir):
    """grafana.com names 13.x archives grafana_<v>_<build>_linux_<arch>.tar.gz; the same
    file with its .sha256 beside it installs from --local-archive."""
    legacy = archive_dir / f"grafana-13.0.0.linux-{ARCH}.tar.gz"
    new = archive_dir / f"grafana_13.0.0_24384745231_linux_{ARCH}.tar.gz"
    legacy.rename(new)
    (archive_dir / f"{legacy.name}.sha256").unlink()
    (archive_dir / f"{new.name}.sha256").write_text(archives.sha256(new) + "\n")
    r = cli.run("server", "install", "grafana", "--local-archive", str(archive_dir),
                "--no-progress")
    assert r.returncode == 0, r.stdout + r.stderr
    entry = manifest(home)["grafana"]
    assert entry["origin"] == str(new) and entry["checksum_verified"] is True
    # a damaged one under that name is refused like any other
    new.write_bytes(new.read_bytes()[:-10])
    r = cli.run("server", "install", "grafana", "--force", "--local-archive",
                str(archive_dir), "--no-progress")
    assert r.returncode != 0 and new.name in r.stdout


@pytest.mark.integration  # starts a process
def test_missing_local_archive_names_file_and_url(cli, home, archive_dir, monkeypatch):
    (archive_dir / f"tempo_2.6.1_linux_{ARCH}.tar.gz").unlink()
    cli.env["PATH"] = "/nonexistent"  # no tempo on PATH either
    r = cli.run("server", "install", "tempo", "--local-archive", str(archive_dir))
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert f"tempo_2.6.1_linux_{ARCH}.tar.gz" in out
    url = "https://github.com/grafana/tempo/releases/download/v2.6.1/"
    assert f"{url}tempo_2.6.1_linux_{ARCH}.tar.gz" in out


@pytest.mark.integration  # starts a process
def test_host_prometheus_is_accepted_without_download(cli, home):
    r = cli.run("server", "install", "prometheus")
    assert r.returncode == 0, r.stdout + r.stderr
    entry = manifest(home)["prometheus"]
    assert entry["source"] == "host"
    assert entry["path"] == str(archives.PROMETHEUS_BIN)
    assert entry["version"].startswith("2.42")
    assert not (home / "services" / "prometheus").exists()


@pytest.mark.integration  # starts a process
def test_binary_older_than_minimum_is_passed_over(home, tmp_path):
    old = tmp_path / "prometheus"
    old.write_bytes(archives.fake_binary("prometheus, version 2.30.0 (branch: HEAD)"))
    old.chmod(0o755)
    s = config.load(overrides=[f"prometheus.binary={old}"])
    lookup = binaries.locate(binaries_service("prometheus"), s)
    assert lookup.found is None
    assert "older than the minimum 2.42.0" in lookup.passed_over[0]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


@pytest.fixture
def mirror(archive_dir):
    """A real HTTP server on loopback laid out like the upstream download paths."""
    root = archive_dir.parent / "mirror"
    layout = {
        f"prometheus-2.54.1.linux-{ARCH}.tar.gz": "prometheus/prometheus/releases/download/v2.54.1",
        "sha256sums.txt": "prometheus/prometheus/releases/download/v2.54.1",
        f"tempo_2.6.1_linux_{ARCH}.tar.gz": "grafana/tempo/releases/download/v2.6.1",
    }
    for name, sub in layout.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(archive_dir / name, root / sub / name)
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.integration  # starts a process
def test_download_with_checksum_through_a_mirror(home, mirror):
    lines: list[str] = []
    s = config.load(overrides=[f"install.mirror={mirror}"])
    results = Installer(s, force=True, progress=False, say=lines.append).install(
        ["prometheus", "tempo"])
    assert [r.status for r in results] == ["installed", "installed"], lines
    m = manifest(home)
    assert m["prometheus"]["source"] == "download"
    assert m["prometheus"]["origin"] == (
        f"{mirror}/prometheus/prometheus/releases/download/v2.54.1/"
        f"prometheus-2.54.1.linux-{ARCH}.tar.gz")
    assert m["prometheus"]["checksum_verified"] is True
    assert m["tempo"]["checksum_verified"] is False  # the mirror has no SHA256SUMS
    assert any("no published checksum" in ln for ln in lines)


@pytest.mark.integration  # starts a process
def test_failed_download_names_url_and_local_archive(cli, home, mirror):
    cli.env["PATH"] = "/nonexistent"
    r = cli.run("server", "install", "grafana", "--set", f"install.mirror={mirror}")
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert f"{mirror}/oss/release/grafana-13.0.0.linux-{ARCH}.tar.gz" in out
    assert "HTTP 404" in out and "--local-archive" in out
    assert "Traceback" not in out
    assert not (home / "services" / "grafana").exists() and leftovers(home / "services") == []


def test_parse_checksums_formats():
    assert parse_checksums("aa  x.tar.gz\nbb  y.tar.gz\n", "y.tar.gz", "list") == "bb"
    assert parse_checksums("cc *x.tar.gz\n", "x.tar.gz", "list") == "cc"
    assert parse_checksums("dd\n", "x.tar.gz", "single") == "dd"
    assert parse_checksums("aa  x.tar.gz\n", "z.tar.gz", "list") is None
