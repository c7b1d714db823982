"""The server's database: a damaged or newer file stops the server with one message that
names the file and what to do, and is never overwritten; the schema of version 1 (pushed
groups and spool only) is brought to version 2 in place."""

from __future__ import annotations

import sqlite3

import pytest

from rl_insight.server.ingest.store import FILE_NAME, SCHEMA_VERSION, Store, StoreError


@pytest.mark.parametrize("content", [b"", b"not a database" * 100, b"SQLite format 3\x00"
                                     + b"\xff" * 200])
def test_a_damaged_database_is_named_with_how_to_recover_and_kept(tmp_path, content):
    path = tmp_path / FILE_NAME
    if content:
        path.write_bytes(content)
        with pytest.raises(StoreError) as err:
            Store(tmp_path)
        msg = str(err.value)
        assert str(path) in msg and f"mv {path} {path}.damaged" in msg and \
            "start again" in msg
        assert path.read_bytes() == content  # never overwritten
    else:  # an empty file is a new database
        path.write_bytes(content)
        assert Store(tmp_path).read(lambda db: db.execute(
            "PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION


def test_a_database_of_a_newer_version_is_refused(tmp_path):
    db = sqlite3.connect(tmp_path / FILE_NAME)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer rl-insight"):
        Store(tmp_path)


def test_version_1_is_brought_to_version_2_keeping_its_rows(tmp_path):
    db = sqlite3.connect(tmp_path / FILE_NAME)
    db.execute("CREATE TABLE push_groups (key TEXT PRIMARY KEY, labels TEXT NOT NULL, "
               "push_time REAL NOT NULL, body TEXT NOT NULL)")
    db.execute("INSERT INTO push_groups VALUES ('k', '{\"job\": \"j\"}', 1.0, 'x 1\n')")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    store = Store(tmp_path)
    assert store.groups() == [('{"job": "j"}', 1.0, "x 1\n")]
    assert store.read(lambda d: d.execute("SELECT count(*) FROM targets").fetchone()) == (0,)
    assert store.read(lambda d: d.execute("PRAGMA user_version").fetchone()[0]) == 2


def test_commits_are_synced_when_asked(tmp_path):
    """server.sync_commits picks SQLite's FULL sync (each commit synced before it is
    answered); the default NORMAL syncs the log at checkpoints."""
    from rl_insight import config

    assert config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)}).server.sync_commits \
        is False
    on = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)},
                     overrides=["server.sync_commits=true"])
    assert on.server.sync_commits is True
    level = "PRAGMA synchronous"
    assert Store(tmp_path / "a").read(lambda db: db.execute(level).fetchone()[0]) == 1
    assert Store(tmp_path / "b", sync=True).read(
        lambda db: db.execute(level).fetchone()[0]) == 2
