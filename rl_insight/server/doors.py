"""The credentials of the services the server runs beyond loopback.

Prometheus and Alertmanager take a web config (``--web.config.file``, exporter-toolkit:
Prometheus since 2.24, Alertmanager since 0.22) with HTTP basic auth: a service that
listens beyond loopback gets one, with a password the server makes once and keeps in
``state/<service>.password`` (mode 0600). Everything that talks to it (the server,
Grafana's data sources, Prometheus itself, Tempo's metrics generator) is handed that file,
never the password on a command line. A service on loopback has no door to guard.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml

from rl_insight.common.files import write_atomic
from rl_insight.common.secret import loopback_only
from rl_insight.config import Settings

USER = "rl-insight"
WEB_CONFIG = "web.yml"
GUARDED = ("prometheus", "alertmanager")  # the services that can check a password
BCRYPT_ROUNDS = 10  # exporter-toolkit caches a verified password: one hash per client


def guarded(settings: Settings, service: str) -> bool:
    """Whether ``service`` listens beyond loopback and so needs the password."""
    return service in GUARDED and not loopback_only(settings.bind_host(service))


def password_path(settings: Settings, service: str) -> Path:
    return settings.state_dir / f"{service}.password"


def password(settings: Settings, service: str) -> str:
    """The service's password, made at the first need and the same at every start."""
    path = password_path(settings, service)
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if kept:
        return kept
    made = secrets.token_urlsafe(24)
    write_atomic(path, made + "\n")  # mkstemp: 0600
    os.chmod(path, 0o600)
    return made


def basic_auth(settings: Settings, service: str) -> tuple[str, str] | None:
    """(user, password) for a request to ``service``; None when it needs none."""
    return (USER, password(settings, service)) if guarded(settings, service) else None


def client_config(settings: Settings, service: str) -> dict:
    """The ``basic_auth`` block a Prometheus-style client config (scrape, alerting,
    remote write: prometheus/common config/http_config.go BasicAuth) uses to reach
    ``service``; {} when it needs none."""
    if not guarded(settings, service):
        return {}
    password(settings, service)  # the file exists before a client reads it
    return {"basic_auth": {"username": USER,
                           "password_file": str(password_path(settings, service))}}


def web_config(settings: Settings, service: str, work_dir: Path) -> Path | None:
    """Write the service's web config (basic_auth_users: the user and the bcrypt hash
    of its password) and return its path; None, and no file, on loopback."""
    path = work_dir / WEB_CONFIG
    if not guarded(settings, service):
        path.unlink(missing_ok=True)
        return None
    import bcrypt

    secret = password(settings, service).encode()
    try:
        kept = yaml.safe_load(path.read_text())["basic_auth_users"][USER].encode()
        if bcrypt.checkpw(secret, kept):
            return path  # the same password: no new hash (a new salt each time)
    except (OSError, TypeError, KeyError, ValueError, AttributeError, yaml.YAMLError):
        pass
    hashed = bcrypt.hashpw(secret, bcrypt.gensalt(rounds=BCRYPT_ROUNDS)).decode()
    write_atomic(path, yaml.safe_dump({"basic_auth_users": {USER: hashed}}))
    os.chmod(path, 0o600)
    return path
