"""Profiles of ranks' code at the server, without a cluster: who may ask for one and how
often, the lane actor's side (take, answer), what is kept and for how long, a restart,
and the routes in-process. Capturing a real rank with py-spy: tests/test_culprit_ranks.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fastapi.testclient import TestClient

from rl_insight.collector.profiling import top_frames
from rl_insight.config import ProfileSettings
from rl_insight.server.analyses.profiles import DONE, EXPIRED, FAILED, ProfileError, ProfileStore
from tests.conftest import wait_for

KNOWN = {("p", "e", "rank_0"), ("p", "e", "rank_1"), ("p", "e", "rank_2")}


def store(tmp_path, **settings) -> ProfileStore:
    return ProfileStore(ProfileSettings(**settings), tmp_path / "profiles",
                        known_lane=lambda p, e, lane: (p, e, lane) in KNOWN)


def refused(fn, *args, **kw) -> ProfileError:
    try:
        fn(*args, **kw)
    except ProfileError as exc:
        return exc
    raise AssertionError("not refused")


SPEEDSCOPE = {  # as py-spy record --format speedscope writes it (py-spy 0.4.3)
    "shared": {"frames": [
        {"name": "<module>", "file": "/x/default_worker.py", "line": 1},
        {"name": "update_actor", "file": "/job/train.py", "line": 40},
        {"name": "slow_backward", "file": "/job/train.py", "line": 12},
        {"name": "wait", "file": "/usr/lib/python3.11/threading.py", "line": 320}]},
    "profiles": [{"type": "sampled", "samples": [[0, 1, 2]] * 6 + [[0, 1]] * 2 + [[0, 3]] * 2,
                  "weights": [1] * 10}]}


def test_a_run_asks_for_its_own_ranks_only_within_its_limits(tmp_path):
    s = store(tmp_path, min_interval_s=60, max_pending_per_run=2)
    assert refused(s.request, "p", "e", "7").status == 404  # no such rank lane in the run
    assert "only a run's own ranks" in str(refused(s.request, "p", "other", "0"))
    assert refused(s.request, "p", "e", "0; rm -rf").status == 400
    assert refused(s.request, "p", "e", "0", seconds=600).status == 422
    assert refused(s.request, "p", "x", "0", seconds=600).status == 404  # who, then how long
    first = s.request("p", "e", "0", now=1000.0)
    again = refused(s.request, "p", "e", "0", now=1001.0)
    assert again.status == 429 and first.id in str(again)
    s.request("p", "e", "1", now=1001.0)
    assert refused(s.request, "p", "e", "2", now=1002.0).status == 429  # 2 pending
    off = store(tmp_path / "off", enabled=False)
    assert refused(off.request, "p", "e", "0").status == 403
    assert "profiles.enabled" in str(refused(off.request, "p", "e", "0"))


def test_a_lane_actor_takes_a_request_once_and_answers_it(tmp_path):
    s = store(tmp_path, min_interval_s=60, max_bytes=10_000)
    p = s.request("p", "e", "1", seconds=2, now=1000.0)
    assert [x["id"] for x in s.pending(now=1001.0)] == [p.id]
    s.take(p.id, "rl_insight_lanes_node_a", now=1001.0)
    assert refused(s.take, p.id, "rl_insight_lanes_node_b").status == 409
    assert s.pending(now=1001.0) == []
    frames = top_frames(SPEEDSCOPE)
    got = s.result(p.id, {"method": "py-spy record", "process": "h:42",
                          "top_frames": frames}, SPEEDSCOPE)
    assert got.status == DONE and json.loads(s.data(p.id)) == SPEEDSCOPE
    assert [f["name"] for f in s.get(p.id)["top_frames"]][:2] == ["slow_backward",
                                                                  "update_actor"]
    # within the interval, the same rank is not profiled again
    assert refused(s.request, "p", "e", "1", now=1030.0).status == 429
    assert s.request("p", "e", "1", now=1061.0).id != p.id
    # too large a capture is refused with what to do
    q = s.request("p", "e", "2", now=1100.0)
    s.take(q.id, "a")
    big = s.result(q.id, {}, {"profiles": ["x" * 20_000]})
    assert big.status == FAILED and "ask for fewer seconds" in big.error
    assert s.data(q.id) is None


def test_top_frames_are_the_code_the_samples_were_in():
    frames = top_frames(SPEEDSCOPE)
    by = {f["name"]: f for f in frames}
    assert frames[0]["name"] == "slow_backward" and by["slow_backward"]["self_share"] == 0.6
    assert by["update_actor"]["self_share"] == 0.2 and by["update_actor"]["total_share"] == 0.8
    # a runtime frame (threading's wait) is no one's code: its samples go to its caller
    assert "wait" not in by and by["<module>"]["self_share"] == 0.2


def test_requests_nobody_takes_expire_and_a_restart_keeps_what_was_captured(tmp_path):
    s = store(tmp_path, pending_expire_s=30, min_interval_s=0)
    stale = s.request("p", "e", "0", now=1000.0)
    assert s.pending(now=1031.0) == [] and s.get(stale.id)["status"] == EXPIRED
    assert "lane actors up" in s.get(stale.id)["error"]
    done = s.request("p", "e", "1", now=2000.0)
    s.take(done.id, "a")
    s.result(done.id, {"method": "py-spy record"}, SPEEDSCOPE)
    open_ = s.request("p", "e", "2", now=2000.0)
    s.take(open_.id, "a")
    again = store(tmp_path, min_interval_s=0)  # the server restarted (even SIGKILLed)
    assert again.load() == 3
    assert again.get(done.id)["status"] == DONE and again.data(done.id)
    assert again.get(open_.id)["status"] == FAILED  # nobody will answer it now


def test_a_run_keeps_its_newest_profiles_and_forgets_them_with_the_run(tmp_path):
    s = store(tmp_path, max_per_run=2, min_interval_s=0, max_pending_per_run=10)
    ids = []
    for i, rank in enumerate(("0", "1", "2")):
        p = s.request("p", "e", rank, now=1000.0 + i)
        s.take(p.id, "a")
        s.result(p.id, {}, SPEEDSCOPE)
        ids.append(p.id)
    assert [p["id"] for p in s.list("p", "e")] == ids[1:]
    files = sorted(x.name for x in (tmp_path / "profiles").glob("*.speedscope.json"))
    assert files == sorted(f"{i}.speedscope.json" for i in ids[1:])
    assert s.forget({("p", "e")}) == 2 and s.list() == []
    assert not list((tmp_path / "profiles").glob("*.speedscope.json"))


def test_the_routes_ask_list_take_answer_and_download(served):
    c, state = served
    body = {"project": "p", "experiment_name": "e", "rank": "3", "seconds": 2}
    r = c.post("/api/v1/profiles", json=body)
    assert r.status_code == 404 and "rank_3" in r.json()["error"]
    state.lanes.observe([("p", "e", "rank_3", "actor_update", 1)])
    r = c.post("/api/v1/profiles", json=body)
    assert r.status_code == 202, r.text
    pid = r.json()["id"]
    assert c.post("/api/v1/profiles", json=body).status_code == 429
    assert c.post("/api/v1/profiles", json={**body, "rank": "x"}).status_code == 400
    pending = c.get("/api/v1/profiles", params={"status": "pending"}).json()
    assert [p["id"] for p in pending["profiles"]] == [pid]
    assert c.post(f"/api/v1/profiles/{pid}/take", json={"by": "lanes"}
                  ).status_code == 200
    assert c.get(f"/api/v1/profiles/{pid}/speedscope").status_code == 404
    r = c.post(f"/api/v1/profiles/{pid}/result",
               json={"method": "py-spy record", "process": "h:1",
                     "top_frames": top_frames(SPEEDSCOPE), "data": SPEEDSCOPE})
    assert r.status_code == 200 and r.json()["status"] == DONE
    got = c.get(f"/api/v1/profiles/{pid}/speedscope")
    assert got.status_code == 200 and got.json() == SPEEDSCOPE
    assert "attachment" in got.headers["content-disposition"]
    metrics = c.get("/metrics").text
    assert 'rl_insight_profile_frame_share{' in metrics and "slow_backward" in metrics


@pytest.mark.parametrize("stderr, says", [
    ("Error: Permission denied (os error 13)", "SYS_PTRACE"),
    ("Error: Failed to find process 123", "is gone"),
    ("something else", "py-spy failed"),
])
def test_a_refused_capture_says_why_and_what_to_change(stderr, says):
    from rl_insight.collector.profiling import _why

    assert says in _why(stderr, 123)


def test_a_change_on_one_rank_has_that_rank_profiled_once(served):
    """The server asks by itself when a change's scope is one rank (profiles.auto), once
    per change, as any request: rate limits and all."""
    from types import SimpleNamespace

    from rl_insight.server.analyses.changes import Ranking

    _, state = served
    state.lanes.observe([("p", "e", "rank_2", "actor_update", 1)])
    change = SimpleNamespace(id="step_time@30")
    on_rank = [(("p", "e"), change, Ranking(30, [], {"rank": "2", "role": "actor"}, 0, None))]
    state.changes.open_changes = lambda: on_rank
    state.auto_profiles()
    state.auto_profiles()  # the same change: asked once
    got = state.profiles.list("p", "e")
    assert [(p["rank"], p["reason"]) for p in got] == [("2", "change step_time@30")]
    state.changes.open_changes = lambda: [(("p", "e"), change,
                                           Ranking(30, [], {"node": "n"}, 0, None))]
    state.profiles.settings = dataclasses.replace(state.profiles.settings, min_interval_s=0)
    state.auto_profiles()  # a change on a node: no rank to profile
    assert len(state.profiles.list("p", "e")) == 1


class _Edge:
    """The lane actor's HTTP edge (collector.push.Sender.call_json) over the real app
    in-process: the same routes and store, no socket."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def call_json(self, method: str, path: str, what: str, body=None, **params):
        r = self.client.request(method, path, json=body, params=params or None)
        return r.status_code, r.json()


