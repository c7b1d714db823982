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
# why it came to this (ptrace refused, py-spy missing, client.profile_method=self) is in
# the lane actor's log and the client's settings, not here: it samples alike whatever the why
METHOD = "self-sampled (sys._current_frames)"


def sample(seconds: float, rate: int = RATE_HZ) -> dict:
    """This process's threads' stacks, ``rate`` times a second for ``seconds``: the
    sampler's own thread left out, and threads that waited the whole time (parked in a
    lock or a queue, or blocked in one call of C code: their innermost frame never moved)."""
    me = threading.get_ident()
    frames: list[dict] = []
    index: dict[tuple[str, str, int], int] = {}
    per_thread: dict[int, list[list[int]]] = {}
    moved: dict[int, set] = {}
    end = time.monotonic() + min(seconds, MAX_SECONDS)
    period = 1.0 / rate
    started = time.time()
    cpu_before = thread_cpu()
    rounds = 0
    while time.monotonic() < end:
        rounds += 1
        for tid, frame in sys._current_frames().items():
            if tid == me or _waiting(frame):
                continue
            moved.setdefault(tid, set()).add((id(frame), frame.f_lasti))
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
            per_thread.setdefault(tid, []).append(stack[::-1])  # root first
        time.sleep(period)
    busy = _busy(per_thread, moved, cpu_before, thread_cpu(), rounds)
    samples = [s for tid, got in per_thread.items() if tid in busy for s in got]
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames},
            "profiles": [{"type": "sampled", "name": "self-sampled", "unit": "seconds",
                          "startValue": 0, "endValue": time.time() - started,
                          "samples": samples, "weights": [period] * len(samples)}],
            "exporter": "rl-insight self_profile", "name": "rank profile"}


def thread_cpu() -> dict[int, int] | None:
    """Each thread's CPU time so far (clock ticks, by its ``threading`` ident) from
    /proc/self/task; None where there is no /proc (not Linux)."""
    out = {}
    try:
        for t in threading.enumerate():
            if t.native_id is None:
                continue
            with open(f"/proc/self/task/{t.native_id}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            out[t.ident] = int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return None
    return out


def _busy(per_thread: dict[int, list], moved: dict[int, set], before: dict[int, int] | None,
          after: dict[int, int] | None, rounds: int) -> set[int]:
    """The threads that worked while sampled: those the kernel says used CPU time (a
    busy loop gives the GIL up at the same instruction each time, so its frame can look
    parked); where it cannot say, those whose frame moved. With under 3 rounds (a
    sampler the machine starved) nothing can be told apart: every thread."""
    if rounds < 3:
        return set(per_thread)
    out = set()
    for tid in per_thread:
        if before is not None and after is not None and tid in before and tid in after:
            if after[tid] > before[tid]:
                out.add(tid)
        elif len(moved[tid]) > 1:
            out.add(tid)
    return out


# where a parked thread's innermost Python frame is: the waits of threading (a lock, a
# condition, an event, a queue, a future, a join) and a selector's poll; a thread busy in
# threading's other code (``is_alive`` in a loop) is not parked
WAITS = {"threading.py": ("wait", "_wait_for_tstate_lock"), "selectors.py": ("select",)}


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
