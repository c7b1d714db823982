"""`rl-insight server install`: put Prometheus, Tempo and Grafana under
``$RL_INSIGHT_HOME/services``, from upstream, a local folder of archives, or the host.

Every install goes to a temporary folder first and is moved into place with one rename,
so a failure at any point leaves nothing half-installed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import requests

from rl_insight.config import Settings
from rl_insight.server.services import SERVICES, binaries
from rl_insight.server.services.base import Service, machine_arch, version_at_least

Say = Callable[[str], None]


class InstallError(RuntimeError):
    """An install that cannot go on; the message says what to do next."""


@dataclass
class Result:
    service: str
    status: str  # installed | already installed | host binary | failed
    detail: str


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_checksums(text: str, archive: str, style: str) -> str | None:
    """The digest for ``archive`` from a checksum file, or None when it is not listed."""
    if style == "single":
        words = text.split()
        return words[0].lower() if words else None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].lstrip("*") == archive:
            return parts[0].lower()
    return None


def _download(url: str, dest: Path, timeout: float, progress: bool) -> None:
    """Stream ``url`` to ``dest`` with a progress bar."""
    from tqdm import tqdm

    with requests.get(url, stream=True, timeout=timeout) as r:
        r.raise_for_status()
        total = int(r.headers.get("content-length") or 0) or None
        with open(dest, "wb") as f, tqdm(total=total, unit="B", unit_scale=True,
                                          unit_divisor=1024, desc=dest.name,
                                          disable=not progress, leave=True) as bar:
            for chunk in r.iter_content(chunk_size=1 << 16):
                f.write(chunk)
                bar.update(len(chunk))


def _why(exc: BaseException, url: str) -> str:
    """A short reason for a failed download, without urllib3's nested reprs."""
    host = url.split("://", 1)[-1].split("/", 1)[0]
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, requests.Timeout):
        return f"no answer from {host} in time"
    if isinstance(exc, requests.ConnectionError):
        return f"cannot connect to {host}"
    return f"{exc.__class__.__name__}: {exc}"


def _fetch_text(url: str, timeout: float) -> str | None:
    try:
        r = requests.get(url, timeout=timeout)
    except requests.RequestException:
        return None
    return r.text if r.status_code == 200 else None


def _extract(archive: Path, into: Path) -> Path:
    """Extract safely; return the archive's root (its single top folder, if any)."""
    into.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()  # reads to the end: a truncated file fails here
            if hasattr(tarfile, "data_filter"):
                tar.extractall(into, members=members, filter="data")
            else:  # Python without extraction filters: refuse unsafe names ourselves
                for m in members:
                    if m.name.startswith("/") or ".." in Path(m.name).parts:
                        raise InstallError(f"{archive.name}: unsafe path {m.name!r}")
                tar.extractall(into, members=members)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise InstallError(f"{archive.name} is corrupt or truncated ({exc}); "
                           "download it again") from None
    entries = [p for p in into.iterdir()]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return into


def _find_binary(root: Path, service: Service) -> Path | None:
    for name in service.binary_names:
        for candidate in (root / name, root / "bin" / name):
            if candidate.is_file():
                return candidate
    return None