def hot_loop(seconds: float, until=None) -> None:
    """Busy for ``seconds``, or (``until``) as long as that thread lives, within them."""
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end and (until is None or until.is_alive()):
        pass


def test_a_process_the_host_will_not_let_py_spy_read_samples_itself(served):
    """client.profile_method=self (or ptrace refused): the node's actor asks the rank's
    process with its next delivery check, the process samples its own stacks and the
    answer reaches the server as any capture; the busy function is its top frame."""
    import os
    import socket

    from rl_insight.client import self_profile
    from rl_insight.collector.profiling import SELF, Captures

    me = f"{socket.gethostname()}:{os.getpid()}"
    c, state = served
    state.lanes.observe([("p", "e", "rank_0", "actor_update", 1)])
    # 2 s at 50 a second: a loaded machine's sampler once came back with none of the
    # hot loop in 1 s (the rule that drops a parked thread needs its frame seen twice)
    pid = c.post("/api/v1/profiles", json={"project": "p", "experiment_name": "e",
                                           "rank": "0", "seconds": 2}).json()["id"]
    cap = Captures(_Edge(c), "lanes_node", 0.0,
                   lambda p, e, lane: me if lane == "rank_0" else None, SELF)
    cap.tick(True)  # takes it, and asks the process
    assert state.profiles.get(pid)["status"] == "capturing"
    (ask,) = cap.asks_for(me)  # what LaneActor.confirmed hands the process
    assert cap.asks_for(me) == []  # once
    thread = self_profile.answer(ask, cap.answered)
    # the rank's work for as long as it samples itself (on a loaded machine the sampler
    # may start late: a fixed 1.2 s once left it nothing to see)
    hot_loop(10.0, until=thread)
    thread.join(10)
    cap.tick(True)  # the answer goes to the server
    got = state.profiles.get(pid)
    assert got["status"] == "done", got
    assert got["method"].startswith("self-sampled") and got["process"] == me
    assert got["top_frames"][0]["name"] == "hot_loop", got["top_frames"][:3]
    assert c.get(f"/api/v1/profiles/{pid}/speedscope").json()["profiles"][0][
        "samples"]



