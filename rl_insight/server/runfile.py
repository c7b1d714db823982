"""The run file: where a running server records its pid, URL and children's pids, so
`status` and `stop` find it, and `stop` can clean up even after a crash."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rl_insight.common.files import write_atomic
from rl_insight.config import Settings


def path(settings: Settings) -> Path:
    return settings.run_dir / "server.json"


def write(settings: Settings, data: dict) -> None:
    write_atomic(path(settings), json.dumps(data, indent=2) + "\n")


def read(settings: Settings) -> dict | None:
    try:
        return json.loads(path(settings).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def remove(settings: Settings) -> None:
    try:
        path(settings).unlink()
    except FileNotFoundError:
        pass


def pid_alive(pid: int | None, expect_in_cmdline: str = "") -> bool:
    """True when ``pid`` runs and, if given, its command line mentions the text (so a
    reused pid is never mistaken for ours)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if expect_in_cmdline:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            return False
        return expect_in_cmdline.encode() in cmdline
    try:  # a zombie is not running
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
