"""Profiles of trainer ranks, captured by their node's lane actor: it asks the server for
pending requests (rl_insight/server/analyses/profiles.py) once every
``client.profile_poll_s``, takes those of the rank lanes it serves, samples the process
that sent that lane with py-spy (``record --nonblocking``: the rank is never paused) and
answers with the profile as speedscope JSON and its top frames.

Only a process that sent spans of the requested rank lane of that run, on this node, is
ever sampled: the request names a run and a rank, never a pid. Where the host refuses
ptrace (a container without SYS_PTRACE, a non-root user under Yama's ptrace_scope), or
py-spy is missing, the answer says so and what to change.

The HTTP calls run on the lane actor's tick; the capture (a subprocess with its own
deadline) on a short-lived thread of its own, one at a time.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from rl_insight.wire import paths

log = logging.getLogger(__name__)

QUIET_POLLS = 12  # with the server's count unchanged, pending requests asked this rarely
RATE_HZ = 100  # py-spy's samples a second
PY_SPY, SELF = "py-spy", "self"  # client.profile_method
# beyond its seconds, for a process sampling itself to answer: it is asked with its next
# delivery check, which comes with its next state change (a phase's start or end)
SELF_WAIT_S = 300.0
TOP = 10
# frames of the interpreter and of Ray's worker loop: where an idle rank waits, not its code
RUNTIME_FILES = ("threading.py", "/ray/_private/", "/ray/_raylet", "selectors.py",
                 "asyncio/", "concurrent/futures/")


class CaptureError(Exception):
    """Why a capture could not be made, and what to change; ``self_help``: the process
    can still sample itself (ptrace refused, or py-spy missing)."""

    def __init__(self, message: str, self_help: bool = False) -> None:
        super().__init__(message)
        self.self_help = self_help


def py_spy() -> str | None:
    """py-spy beside this interpreter (Ray's ``ray[default]`` installs it), or on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def record(pid: int, seconds: float, rate: int = RATE_HZ) -> dict:
    """The process's stacks sampled for ``seconds``, as speedscope JSON."""
    exe = py_spy()
    if exe is None:
        raise CaptureError(f"py-spy is not installed on {socket.gethostname()}: `pip "
                           "install py-spy` in the Ray workers' environment (ray[default] "
                           "brings it)", self_help=True)
    with tempfile.TemporaryDirectory(prefix="rl-insight-profile-") as tmp:
        out = Path(tmp) / "profile.json"
        argv = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
                "--rate", str(rate), "--format", "speedscope", "--output", str(out),
                "--nonblocking"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            raise CaptureError(f"py-spy did not finish within {seconds + 30:.0f} s") from None
        if done.returncode != 0 or not out.exists():
            why = _why(done.stderr or done.stdout, pid)
            raise CaptureError(why, self_help="ptrace" in why)
        return json.loads(out.read_text())


def _why(text: str, pid: int) -> str:
    low = text.lower()
    if "permission" in low or "operation not permitted" in low or "ptrace" in low:
        return (f"the host refused to let py-spy read process {pid} (ptrace): run the "
                "container with --cap-add SYS_PTRACE (Kubernetes: securityContext."
                "capabilities.add [SYS_PTRACE]), or as a non-root user set "
                f"kernel.yama.ptrace_scope=0. py-spy said: {text.strip()[-300:]}")
    if "no such process" in low or "failed to find process" in low:
        return f"process {pid} is gone (the rank ended or restarted)"
    return f"py-spy failed: {text.strip()[-500:]}"


def top_frames(profile: dict, n: int = TOP) -> list[dict]:
    """The functions the samples were in, most first: self share (the sample's own
    frame) and total share (anywhere on its stack), runtime frames left out of self. A
    function is one entry whatever line its samples were on (py-spy names frames by line):
    its line is the one most samples were on."""
    frames = profile.get("shared", {}).get("frames", [])
    key = [(f.get("name", "?"), f.get("file", "")) for f in frames]
    own: Counter = Counter()
    total: Counter = Counter()
    lines: Counter = Counter()
    samples = 0
    for prof in profile.get("profiles", []):
        weights = prof.get("weights") or [1] * len(prof.get("samples", []))
        for stack, w in zip(prof.get("samples", []), weights, strict=False):
            samples += w
            leaf = next((i for i in reversed(stack) if not _runtime(frames[i])), None)
            if leaf is not None:
                own[key[leaf]] += w
                lines[(key[leaf], frames[leaf].get("line"))] += w
            for k in {key[i] for i in stack}:
                total[k] += w
    if not samples:
        return []
    out = []
    for k, count in own.most_common(n):
        line = max((ln for (kk, ln) in lines if kk == k), key=lambda ln: lines[(k, ln)])
        out.append({"name": k[0], "file": k[1], "line": line,
                    "self_share": round(count / samples, 4),
                    "total_share": round(total[k] / samples, 4)})
    return out


def _runtime(frame: dict) -> bool:
    file = frame.get("file", "") or ""
    return any(part in file for part in RUNTIME_FILES)


class Captures:
    """A lane actor's side of profiles: poll, take, capture, answer."""

    def __init__(self, sender, name: str, poll_s: float,
                 process_of: Callable[[str, str, str], str | None],
                 method: str = PY_SPY) -> None:
        self.sender = sender
        self.name = name
        self.poll_s = poll_s
        self.method = method  # PY_SPY, or SELF: the process samples itself
        self.process_of = process_of  # (project, experiment, lane) -> "host:pid" or None
        self.host = socket.gethostname()
        self._next = 0.0
        self._asked: str | None = None  # the server's count when last asked
        self._quiet_until = 0.0
        self._running: tuple[dict, threading.Thread, dict] | None = None
        # the process's own sampling, where py-spy could not read it: process -> request,
        # handed to it with its next delivery check (LaneActor.confirmed), and its answer
        self.asks: dict[str, dict] = {}
        self._self: dict | None = None  # {req, outcome, deadline, reason}
        self._answers: dict[str, dict] = {}
        self._lock = threading.Lock()

    def tick(self, serves_ranks: bool) -> None:
        """Answer a finished capture; ask for requests when due and idle."""
        if self._running is not None:
            req, thread, outcome = self._running
            if thread.is_alive():
                return
            self._running = None
            if outcome.pop("self_help", False):
                self._ask_process(req, outcome)
            else:
                self._answer(req, outcome)
        if self._self is not None and not self._self_done():
            return
        now = time.monotonic()
        if not serves_ranks or now < self._next:
            return
        self._next = now + self.poll_s
        # the server says with every answer how many profiles were asked for: asked
        # only when that moved (or once a QUIET_POLLS polls' time, in case), a run of
        # 1,000 ranks outside Ray sends no request a rank for nothing
        asked = getattr(self.sender, "profiles_asked", None)
        if asked is not None and asked == self._asked and now < self._quiet_until:
            return
        self._quiet_until = now + QUIET_POLLS * self.poll_s
        status, body = self.sender.call_json("GET", paths.PROFILES, "profile requests",
                                             status="pending")
        if status == 200:
            self._asked = asked
        if status != 200 or not isinstance(body, dict):
            return
        for req in body.get("profiles", []):
            process = self.process_of(req["project"], req["experiment_name"], req["lane"])
            if process is None:
                continue
            host, _, pid = process.rpartition(":")
            if host != self.host or not pid.isdigit():
                continue
            status, _ = self.sender.call_json("POST", paths.PROFILE_TAKE.format(pid=req["id"]),
                                              "profile take", {"by": self.name})
            if status != 200:
                continue  # another actor took it, or it expired
            self._start(req, int(pid), process)
            return  # one capture at a time

    def _start(self, req: dict, pid: int, process: str) -> None:
        outcome: dict = {"process": process, "method": "py-spy record"}
        if self.method == SELF:
            self._ask_process(req, {**outcome, "error": "client.profile_method=self"})
            return

        def run() -> None:
            try:
                data = record(pid, float(req["seconds"]))
                outcome.update(data=data, top_frames=top_frames(data))
            except CaptureError as exc:
                outcome["error"] = str(exc)
                outcome["self_help"] = exc.self_help
            except Exception as exc:  # never the lane actor's loss
                outcome["error"] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=run, name=f"rl-insight-profile-{req['id']}",
                                  daemon=True)
        thread.start()
        self._running = (req, thread, outcome)

    def _ask_process(self, req: dict, outcome: dict) -> None:
        """py-spy could not read the process: it samples itself (client/self_profile.py),
        asked with its next delivery check."""
        process = outcome["process"]
        with self._lock:
            self.asks[process] = {"id": req["id"], "seconds": req["seconds"]}
        self._self = {"req": req, "process": process, "why": outcome["error"],
                      "deadline": time.monotonic() + float(req["seconds"]) + SELF_WAIT_S}

    def asks_for(self, process: str) -> list[dict]:
        """What ``process`` is asked to sample of itself (taken once)."""
        with self._lock:
            ask = self.asks.pop(process, None)
        return [ask] if ask else []

    def answered(self, pid: str, outcome: dict) -> None:
        """A process's own samples (LaneActor.profile_answer, on Ray's thread)."""
        with self._lock:
            self._answers[pid] = outcome

    def _self_done(self) -> bool:
        """Whether the process's own answer came (answered) or its time ran out."""
        pending = self._self
        req = pending["req"]
        with self._lock:
            got = self._answers.pop(req["id"], None)
        if got is None and time.monotonic() < pending["deadline"]:
            return False
        self._self = None
        with self._lock:
            self.asks.pop(pending["process"], None)
        if got is None:
            got = {"error": f"{pending['why']}; and the process did not sample itself "
                            f"within {SELF_WAIT_S:.0f} s (is its client this version?)"}
        got.setdefault("process", pending["process"])
        self._answer(req, got)
        return True

    def _answer(self, req: dict, outcome: dict) -> None:
        if outcome.get("error"):  # the server keeps it with the profile too
            log.warning("rl-insight: profile %s of rank %s of %s/%s: %s", req["id"],
                        req["rank"], req["project"], req["experiment_name"],
                        outcome["error"])
        self.sender.call_json("POST", paths.PROFILE_RESULT.format(pid=req["id"]), "profile result",
                              outcome)
