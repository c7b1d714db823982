"""The server's write token: made at first start when the server listens beyond loopback
without one, so a default `server start` is never open to anyone on the network.

The token lives in ``<home>/state/token`` (mode 0600). Processes of the same user on the
server's machine read it from there; every other host gets it through
``RL_INSIGHT_TOKEN`` (printed by `server start`, written by `rl-insight ray-env`).
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from pathlib import Path

from rl_insight.config import Settings, env_name

log = logging.getLogger(__name__)

TOKEN_FILE = "token"
TOKEN_ENV = env_name("server.token")  # RL_INSIGHT_TOKEN


def token_path(settings: Settings) -> Path:
    return settings.state_dir / TOKEN_FILE


def loopback_only(host: str) -> bool:
    """True when a server bound to ``host`` cannot be reached from another machine."""
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "", "0.0.0.0"-like names and host names reach beyond this machine


def local_token(settings: Settings) -> str:
    """The token a server on this machine made, when this user can read it; else ""."""
    try:
        return token_path(settings).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def server_token(settings: Settings) -> tuple[str, str]:
    """The token the server enforces and where it came from: ``configured``, ``kept``
    (made at an earlier start), ``made`` (now) or ``none`` (loopback, nothing set)."""
    if settings.server.token:
        return settings.server.token, "configured"
    if loopback_only(settings.bind_host("server")):
        return "", "none"
    kept = local_token(settings)
    if kept:
        return kept, "kept"
    from rl_insight.common.files import write_atomic  # 0600, synced

    token = secrets.token_urlsafe(32)
    write_atomic(token_path(settings), token + "\n")
    log.info("made a write token in %s: the server listens beyond loopback",
             token_path(settings))
    return token, "made"


def client_token(settings: Settings) -> str:
    """The token a client sends: ``RL_INSIGHT_TOKEN`` (or ``server.token``), else the one
    a server of this user on this machine made."""
    return settings.server.token or local_token(settings)
