"""Profiles of trainer ranks' code: requested (``rl-insight profile``, POST
/api/v1/profiles, or by the server when a change lives on one rank), captured in the
cluster by the rank's node lane actor (rl_insight/collector/profiling.py), kept here
with their run and forgotten with it.

Capturing a process's stacks is a privileged act, so a request names a run and a rank
lane that run's processes have sent spans of (never a pid: the lane actor captures only
the processes that sent that lane), needs the server's token (every write does), is
rate-limited per rank and per run, and ``profiles.enabled=false`` refuses all. The lane
actors ask for pending requests once every ``client.profile_poll_s`` per node.

Each profile's file is speedscope JSON (Perfetto and speedscope open it), bounded in size;
the index is a state file written atomically, so both survive SIGKILL and power loss.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from rl_insight.anatomy.ranks import frame_label
from rl_insight.common.files import read_state_json, write_atomic
from rl_insight.config import ProfileSettings
from rl_insight.wire import paths

PENDING, CAPTURING, DONE, FAILED, EXPIRED = "pending", "capturing", "done", "failed", "expired"
OPEN = (PENDING, CAPTURING)
FRAMES_EXPOSED = 3  # a profile's top frames on /metrics
MAX_PROFILES = 400  # kept in all, whatever the runs (each at most profiles.max_bytes)
# a capture taken but not answered this long after its seconds (beyond the lane actor's
# own wait for a process sampling itself: collector/profiling.py SELF_WAIT_S)
CAPTURE_GRACE_S = 360.0


class ProfileError(Exception):
    """A request refused: ``status`` the HTTP status, the message what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Profile:
    id: str
    project: str
    experiment_name: str
    rank: str
    seconds: float
    reason: str  # "on demand", or why the server asked (a change on this rank)
    requested_at: float
    status: str = PENDING
    taken_at: float | None = None
    taken_by: str = ""  # the lane actor that captures it
    finished_at: float | None = None
    method: str = ""  # "py-spy record", "py-spy dump", ...
    process: str = ""  # host:pid of the rank's process
    error: str = ""
    top_frames: list[dict] = field(default_factory=list)
    bytes: int = 0

    @property
    def lane(self) -> str:
        return f"rank_{self.rank}"

    def as_dict(self) -> dict:
        out = asdict(self)
        out["lane"] = self.lane
        return out


FIELDS = frozenset(Profile.__dataclass_fields__)


