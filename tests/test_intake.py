"""The intake's group commit (server/ingest/intake.py ``Batches``, store ``batch()``): the
requests of one batch are answered each on its own, a refused one changes nothing and
takes nothing from the others, a failed commit stores none of them and says so, and the
spool keeps arrival order; what the server keeps of a finished run goes after its grace.
In-process, on the real state and database."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time

import pytest

from rl_insight import config
from rl_insight.collector.otlp_encode import encode
from rl_insight.server.httpio import HttpError
from rl_insight.server.ingest import intake
from rl_insight.server.ingest.grouping import PushError
from rl_insight.server.ingest.store import Store
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState
from rl_insight.wire.events import Identity, Span
from tests.conftest import wait_for

PROTOBUF = "application/x-protobuf"


@pytest.fixture
def state(tmp_path):
    settings = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)})
    st = ServerState(settings, Supervisor(settings.supervisor, settings.logs_dir))
    st.open()
    yield st
    st.close()


def spans(lane: str, n: int) -> bytes:
    ident = Identity("p", "e")
    return encode([(ident, "t", Span("gen", 10**9 * (k + 1), 10**9 * (k + 2), lane, (), 0,
                                     k + 1, 0, True)) for k in range(n)])


async def together(batches: intake.Batches, calls: list[tuple]) -> list:
    """Submit every call before any is answered (one batch after the first), then
    gather each answer or exception."""
    futs = [batches.run(*call) for call in calls]
    return await asyncio.gather(*futs, return_exceptions=True)


def stored_groups(state: ServerState) -> set[str]:
    return {labels for labels, _, _ in state.store.groups()}


def test_a_refused_push_in_a_batch_changes_nothing_and_the_others_are_stored(state):
    b = intake.Batches(state)
    path = "job/j/instance/{}"
    calls = [(intake.accept_push, state, path.format(i), "text/plain",
              b"# TYPE x gauge\nx 1\n" if i != 2 else b"x{ 1\n", True) for i in range(5)]
    got = asyncio.run(together(b, calls))
    assert [type(g).__name__ for g in got] == ["NoneType", "NoneType", "PushError",
                                               "NoneType", "NoneType"]
    assert got[2].status == 400
    assert len(state.pushes.groups) == 4
    stored = stored_groups(state)
    assert len(stored) == 4 and not any('"2"' in s for s in stored)
    # committed: another connection to the file sees them
    other = sqlite3.connect(state.store.path)
    assert other.execute("SELECT count(*) FROM push_groups").fetchone()[0] == 4


def test_a_write_that_fails_inside_a_batch_is_undone_alone(tmp_path):
    store = Store(tmp_path)
    with store.batch():
        store.save_groups([("a", "{}", 1.0, "a 1\n")], [])
        with pytest.raises(sqlite3.IntegrityError):
            with store.transaction() as db:
                db.execute("INSERT INTO push_groups VALUES ('b', '{}', 1.0, 'b 1\n')")
                db.execute("INSERT INTO push_groups VALUES ('b', '{}', 1.0, 'b 1\n')")
        store.save_groups([("c", "{}", 1.0, "c 1\n")], [])
    assert [k for k, in store.read(lambda db: db.execute(
        "SELECT key FROM push_groups ORDER BY key").fetchall())] == ["a", "c"]


def test_a_batch_that_cannot_commit_answers_503_and_the_spool_matches_the_database(
        state, monkeypatch):
    b = intake.Batches(state)
    real = Store.batch

    class Failing:
        def __init__(self, store):
            self.inner = real(store)

        def __enter__(self):
            return self.inner.__enter__()

        def __exit__(self, *exc):
            self.inner.__exit__(RuntimeError, RuntimeError("disk full"), None)  # rolls back
            raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(Store, "batch", lambda store: Failing(store))
    calls = [(intake.accept_spans, state, spans(f"rank_{i}", 3), PROTOBUF, "")
             for i in range(4)]
    got = asyncio.run(together(b, calls))
    assert all(isinstance(g, HttpError) and g.status == 503 and "disk" in str(g)
               for g in got), got
    assert len(state.spool) == 0  # nothing in memory that the database does not hold
    monkeypatch.setattr(Store, "batch", real)
    got = asyncio.run(together(b, calls[:1]))
    assert not isinstance(got[0], Exception) and len(state.spool) == 1


def test_spans_of_a_batch_are_spooled_in_arrival_order(state):
    state.relay.stop()  # keep them in the spool to read them back
    b = intake.Batches(state)
    calls = [(intake.accept_spans, state, spans(f"QQ{i}QQ", 1), PROTOBUF, "")
             for i in range(6)]
    got = asyncio.run(together(b, calls))
    assert not any(isinstance(g, Exception) for g in got)
    lanes = [re.search(rb"QQ(\d)QQ", payload).group(1) for _, _, payload in
             state.spool.peek_many(10**9)]
    assert lanes == [str(i).encode() for i in range(6)]


def test_a_push_refused_by_the_store_itself_is_refused_with_its_reason(state, monkeypatch):
    b = intake.Batches(state)

    def broken(*_a, **_k):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(state.store, "save_groups", broken)
    got = asyncio.run(together(b, [(intake.accept_push, state, "job/j", "text/plain",
                                    b"x 1\n", True)]))
    assert isinstance(got[0], PushError) and got[0].status == 503
    assert "disk I/O error" in str(got[0]) and not state.pushes.groups


def test_a_finished_runs_lanes_and_spans_are_forgotten_after_its_grace(state):
    """What the server keeps per lane and recent span of a run goes once the run has
    been finished for push.finished_ttl_s; a run still going keeps its own."""
    state.relay.stop()
    for exp in ("done", "going"):
        ident = Identity("p", exp)
        body = encode([(ident, "t", Span("gen", 10**9, 2 * 10**9, f"rank_{k}", (), 0, k + 1,
                                         0, True)) for k in range(3)])
        intake.accept_spans(state, body, PROTOBUF, "")
    state.experiments.set_status("p", "done", "finished")
    ttl = state.settings.push.finished_ttl_s
    state.forget_finished(time.time())  # within the grace: kept
    assert len(state.lanes.list("p", "done")) == 3
    state.forget_finished(time.time() + ttl + 1)
    assert state.lanes.list("p", "done") == [] and state.recent.spans("p", "done") == []
    assert len(state.lanes.list("p", "going")) == 3
    assert len(state.recent.spans("p", "going")) == 3



class CommitRefused:
    """The store's connection with a disk that refuses every COMMIT (a full or failing
    disk), everything else passed through to the real one."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def execute(self, sql: str, *args):
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def push_body(value: int) -> bytes:
    return f"# TYPE x gauge\nx {value}\n".encode()