def sleepy_loop(stop) -> None:
    """Wakes 20 times a second to do next to nothing, as a fake engine's tick does."""
    import time

    while not stop.is_set():
        time.sleep(0.05)  # not a wait: the idle loop under test


def test_the_self_sampler_keeps_what_worked_and_drops_what_waited():
    """A sample is the thread's work when it was on a CPU a tenth of the time since its
    last sample (its CPU clock): a busy loop gives the GIL up at one instruction each
    time (its frame looked parked: a fresh clone of 2026-12-07 printed no frame of it),
    one calling threading's is_alive is busy there, not parked; a thread parked in
    Event.wait and one sleeping in a loop (a fake engine's tick, left running by an
    earlier test in the same worker, came first in another clone) are not work."""
    import threading

    from rl_insight.client import self_profile

    stop = threading.Event()
    parked = threading.Thread(target=stop.wait, daemon=True)
    sleeper = threading.Thread(target=sleepy_loop, args=(stop,), daemon=True)
    parked.start()
    sleeper.start()
    busy = threading.Thread(target=hot_loop, args=(30.0, parked), daemon=True)
    busy.start()
    try:
        clocks: dict = {}
        first = self_profile._cpu_ns(busy.ident, clocks)
        assert first is not None  # POSIX: the thread's own CPU clock
        wait_for(lambda: self_profile._cpu_ns(busy.ident, clocks) > first, 10,
                 "the busy thread's CPU clock to move")
        data = self_profile.sample(1.0)
    finally:
        stop.set()
        busy.join(5)
    top = top_frames(data)
    assert top and top[0]["name"] == "hot_loop", top
    share = {f["name"]: f["self_share"] for f in top}
    # on a CPU well under BUSY_SHARE of each interval: none of its samples
    assert "sleepy_loop" not in share, top
    assert "wait" not in share, top