class ProfileStore:
    def __init__(self, settings: ProfileSettings, folder: Path,
                 known_lane=lambda project, experiment, lane: True) -> None:
        self.settings = settings
        self.folder = folder
        self.known_lane = known_lane
        self._lock = threading.Lock()
        self._profiles: dict[str, Profile] = {}
        self._index = folder / "index.json"
        # requests made since the server started: every answer carries it
        # (PROFILES_HEADER), so a process asks for pending ones only when it moved
        self.asked = 0

    # -- persistence ------------------------------------------------------------------
    def load(self) -> int:
        rows = read_state_json(self._index, [])
        with self._lock:
            for row in rows if isinstance(rows, list) else []:
                try:
                    p = Profile(**{k: v for k, v in row.items() if k in FIELDS})
                except TypeError:  # a row of another version, or edited by hand
                    continue
                if p.status in OPEN:  # the server stopped meanwhile: nobody answers it
                    p.status, p.error = FAILED, "the server restarted before it was captured"
                self._profiles[p.id] = p
            # a file written just before a stop, its index entry not (or one dropped)
            for f in self.folder.glob("*.speedscope.json"):
                if f.name.split(".", 1)[0] not in self._profiles:
                    f.unlink(missing_ok=True)
        return len(self._profiles)

    def _persist(self) -> None:
        """The index, written atomically (the caller holds the lock)."""
        write_atomic(self._index, json.dumps([p.as_dict() for p in self._profiles.values()],
                                             default=str))

    def _file(self, pid: str) -> Path:
        return self.folder / f"{pid}.speedscope.json"

    # -- requests -----------------------------------------------------------------------
    def request(self, project: str, experiment_name: str, rank: str,
                seconds: float | None = None, reason: str = "on demand",
                now: float | None = None) -> Profile:
        """A new request (ProfileError when refused, saying why and what to do)."""
        s = self.settings
        now = time.time() if now is None else now
        if not s.enabled:
            raise ProfileError(403, "profiles are off on this server (profiles.enabled="
                                    "false); set profiles.enabled=true and restart it")
        rank = str(rank)
        if not re.fullmatch(r"[0-9]{1,7}", rank):
            raise ProfileError(400, f"rank {rank!r}: a trainer rank's number (0, 1, ...)")
        if not self.known_lane(project, experiment_name, f"rank_{rank}"):
            raise ProfileError(404, f"no process of {project}/{experiment_name} has sent "
                                    f"spans of lane rank_{rank}: only a run's own ranks are "
                                    "profiled (check the names with `rl-insight server "
                                    "experiments list` and the rank with `rl-insight "
                                    "report --step N`; a rank is known once its first "
                                    "phase has ended)")
        seconds = s.default_seconds if seconds is None else float(seconds)
        if not 0 < seconds <= s.max_seconds:  # well-formed, over this server's limit
            raise ProfileError(422, f"seconds {seconds:g}: this server samples a rank "
                                    f"for at most {s.max_seconds:g} s "
                                    "(profiles.max_seconds); ask for fewer")
        with self._lock:
            self._expire(now)
            mine = [p for p in self._profiles.values()
                    if (p.project, p.experiment_name) == (project, experiment_name)]
            same = [p for p in mine if p.rank == rank]
            busy = [p for p in same if p.status in OPEN]
            if busy:
                raise ProfileError(429, f"rank {rank} is being profiled already "
                                        f"({busy[0].id}); wait for it: GET "
                                        + paths.PROFILE.format(pid=busy[0].id))
            last = max((p.requested_at for p in same), default=None)
            if last is not None and now - last < s.min_interval_s:
                raise ProfileError(429, f"rank {rank} was profiled {now - last:.0f} s ago; "
                                        f"a rank is profiled at most once every "
                                        f"{s.min_interval_s:g} s (profiles.min_interval_s)")
            if sum(p.status in OPEN for p in mine) >= s.max_pending_per_run:
                raise ProfileError(429, f"{s.max_pending_per_run} profiles of this run are "
                                        "waiting to be captured "
                                        "(profiles.max_pending_per_run); try again when "
                                        "they are done")
            p = Profile(secrets.token_hex(8), project, experiment_name, rank, seconds,
                        reason, now)
            self._profiles[p.id] = p
            self.asked += 1
            self._bound(project, experiment_name)
            self._persist()
            return p

    def _bound(self, project: str, experiment_name: str) -> None:
        """At most max_per_run a run, and MAX_PROFILES in all (a run that never finishes
        is never forgotten): the oldest go first."""
        mine = sorted((p for p in self._profiles.values()
                       if (p.project, p.experiment_name) == (project, experiment_name)),
                      key=lambda p: p.requested_at)
        for p in mine[:max(0, len(mine) - self.settings.max_per_run)]:
            self._drop(p.id)
        every = sorted(self._profiles.values(), key=lambda p: p.requested_at)
        for p in every[:max(0, len(every) - MAX_PROFILES)]:
            self._drop(p.id)

    def _drop(self, pid: str) -> None:
        self._profiles.pop(pid, None)
        try:
            os.unlink(self._file(pid))
        except OSError:
            pass

    def _expire(self, now: float) -> None:
        for p in self._profiles.values():
            if p.status == PENDING and now - p.requested_at > self.settings.pending_expire_s:
                p.status, p.finished_at = EXPIRED, now
                p.error = ("no lane actor took it: is the run still going, and its ranks' "
                           "node lane actors up (`ray list actors`)? Outside Ray the "
                           "rank's own process takes it (a client of this version)")
            elif p.status == CAPTURING and p.taken_at is not None and \
                    now - p.taken_at > p.seconds + CAPTURE_GRACE_S:
                p.status, p.finished_at = FAILED, now
                p.error = f"{p.taken_by} took it and never answered"

    # -- the lane actors' side ----------------------------------------------------------
    def pending(self, now: float | None = None) -> list[dict]:
        """The requests waiting for a lane actor (few: bounded per run)."""
        with self._lock:
            self._expire(time.time() if now is None else now)
            return [p.as_dict() for p in self._profiles.values() if p.status == PENDING]

    def _in(self, pid: str, status: str) -> Profile:
        """The profile, which must be in ``status`` (the caller holds the lock)."""
        p = self._profiles.get(pid)
        if p is None:
            raise ProfileError(404, f"no profile {pid} (forgotten with its run?)")
        if p.status != status:
            raise ProfileError(409, f"profile {pid} is {p.status}, not {status}"
                                    + (f" ({p.taken_by})" if p.taken_by else ""))
        return p

    def take(self, pid: str, by: str, now: float | None = None) -> Profile:
        """A lane actor that serves the rank's lane takes the request (once)."""
        with self._lock:
            p = self._in(pid, PENDING)
            p.status, p.taken_by = CAPTURING, by
            p.taken_at = time.time() if now is None else now
            self._persist()
            return p

    def result(self, pid: str, outcome: dict, data: dict | None) -> Profile:
        """What the lane actor captured (``data``: speedscope JSON), or why it could not."""
        with self._lock:
            p = self._in(pid, CAPTURING)
            text = json.dumps(data) if data is not None else ""
            if len(text) > self.settings.max_bytes:
                p.status = FAILED
                p.error = (f"the capture was {len(text):,} bytes, over profiles.max_bytes "
                           f"({self.settings.max_bytes:,}): ask for fewer seconds")
            elif outcome.get("error"):
                p.status, p.error = FAILED, str(outcome["error"])[:2000]
            else:
                p.status = DONE
                if text:
                    write_atomic(self._file(pid), text)
                    p.bytes = len(text)
            p.method = str(outcome.get("method", ""))[:64]
            p.process = str(outcome.get("process", ""))[:256]
            p.top_frames = list(outcome.get("top_frames") or [])[:20]
            p.finished_at = time.time()
            self._persist()
            return p

    # -- reads --------------------------------------------------------------------------
    def list(self, project: str | None = None, experiment_name: str | None = None,
             rank: str | None = None) -> list[dict]:
        with self._lock:
            self._expire(time.time())
            return [p.as_dict() for p in sorted(self._profiles.values(),
                                                key=lambda p: p.requested_at)
                    if (project is None or p.project == project)
                    and (experiment_name is None or p.experiment_name == experiment_name)
                    and (rank is None or p.rank == str(rank))]

    def get(self, pid: str) -> dict | None:
        with self._lock:
            p = self._profiles.get(pid)
            return None if p is None else p.as_dict()

    def data(self, pid: str) -> str | None:
        """The speedscope file's text."""
        with self._lock:
            p = self._profiles.get(pid)
            if p is None or p.status != DONE or not p.bytes:
                return None
        try:
            return self._file(pid).read_text()
        except OSError:
            return None

    def forget(self, runs: set[tuple[str, str]]) -> int:
        """Profiles of runs forgotten by the server go with them."""
        with self._lock:
            gone = [pid for pid, p in self._profiles.items()
                    if (p.project, p.experiment_name) in runs]
            for pid in gone:
                self._drop(pid)
            if gone:
                self._persist()
            return len(gone)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """``rl_insight_profile_frame_share``: each kept profile's top frames (a few a
        profile, a few profiles a run), for the dashboard's table of the ranks' code."""
        fam = GaugeMetricFamily(
            "rl_insight_profile_frame_share", "Share of a rank profile's samples in this "
            "function's own code (rl-insight profile; GET /api/v1/profiles/<profile>)",
            labels=["project", "experiment_name", "rank", "profile", "frame", "reason"])
        with self._lock:
            done = [p for p in self._profiles.values() if p.status == DONE]
        for p in done:
            for f in p.top_frames[:FRAMES_EXPOSED]:
                fam.add_metric([p.project, p.experiment_name, p.rank, p.id,
                                frame_label(f), p.reason],
                               float(f.get("self_share") or 0.0))
        yield fam