def test_a_batch_whose_commit_fails_leaves_metrics_and_experiments_as_stored(state):
    b = intake.Batches(state)
    grouping = "job/j/project/p/experiment_name/{}"
    got = asyncio.run(together(b, [(intake.accept_push, state, grouping.format("old"),
                                    "text/plain", push_body(1), True)]))
    assert got == [None]
    before = state.pushes.exposition([])
    experiments = {(e["project"], e["experiment_name"]) for e in state.experiments.list()}
    real = state.store.db
    state.store.db = CommitRefused(real)
    try:
        got = asyncio.run(together(b, [
            (intake.accept_push, state, grouping.format("old"), "text/plain", push_body(2),
             False),  # a new value for a stored group
            (intake.accept_push, state, grouping.format("new"), "text/plain", push_body(3),
             True),  # a new group of a new run
            (intake.accept_spans, state, spans("rank_0", 2), PROTOBUF, "")]))
    finally:
        state.store.db = real
    assert all(isinstance(g, HttpError) and g.status == 503 for g in got), got
    assert "nothing was stored" in str(got[0])
    # what is served is what the database holds: the client was told the truth
    assert state.pushes.exposition([]) == before
    assert {(e["project"], e["experiment_name"]) for e in state.experiments.list()} == \
        experiments
    assert len(state.spool) == 0
    got = asyncio.run(together(b, [(intake.accept_push, state, grouping.format("new"),
                                    "text/plain", push_body(3), True)]))
    assert got == [None] and b'experiment_name="new"' in state.pushes.exposition([])


