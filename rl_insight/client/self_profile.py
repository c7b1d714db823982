"""What a rank's process gives of itself when its host refuses ptrace (a container without
SYS_PTRACE) and py-spy cannot read it from outside: its own Python stacks, sampled from a
thread of its own with ``sys._current_frames()``, as speedscope JSON.

The node's lane actor asks (in its answer to the process's delivery check, so no call is
added) and the process answers through the same actor (rl_insight/collector/profiling.py).
Only frames of Python code are seen, and a thread holding the GIL in C code for long
delays the samples; said in the profile's method, ``self-sampled``.
"""

from __future__ import annotations

import sys
import threading
import time

from rl_insight.collector.profiling import top_frames

RATE_HZ = 50  # the sampler shares the GIL with the rank: half py-spy's rate
MAX_SECONDS = 60.0
# a sample is a thread's work when it was on a CPU this share of the time since its last
# (a thread that sleeps and ticks now and then is not: a fake engine's 20-Hz tick, next
# to nothing, came first in a profile of a busy loop, 2026-12-07)
BUSY_SHARE = 0.1
# why it came to this (ptrace refused, py-spy missing, client.profile_method=self) is in
# the lane actor's log and the client's settings, not here: it samples alike whatever the why
METHOD = "self-sampled (sys._current_frames)"


def sample(seconds: float, rate: int = RATE_HZ) -> dict:
    """This process's threads' stacks, ``rate`` times a second for ``seconds``, each
    sample of a thread that worked since its last: the sampler's own thread left out, a
    thread parked in threading's waits or a selector, and one that used under BUSY_SHARE
    of the time since its last sample on a CPU (a sleep, a blocking call into C, a tick
    now and then); where a thread's CPU clock cannot be read, one whose innermost frame
    stood still."""
    me = threading.get_ident()
    frames: list[dict] = []
    index: dict[tuple[str, str, int], int] = {}
    samples: list[list[int]] = []
    last: dict[int, tuple[tuple[int, int], int | None, int]] = {}  # where, CPU, wall
    clocks: dict[int, int | None] = {}
    end = time.monotonic() + min(seconds, MAX_SECONDS)
    period = 1.0 / rate
    started = time.time()
    while time.monotonic() < end:
        for tid, frame in sys._current_frames().items():
            if tid == me or _waiting(frame):
                last.pop(tid, None)
                continue
            where, cpu, now = (id(frame), frame.f_lasti), _cpu_ns(tid, clocks), \
                time.monotonic_ns()
            before = last.get(tid)
            last[tid] = (where, cpu, now)
            if before is None:
                continue  # its first look: what it does from here on is sampled
            if cpu is not None and before[1] is not None:
                if cpu - before[1] < BUSY_SHARE * (now - before[2]):
                    continue  # (nearly) off the CPU since its last sample
            elif before[0] == where:
                continue  # its frame stood still
            stack = []
            f = frame
            while f is not None:
                code = f.f_code
                key = (code.co_name, code.co_filename, f.f_lineno)
                i = index.get(key)
                if i is None:
                    i = index[key] = len(frames)
                    frames.append({"name": key[0], "file": key[1], "line": key[2]})
                stack.append(i)
                f = f.f_back
            samples.append(stack[::-1])  # root first
        time.sleep(period)
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames},
            "profiles": [{"type": "sampled", "name": "self-sampled", "unit": "seconds",
                          "startValue": 0, "endValue": time.time() - started,
                          "samples": samples, "weights": [period] * len(samples)}],
            "exporter": "rl-insight self_profile", "name": "rank profile"}


def _cpu_ns(ident: int, clocks: dict[int, int | None]) -> int | None:
    """The thread's CPU time so far (its POSIX CPU clock: read without giving the GIL
    up, unlike /proc); None where there is none (not POSIX, a thread gone). ``clocks``
    caches ident -> clock id."""
    try:
        if ident not in clocks:
            clocks[ident] = time.pthread_getcpuclockid(ident)
        clock = clocks[ident]
        return None if clock is None else time.clock_gettime_ns(clock)
    except (AttributeError, OSError, OverflowError):
        clocks[ident] = None
        return None


# where a parked thread's innermost Python frame is: the waits of threading (a lock, a
# condition, an event, a queue, a future, a join) and a selector's poll; a thread busy in
# threading's other code (``is_alive`` in a loop) is not parked
# (a join's wait, in _wait_for_tstate_lock, is told by its frame and CPU time standing
# still: is_alive calls it too, busy)
WAITS = {"threading.py": ("wait",), "selectors.py": ("select",)}


def _waiting(frame) -> bool:
    """A thread parked in a lock, queue or selector: no one's work (py-spy leaves idle
    samples out likewise)."""
    code = frame.f_code
    names = WAITS.get(code.co_filename.rsplit("/", 1)[-1])
    return names is not None and code.co_name in names


def answer(req: dict, reply) -> threading.Thread:
    """Sample on a short-lived thread and hand the outcome to ``reply(id, outcome)``;
    nothing raises into the process."""
    def run() -> None:
        outcome: dict = {"method": METHOD}
        try:
            data = sample(float(req.get("seconds", 5.0)))
            outcome.update(data=data, top_frames=top_frames(data))
        except Exception as exc:
            outcome["error"] = f"self-sampling failed: {type(exc).__name__}: {exc}"
        try:
            reply(req["id"], outcome)
        except Exception:
            pass

    t = threading.Thread(target=run, name=f"rl-insight-self-profile-{req.get('id')}",
                         daemon=True)
    t.start()
    return t