class Installer:
    """Installs the services named; reports through ``say`` so the CLI shows progress."""

    def __init__(self, settings: Settings, *, local_archive: Path | None = None,
                 install_dir: Path | None = None, force: bool = False,
                 progress: bool = True, say: Say = print,
                 expected_sha256: str = "") -> None:
        self.settings = settings
        self.expected_sha256 = expected_sha256
        self.local_archive = local_archive
        self.install_dir = install_dir or settings.services_dir
        self.force = force
        self.progress = progress
        self.say = say
        self.arch = machine_arch()

    def install(self, names: Iterable[str] | None = None) -> list[Result]:
        """Install each service in turn; one failure does not stop the others."""
        chosen = list(names) if names else list(SERVICES)
        results = []
        for name in chosen:
            if name not in SERVICES:
                raise InstallError(f"unknown service {name!r}; choose from "
                                   f"{', '.join(SERVICES)}")
            try:
                results.append(self._install_one(SERVICES[name]))
            except InstallError as exc:
                self.say(f"{name}: FAILED: {exc}")
                results.append(Result(name, "failed", str(exc)))
        return results

    # -- one service -------------------------------------------------------------------
    def _install_one(self, service: Service) -> Result:
        section = service.section(self.settings)
        version = section.version
        archive = service.upstream.archive_name(version, self.arch)
        url = service.upstream.archive_url(version, self.arch, self.settings.install.mirror)
        manifest = binaries.read_manifest(self.settings)
        entry = manifest["services"].get(service.name)

        if not self.force and entry and entry.get("source") != "host":
            path = Path(entry.get("path", ""))
            if (entry.get("version") == version and path.is_file()
                    and binaries.probe_version(path)):
                self.say(f"{service.name}: {version} already installed at {path}")
                return Result(service.name, "already installed", str(path))

        local = self._local_file(service, version, archive)
        if local is not None and local.is_file() and local.name != archive:
            archive = local.name  # upstream's other name for it
        if local is None or not local.is_file():
            host = self._host_binary(service)
            if host and not self.force:
                self._record(manifest, service, {
                    "version": host.version, "path": str(host.path), "source": "host",
                    "origin": str(host.path), "binary_version": host.version})
                self.say(f"{service.name}: using {host.path} (version {host.version}) "
                         "already on this host; nothing to download")
                return Result(service.name, "host binary", str(host.path))
            if local is not None:
                raise InstallError(f"{local} is missing; put the upstream file {archive} "
                                   f"there (from {url})")

        staging_parent = self.install_dir
        staging_parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=staging_parent,
                                         prefix=f".install-{service.name}-") as tmp:
            tmp_path = Path(tmp)
            if local is not None:
                src, origin = local, str(local)
                self.say(f"{service.name}: using local archive {local}")
            else:
                src, origin = tmp_path / archive, url
                self.say(f"{service.name}: downloading {url}")
                try:
                    _download(url, src, self.settings.install.timeout_s, self.progress)
                except (requests.RequestException, OSError) as exc:
                    raise InstallError(
                        f"download of {url} failed ({_why(exc, url)}). "
                        f"On a machine without internet, fetch {archive} elsewhere and run "
                        "`rl-insight server install --local-archive DIR`") from None
            digest = sha256_of(src)
            verified = self._verify(service, version, archive, digest)
            root = _extract(src, tmp_path / "extract")
            binary = _find_binary(root, service)
            if binary is None:
                raise InstallError(f"{archive} holds no {'/'.join(service.binary_names)} "
                                   "binary; is it the upstream linux archive?")
            binary.chmod(binary.stat().st_mode | 0o111)
            found_version = binaries.probe_version(binary)
            if found_version is None:
                raise InstallError(f"{binary.name} from {archive} does not run on this "
                                   f"machine ({self.arch}); use the archive for this CPU")
            if not version_at_least(found_version, section.min_version):
                raise InstallError(f"{binary.name} from {archive} is {found_version}, older "
                                   f"than the minimum {section.min_version}")
            final = self.install_dir / service.name / version
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                trash = tmp_path / "replaced"
                final.rename(trash)  # removed with the temporary folder
            root.rename(final)  # the one step that makes the install visible
        installed = final / binary.relative_to(root)
        self._record(manifest, service, {
            "version": version, "binary_version": found_version, "path": str(installed),
            "home": str(final), "source": "local-archive" if local else "download",
            "origin": origin, "sha256": digest, "checksum_verified": verified})
        self.say(f"{service.name}: installed {version} at {final}")
        return Result(service.name, "installed", str(installed))

    def _host_binary(self, service: Service) -> binaries.Found | None:
        """A usable binary on PATH or at the configured path, ignoring our own installs."""
        lookup = binaries.locate(service, self.settings)
        if lookup.found and lookup.found.source in ("host", "configured"):
            return lookup.found
        return None

    def _local_file(self, service: Service, version: str, archive: str) -> Path | None:
        """The archive in --local-archive under any of its upstream names (the expected
        path when none is there, for the message)."""
        if self.local_archive is None:
            return None
        for pattern in service.upstream.local_names(version, self.arch):
            found = sorted(self.local_archive.glob(pattern))
            if found:
                return found[-1]
        return self.local_archive / archive

    def _published_digest(self, service: Service, version: str, archive: str
                          ) -> tuple[str | None, str]:
        """Upstream's digest for ``archive`` and where it was read."""
        up = service.upstream
        if self.local_archive is None:
            url = up.checksums_url(version, self.arch, self.settings.install.mirror)
            text = _fetch_text(url, self.settings.install.timeout_s)
            return (parse_checksums(text, archive, up.checksum_style) if text else None), url
        listed = self.local_archive / up.checksums_url(version, self.arch).rsplit("/", 1)[-1]
        beside = self.local_archive / f"{archive}.sha256"
        for sums, style in ((beside, "single"), (listed, up.checksum_style)):
            if sums.is_file():
                digest = parse_checksums(sums.read_text(), archive, style)
                if digest:
                    return digest, str(sums)
        return None, ""

    def _verify(self, service: Service, version: str, archive: str, digest: str) -> bool:
        """Check the digest where upstream publishes one (or the one the user read on the
        download page, --sha256); a mismatch is fatal."""
        if self.expected_sha256:
            expected, source = self.expected_sha256.lower(), "--sha256"
        else:
            expected, source = self._published_digest(service, version, archive)
        if expected is None:
            self.say(f"{service.name}: no published checksum found for {archive}; "
                     "the archive is checked for integrity only")
            return False
        if expected != digest:
            raise InstallError(
                f"{archive}: the file's sha256 is {digest}, but {source} says {expected}. "
                "The file is damaged or not upstream's, or upstream re-uploaded the "
                "release: compare both with the digest on the project's download page, "
                "fetch the file again, or, if the page shows the file's digest, run again "
                f"with --sha256 {digest}")
        self.say(f"{service.name}: sha256 verified ({source})")
        return True

    def _record(self, manifest: dict, service: Service, entry: dict) -> None:
        entry["installed_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds")
        manifest["services"][service.name] = entry
        binaries.write_manifest(self.settings, manifest)