def test_the_intake_answers_on_after_reading_the_spool_back_fails(state, monkeypatch):
    b = intake.Batches(state)

    def broken() -> None:
        raise sqlite3.OperationalError("disk I/O error while reading the spool back")

    monkeypatch.setattr(state.spool, "resync", broken)
    real = state.store.db

    async def answered(calls: list[tuple]) -> list:
        # a wedged intake never answers: each wait has a deadline
        return await asyncio.wait_for(together(b, calls), timeout=30)

    state.store.db = CommitRefused(real)
    try:
        got = asyncio.run(answered([(intake.accept_spans, state, spans("rank_0", 1),
                                     PROTOBUF, "")]))
    finally:
        state.store.db = real
    assert isinstance(got[0], HttpError) and got[0].status == 503
    # the same Batches, as the server keeps one
    assert asyncio.run(answered([(intake.accept_push, state, "job/j", "text/plain",
                                  push_body(1), True)])) == [None]


def test_a_run_that_finishes_as_another_is_restored_is_forgotten(state):
    """Forgetting compares the runs past their grace, not their number."""
    state.relay.stop()
    for exp in ("a", "b"):
        intake.accept_spans(state, encode([(Identity("p", exp), "t", Span(
            "gen", 10**9, 2 * 10**9, "rank_0", (), 0, 1, 0, True))]), PROTOBUF, "")
    state.experiments.set_status("p", "a", "finished")
    later = time.time() + state.settings.push.finished_ttl_s + 1
    state.forget_finished(later)
    assert state.lanes.list("p", "a") == [] and len(state.lanes.list("p", "b")) == 1
    # in one round: a is restored (running again), b finishes
    state.experiments.set_status("p", "a", "running")
    state.experiments.set_status("p", "b", "finished")
    state.forget_finished(time.time() + state.settings.push.finished_ttl_s + 1)
    assert state.lanes.list("p", "b") == [] and state.recent.spans("p", "b") == []


