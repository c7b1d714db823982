"""Builds release archives in the exact upstream layouts, for install tests.

The Prometheus and Alertmanager archives hold the real Debian binaries (`prometheus`,
`prometheus-alertmanager` renamed as upstream names it). Tempo and Grafana cannot run
here, so their archives hold FAKE stand-ins: shell scripts that print the version line
in the real binaries' format and nothing else.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

PROMETHEUS_BIN = Path(shutil.which("prometheus") or "/usr/bin/prometheus")
ALERTMANAGER_BIN = Path(shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
                        or "/usr/bin/prometheus-alertmanager")


def fake_binary(version_line: str) -> bytes:
    """A FAKE executable standing in for a binary that cannot run on these machines."""
    return (
        "#!/bin/sh\n"
        "# FAKE stand-in built by tests/archives.py; not the upstream program.\n"
        'case "$1" in --version|-v|-version) '
        f"echo '{version_line}'; exit 0;; esac\n"
        "echo 'FAKE binary: it only answers --version' >&2; exit 3\n"
    ).encode()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(info)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(dest: Path, arch: str = "amd64", prometheus_binary: Path = PROMETHEUS_BIN
          ) -> dict[str, Path]:
    """Write the four archives and their checksum files into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}

    # Prometheus: everything under prometheus-<v>.linux-<arch>/ (promu's tarball layout)
    top = f"prometheus-2.54.1.linux-{arch}"
    p = dest / f"{top}.tar.gz"
    with tarfile.open(p, "w:gz", compresslevel=1) as tar:
        _add_dir(tar, top)
        tar.add(str(prometheus_binary), arcname=f"{top}/prometheus")
        _add_bytes(tar, f"{top}/promtool", fake_binary(
            "promtool, version 2.54.1 (branch: HEAD, revision: e6cfa720)"), 0o755)
        _add_bytes(tar, f"{top}/prometheus.yml", b"global:\n  scrape_interval: 15s\n")
        for name in ("LICENSE", "NOTICE"):
            _add_bytes(tar, f"{top}/{name}", b"license text\n")
        for d in ("consoles", "console_libraries"):
            _add_dir(tar, f"{top}/{d}")
    out["prometheus"] = p

    # Alertmanager: promu's layout too, alertmanager-<v>.linux-<arch>/{alertmanager,amtool}
    top = f"alertmanager-0.27.0.linux-{arch}"
    a = dest / f"{top}.tar.gz"
    with tarfile.open(a, "w:gz", compresslevel=1) as tar:
        _add_dir(tar, top)
        if ALERTMANAGER_BIN.is_file():
            tar.add(str(ALERTMANAGER_BIN), arcname=f"{top}/alertmanager")
        else:  # a machine without Debian's package: a FAKE that only prints its version
            _add_bytes(tar, f"{top}/alertmanager", fake_binary(
                "alertmanager, version 0.27.0 (branch: HEAD, revision: 0aa3c2aa)"), 0o755)
        _add_bytes(tar, f"{top}/amtool", fake_binary(
            "amtool, version 0.27.0 (branch: HEAD, revision: 0aa3c2aa)"), 0o755)
        _add_bytes(tar, f"{top}/alertmanager.yml", b"route:\n  receiver: x\n")
        for name in ("LICENSE", "NOTICE"):
            _add_bytes(tar, f"{top}/{name}", b"license text\n")
    out["alertmanager"] = a
    # both projects publish a file named sha256sums.txt: in one folder, their lines
    # together (what the README tells users to do)
    (dest / "sha256sums.txt").write_text(f"{sha256(p)}  {p.name}\n"
                                         f"{'0' * 64}  prometheus-2.54.1.darwin-amd64.tar.gz\n"
                                         f"{sha256(a)}  {a.name}\n")

    # Tempo: goreleaser archive, files at the top level, SHA256SUMS beside it
    t = dest / f"tempo_2.6.1_linux_{arch}.tar.gz"
    with tarfile.open(t, "w:gz") as tar:
        _add_bytes(tar, "tempo", fake_binary(
            "tempo, version 2.6.1 (branch: HEAD, revision: f97027a)"), 0o755)
        for tool in ("tempo-cli", "tempo-query"):
            _add_bytes(tar, tool, fake_binary(f"{tool}, version 2.6.1"), 0o755)
        for name in ("LICENSE", "README.md", "CHANGELOG.md"):
            _add_bytes(tar, name, b"text\n")
    (dest / "SHA256SUMS").write_text(f"{sha256(t)}  {t.name}\n")
    out["tempo"] = t

    # Grafana: one top folder grafana-<v>/ with bin/, conf/, public/; a .sha256 beside it
    top = "grafana-13.0.0"
    g = dest / f"grafana-13.0.0.linux-{arch}.tar.gz"
    with tarfile.open(g, "w:gz") as tar:
        for d in ("", "/bin", "/conf", "/public"):
            _add_dir(tar, top + d)
        _add_bytes(tar, f"{top}/bin/grafana", fake_binary("grafana version 13.0.0"), 0o755)
        _add_bytes(tar, f"{top}/conf/defaults.ini", b"[server]\nhttp_port = 3000\n")
        _add_bytes(tar, f"{top}/VERSION", b"13.0.0\n")
    (dest / f"{g.name}.sha256").write_text(sha256(g) + "\n")
    out["grafana"] = g
    return out