def test_rl_insight_profile_asks_waits_prints_the_top_frames_and_writes_the_file(
        served, tmp_path, capsys):
    """The CLI's command against the real routes in-process (its HTTP calls through the
    app), a lane actor's side taking the request and the process sampling itself."""
    import os
    import socket
    import threading

    from rl_insight.client import self_profile
    from rl_insight.collector.profiling import SELF, Captures
    from rl_insight.commands import profile
    from rl_insight.commands.api_client import ServerClient

    me = f"{socket.gethostname()}:{os.getpid()}"
    c, state = served
    state.lanes.observe([("p", "e", "rank_4", "actor_update", 1)])

    class Through(ServerClient):  # the CLI's client, its requests into the app
        def request(self, method, path, **kw):
            r = c.request(method, path, params=kw.get("params"), json=kw.get("json"))
            assert r.status_code < 400, r.text
            ctype = r.headers.get("content-type", "")
            return r.json() if "json" in ctype else r.text

    cap = Captures(_Edge(c), "lanes_node", 0.0,
                   lambda p, e, lane: me if lane == "rank_4" else None, SELF)
    stop = threading.Event()

    def lane_actor():  # its ticks, and the process answering when asked
        while not stop.is_set():
            cap.tick(True)
            for ask in cap.asks_for(me):
                self_profile.answer(ask, cap.answered)
            stop.wait(0.05)

    actor = threading.Thread(target=lane_actor, daemon=True)
    actor.start()
    # the rank's work, busy until the profile is done (its lane actor stops then), not
    # for a fixed while a loaded host's ask and answer could outlast
    worker = threading.Thread(target=hot_loop, args=(30.0, actor), daemon=True)
    worker.start()
    out = tmp_path / "rank4.json"
    try:
        code = profile.run(Through("http://in-process"), "p", "e", "4", 1.0, 30.0,
                           str(out))
    finally:
        stop.set()
        actor.join(5)
        worker.join(5)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "hot_loop (test_profiles.py:" in printed.out, printed.out
    assert json.loads(out.read_text())["profiles"][0]["samples"]
    assert f"written to {out}" in printed.out


def test_pending_requests_are_asked_for_only_when_the_servers_count_moved(served):
    """Every answer of the server says how many profiles were asked for: a process (1,000
    ranks outside Ray poll as a node's actor does) asks for the pending ones only when
    that moved, or once in QUIET_POLLS polls' time: no request per rank for nothing."""
    from rl_insight.collector.profiling import QUIET_POLLS, Captures

    c, state = served
    asked = []

    class Counting(_Edge):
        profiles_asked = None

        def call_json(self, method, path, what, body=None, **params):
            got = super().call_json(method, path, what, body, **params)
            asked.append(path)
            return got

    edge = Counting(c)
    edge.profiles_asked = c.get("/healthz").headers["X-RL-Insight-Profiles"]
    cap = Captures(edge, "lanes_node", 1.0, lambda p, e, lane: None)

    def poll() -> None:
        cap._next = 0.0  # a poll due (poll_s apart)
        cap.tick(True)
    for _ in range(5):
        poll()
    assert len(asked) == 1  # the first poll; the count has not moved since
    state.lanes.observe([("p", "e", "rank_0", "actor_update", 1)])
    assert c.post("/api/v1/profiles", json={"project": "p", "experiment_name": "e",
                                            "rank": "0", "seconds": 1}).status_code == 202
    edge.profiles_asked = c.get("/healthz").headers["X-RL-Insight-Profiles"]
    poll()
    assert len(asked) == 2  # it moved: asked again
    poll()
    assert len(asked) == 2
    cap._quiet_until = 0.0  # QUIET_POLLS polls later, asked once more in any case
    poll()
    assert len(asked) == 3 and QUIET_POLLS > 1