class CommitCounter:
    """The store's real connection, counting the COMMITs it is asked for."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db, self.commits = db, 0

    def execute(self, sql: str, *args):
        self.commits += sql == "COMMIT"
        return self.db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_registrations_share_the_intakes_group_commit_and_are_discovered_once_stored(state):
    """The registration routes write through ``state.writes`` (bench/registrations.py: a
    burst of 1,000 no longer queues the lanes' pushes behind a commit each): pushes and
    registrations that arrive together are one COMMIT; the discovery files follow the
    commit (Store.after_commit) and never show a batch that did not commit."""
    from rl_insight.server.ingest.bodies import parse_registration
    from tests.test_targets import sd_groups

    sd = state.targets.sd_dir

    def register(target: str):
        regs = parse_registration({"job_name": "vllm", "targets": [target],
                                   "project": "p", "experiment_name": "e"})
        return (state.targets.register, regs)

    real = state.store.db
    counter = state.store.db = CommitCounter(real)
    asked = []  # the COMMITs made when the discovery files were asked for
    write_files = state.targets.changed
    state.targets.changed = lambda: (asked.append(counter.commits), write_files())
    try:
        got = asyncio.run(together(state.writes, [
            (intake.accept_push, state, "job/j", "text/plain", push_body(1), True),
            register("a:1"),  # the first call is a batch of its own; the rest are one
            register("b:2"), register("c:3"),
            (intake.accept_push, state, "job/k", "text/plain", push_body(2), True)]))
        assert got == [None, 1, 1, 1, None] and counter.commits == 2, (got, counter.commits)
        assert asked == [2, 2, 2], asked  # after the batch's commit, not within it
        wait_for(lambda: {t for g in sd_groups(sd) for t in g["targets"]} ==
                 {"a:1", "b:2", "c:3"}, 10, "the three targets in the discovery files")
        state.store.db = CommitRefused(real)
        got = asyncio.run(together(state.writes, [register("d:4")]))
    finally:
        state.store.db = real
    assert isinstance(got[0], HttpError) and got[0].status == 503, got
    assert {r["target"] for r in state.targets.list()} == {"a:1", "b:2", "c:3"}
    assert asked == [2, 2, 2], asked  # a batch that did not commit is not discovered


def test_control_writes_take_turns_and_never_hold_the_intake(state):
    """The Guard lets one control write (registration, binding, removal) into the app at
    a time, so a burst of 1,000 replicas registering takes the event loop's turns one by
    one instead of queueing each lane push behind many (bench/registrations.py); pushes,
    span exports and reads pass while one is in progress, and a client slow to send its
    body waits for it outside the turn."""
    from rl_insight.server.app import Guard

    inside, peak, release = [0], [0], None

    async def app(scope, receive, send):  # the framework's place: holds control writes
        if scope["method"] != "GET":
            await receive()  # its body first, as the routes read it
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            await release.wait()
            inside[0] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def call(guard, method: str, path: str, body: bytes = b"",
                   late: asyncio.Event | None = None) -> int:
        got = []
        sent = [False]

        async def receive():
            if sent[0]:
                await asyncio.Event().wait()  # the client stays connected
            if late is not None:  # a client whose body is slow to come
                await late.wait()
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                got.append(message["status"])

        await guard({"type": "http", "method": method, "path": path,
                     "headers": [(b"content-type", b"text/plain"),
                                 (b"content-length", str(len(body)).encode())]},
                    receive, send)
        return got[0]

    async def scenario():
        nonlocal release
        release, late = asyncio.Event(), asyncio.Event()
        guard = Guard(app, state, token="", started="1")
        slow = asyncio.ensure_future(call(guard, "POST", "/api/v1/prometheus/targets",
                                          late=late))
        writes = [asyncio.ensure_future(call(guard, method, path)) for method, path in (
            ("POST", "/api/v1/prometheus/targets"), ("POST", "/api/v1/runs/bind"),
            ("DELETE", "/api/v1/prometheus/targets"), ("POST", "/api/v1/prometheus/targets"))]
        for _ in range(50):
            await asyncio.sleep(0)
        # one control write in, the other three wait; the first to arrive, whose body has
        # not come yet, has not taken the turn
        assert inside[0] == 1 and peak[0] == 1 and not slow.done(), inside
        # meanwhile a push is stored and answered, and a read answered
        push = await asyncio.wait_for(call(guard, "PUT", "/metrics/job/j", push_body(1)), 10)
        read = await asyncio.wait_for(call(guard, "GET", "/api/v1/prometheus/targets"), 10)
        release.set()
        late.set()
        done = await asyncio.wait_for(asyncio.gather(slow, *writes), 10)
        return push, read, done

    push, read, done = asyncio.run(scenario())
    assert (push, read, done) == (200, 200, [200] * 5), (push, read, done)
    assert peak[0] == 1, peak
    assert len(state.pushes.groups) == 1 and len(stored_groups(state)) == 1  # the push


def test_a_batch_push_is_one_commit_of_the_intake_and_a_refused_group_is_undone_alone(
        state):
    """POST /api/v1/push/batch (the lane actors' and the hub's main path) goes through the
    intake's group commit like every other write: one COMMIT for the batch, each group a
    savepoint (a refused one undone alone, answered on its own)."""
    from fastapi.testclient import TestClient

    from rl_insight.server.app import create_app

    groups = [{"job": "lanes", "grouping": {"instance": str(i)},
               "text": f"rl_insight_monitor_x {i}\n", "replace": True} for i in range(40)]
    groups[7]["text"] = "not the text format {\n"
    real = state.store.db
    counter = state.store.db = CommitCounter(real)
    try:
        with TestClient(create_app(state)) as c:
            r = c.post("/api/v1/push/batch", json={"groups": groups})
    finally:
        state.store.db = real
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200] * 7 + [400] + [200] * 32
    assert counter.commits == 1, counter.commits
    stored = {g["labels"]["instance"] for g in state.pushes.groups_of(lambda labels: True)}
    assert stored == {str(i) for i in range(40)} - {"7"}
