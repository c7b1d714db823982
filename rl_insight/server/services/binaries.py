"""Finding a usable binary for each service, and the manifest that records installs.

Order: the configured path (``<service>.binary``), then what `server install` put in
``$RL_INSIGHT_HOME/services``, then the PATH. A binary counts only when its reported
version is at least the service's ``min_version``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rl_insight.common.files import write_atomic
from rl_insight.config import Settings
from rl_insight.server.services.base import Service, parse_version, version_at_least

MANIFEST = "manifest.json"


@dataclass
class Found:
    service: str
    path: Path
    version: str
    source: str  # configured | installed | host


@dataclass
class Lookup:
    """The result of looking for a service's binary: what was found, and why others
    were passed over (shown by `status` and `install`)."""

    found: Found | None = None
    passed_over: list[str] = field(default_factory=list)


def probe_version(path: Path) -> str | None:
    """The x.y.z a binary prints for ``--version``, or None if it does not run."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                             timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    v = parse_version(out.stdout + "\n" + out.stderr)
    return ".".join(map(str, v)) if v else None


def manifest_path(settings: Settings) -> Path:
    return settings.services_dir / MANIFEST


def read_manifest(settings: Settings) -> dict:
    try:
        data = json.loads(manifest_path(settings).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"services": {}}
    data.setdefault("services", {})
    return data


def write_manifest(settings: Settings, data: dict) -> None:
    write_atomic(manifest_path(settings), json.dumps(data, indent=2, sort_keys=True) + "\n")


def _check(service: Service, settings: Settings, path: Path, source: str,
           lookup: Lookup) -> Found | None:
    minimum = service.section(settings).min_version
    if not path.is_file():
        lookup.passed_over.append(f"{source} {path}: no such file")
        return None
    version = probe_version(path)
    if version is None:
        lookup.passed_over.append(f"{source} {path}: does not run or print a version")
        return None
    if not version_at_least(version, minimum):
        lookup.passed_over.append(f"{source} {path}: version {version} is older than "
                                  f"the minimum {minimum}")
        return None
    return Found(service.name, path, version, source)


def locate(service: Service, settings: Settings) -> Lookup:
    """Find the binary to run for ``service``."""
    lookup = Lookup()
    configured = service.section(settings).binary
    if configured:
        lookup.found = _check(service, settings, Path(configured).expanduser(),
                              "configured", lookup)
        return lookup  # an explicit path is never silently replaced by another
    entry = read_manifest(settings)["services"].get(service.name)
    if entry and entry.get("path"):
        source = "host" if entry.get("source") == "host" else "installed"
        lookup.found = _check(service, settings, Path(entry["path"]), source, lookup)
        if lookup.found:
            return lookup
    for name in service.binary_names:
        on_path = shutil.which(name)
        if on_path:
            lookup.found = _check(service, settings, Path(on_path), "host", lookup)
            if lookup.found:
                return lookup
    return lookup
