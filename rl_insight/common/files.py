"""Files that survive a crash and a power cut: written whole through a temporary file and
a rename, the file and its folder synced; and the JSON state files of earlier versions,
read once into the server's database. Shared by the server, its services and the CLI's
token (floor 1: it imports nothing of the package)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

log = logging.getLogger("rl_insight.server")


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see half a file; the file
    and then its directory are synced, so after a power loss the path holds the old
    text or the new one, never an empty file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        sync_dir(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def migrated(path: Path, rows: int, into: Path) -> None:
    """A state file of an earlier version, read into the database: kept beside it."""
    path.rename(path.with_name(path.name + ".migrated"))
    log.info("moved %d entries from %s into %s", rows, path, into)


def read_state_json(path: Path, empty: object) -> object:
    """A state file's JSON, or ``empty`` when it does not exist. A damaged one (cut short
    by a crash of an older version, edited by hand) is moved aside, named in the log
    with how to recover, and the server starts without it instead of failing at every
    start."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return empty
    except (ValueError, UnicodeDecodeError) as exc:
        aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
        os.replace(path, aside)
        log.error(
            "%s could not be read (%s); it was moved to %s and the server starts without "
            "it. To restore it: stop the server, repair the JSON in %s, move it back to "
            "%s and start the server again.", path, exc, aside, aside, path)
        return empty
