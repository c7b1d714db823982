"""What every managed service declares: where upstream publishes it, how its binary
reports a version, which ports it takes, and how it is launched from generated config."""

from __future__ import annotations

import logging
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path

from rl_insight.config import Settings

log = logging.getLogger("rl_insight.server")
_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass
class ServiceInfo:
    """What the server knows about a service before and beside supervision."""

    name: str
    enabled: bool
    installed: bool
    version: str = ""
    binary: str = ""
    source: str = ""
    url: str = ""
    message: str = ""



def parse_version(text: str) -> tuple[int, int, int] | None:
    """The first x.y.z in a binary's ``--version`` output."""
    m = _VERSION_RE.search(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def version_at_least(found: str, minimum: str) -> bool:
    have, need = parse_version(found), parse_version(minimum)
    return have is not None and need is not None and have >= need


def machine_arch() -> str:
    """Upstream's name for this CPU: amd64 or arm64."""
    m = platform.machine().lower()
    if m in ("x86_64", "amd64"):
        return "amd64"
    if m in ("aarch64", "arm64"):
        return "arm64"
    raise RuntimeError(f"no upstream release for CPU {m!r}; use binaries built for it "
                       "(set <service>.binary in the config)")


@dataclass(frozen=True)
class Upstream:
    """An upstream release archive; templates take {version}, {arch} and {archive}."""

    archive: str
    url: str
    checksum_url: str
    # "list": a file of "<sha256>  <name>" lines; "single": a file holding one digest.
    checksum_style: str = "list"
    # other names the same archive goes by on the download page (glob patterns), accepted
    # in a --local-archive directory, each with a "<name>.sha256" beside it
    also_named: tuple[str, ...] = ()

    def archive_name(self, version: str, arch: str) -> str:
        return self.archive.format(version=version, arch=arch)

    def local_names(self, version: str, arch: str) -> list[str]:
        """The archive's name, then the glob patterns of its other names."""
        return [self.archive_name(version, arch),
                *(p.format(version=version, arch=arch) for p in self.also_named)]

    def archive_url(self, version: str, arch: str, mirror: str = "") -> str:
        url = self.url.format(version=version, arch=arch,
                              archive=self.archive_name(version, arch))
        return apply_mirror(url, mirror)

    def checksums_url(self, version: str, arch: str, mirror: str = "") -> str:
        url = self.checksum_url.format(version=version, arch=arch,
                                       archive=self.archive_name(version, arch))
        return apply_mirror(url, mirror)


def apply_mirror(url: str, mirror: str) -> str:
    """Swap the scheme and host of an upstream URL for a mirror's, keeping the path."""
    if not mirror:
        return url
    path = url.split("://", 1)[1].split("/", 1)[1]
    return mirror.rstrip("/") + "/" + path


@dataclass(frozen=True)
class PortUse:
    """A port a service binds, and the setting that changes it."""

    key: str
    host: str
    port: int


@dataclass
class Launch:
    """How to run one service: argv, working directory, extra environment, readiness."""

    name: str
    argv: list[str]
    ready_url: str
    port: int
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # commands run once each time the service turns ready: (argv, text on stdin)
    after_ready: list[tuple[list[str], str]] = field(default_factory=list)
    # (user, password) the readiness probe sends: server/doors.py
    ready_auth: tuple[str, str] | None = None


class Service:
    """A managed service. Subclasses fill in the class attributes and two methods."""

    name: str = ""
    binary_names: tuple[str, ...] = ()
    upstream: Upstream

    def section(self, settings: Settings):
        return getattr(settings, self.name)

    def enabled(self, settings: Settings) -> bool:
        return bool(self.section(settings).enabled)

    def ports(self, settings: Settings) -> list[PortUse]:
        raise NotImplementedError

    def home_of(self, binary: Path) -> Path:
        """The directory a binary's support files live in (Grafana needs it)."""
        return binary.parent

    def launch(self, settings: Settings, binary: Path) -> Launch:
        """Write the service's config under settings.generated_dir; say how to run it."""
        raise NotImplementedError

    def work_dir(self, settings: Settings) -> Path:
        return settings.generated_dir / self.name

    def data_dir(self, settings: Settings) -> Path:
        return settings.data_dir / self.name
