"""Runs the managed services as child processes: starts them, probes readiness,
restarts a child that dies with exponential backoff, and stops them with a deadline.

One monitor thread does all of it, so restarts are serialised and the state that
`status` reports is always consistent. Children get PR_SET_PDEATHSIG, so even a
SIGKILLed server leaves no orphans behind.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import requests

from rl_insight.common.childproc import die_with_parent
from rl_insight.config import SupervisorSettings
from rl_insight.server.services.base import Launch
from rl_insight.server.threads import supervised

log = logging.getLogger(__name__)

@dataclass
class ChildStatus:
    """Plain data about one child, as `status` shows it."""

    name: str
    state: str  # starting | ready | restarting | stopped | failed
    pid: int | None
    port: int
    ready: bool
    restarts: int
    last_exit_code: int | None
    log: str
    message: str = ""


class Child:
    """One supervised process. Only the supervisor's thread calls its methods."""

    def __init__(self, launch: Launch, log_path: Path, settings: SupervisorSettings,
                 base_env: dict[str, str]) -> None:
        self.launch = launch
        self.log_path = log_path
        self.settings = settings
        self.base_env = base_env
        self.proc: subprocess.Popen | None = None
        self.state = "stopped"
        self.ready = False
        self.restarts = 0
        self.last_exit_code: int | None = None
        self.started_at = 0.0
        self.next_start_at: float | None = None
        self.backoff = settings.backoff_initial_s
        self.last_probe = 0.0
        self.message = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**self.base_env, **self.launch.env}
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== rl-insight starting {self.launch.name}: "
                      f"{' '.join(self.launch.argv)}\n".encode())
            out.flush()
            try:
                self.proc = subprocess.Popen(
                    die_with_parent(self.launch.argv), cwd=self.launch.cwd, env=env,
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True)
            except OSError as exc:
                self.proc = None
                self.state, self.message = "failed", f"cannot execute: {exc}"
                log.error("%s: cannot start %s: %s", self.launch.name, self.launch.argv[0], exc)
                return
        self.state, self.ready, self.message = "starting", False, ""
        self.started_at = time.monotonic()
        self.next_start_at = None
        log.info("%s started, pid %d", self.launch.name, self.proc.pid)

    def tick(self, now: float, stopping: bool) -> str | None:
        """Notice an exit and schedule or perform a restart; the readiness URL when a
        probe is due (the caller probes it outside the supervisor's lock)."""
        if self.proc is not None and self.proc.poll() is not None and self.state != "stopped":
            code = self.proc.returncode
            self.last_exit_code = code
            self.ready = False
            if now - self.started_at >= self.settings.stable_after_s:
                self.backoff = self.settings.backoff_initial_s
            delay = self.backoff
            self.backoff = min(self.backoff * 2, self.settings.backoff_max_s)
            self.state = "restarting"
            self.message = f"exited with code {code}; restarting in {delay:.1f}s"
            self.next_start_at = now + delay
            self.proc = None
            log.warning("%s exited with code %s; restart %d in %.1fs (log: %s)",
                        self.launch.name, code, self.restarts + 1, delay, self.log_path)
        if self.state == "restarting" and not stopping and self.next_start_at is not None \
                and now >= self.next_start_at:
            self.restarts += 1
            self.start()
            log.warning("%s restarted (restart #%d)", self.launch.name, self.restarts)
        if self.proc is not None and self.state in ("starting", "ready"):
            period = 5.0 if self.ready else self.settings.check_interval_s
            if now - self.last_probe >= period:
                self.last_probe = now
                return self.launch.ready_url
        return None

    def probed(self, pid: int | None, ok: bool) -> None:
        """A probe's answer, for the process it was sent to (one that exited or was
        stopped meanwhile is not made ready by it)."""
        if self.pid != pid or self.state not in ("starting", "ready"):
            return
        if ok and not self.ready:
            log.info("%s ready at %s", self.launch.name, self.launch.ready_url)
            if self.launch.after_ready:
                threading.Thread(target=self._after_ready, daemon=True,
                                 name=f"{self.launch.name}-after-ready").start()
        self.ready = ok
        self.state = "ready" if ok else "starting"

    def _after_ready(self) -> None:
        """Run the service's follow-up commands off the supervisor's thread; a failure is
        logged with the command's own words and the service keeps running."""
        env = {**self.base_env, **self.launch.env}
        for argv, stdin in self.launch.after_ready:
            try:
                r = subprocess.run(argv, input=stdin, cwd=self.launch.cwd, env=env,
                                   capture_output=True, text=True, timeout=120)
                ok, said = r.returncode == 0, (r.stderr or r.stdout).strip()[-500:]
            except (OSError, subprocess.TimeoutExpired) as exc:
                ok, said = False, str(exc)
            command = " ".join(argv)  # no secret here: those go on stdin
            if ok:
                log.info("%s: `%s` done", self.launch.name, command)
            else:
                log.error("%s: `%s` failed: %s; run it by hand or see %s", self.launch.name,
                          command, said or "no output", self.log_path)

    def stop(self, deadline: float) -> None:
        """SIGTERM, wait until ``deadline``, then SIGKILL."""
        self.state = "stopped"
        self.ready = False
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.terminate()
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in time; killing it", self.launch.name)
            proc.kill()
            proc.wait(timeout=5)
        self.last_exit_code = proc.returncode

    def status(self) -> ChildStatus:
        return ChildStatus(self.launch.name, self.state, self.pid, self.launch.port,
                           self.ready, self.restarts, self.last_exit_code,
                           str(self.log_path), self.message)


# what a service may take from the server's environment: the basics of a process, the
# proxy and CA settings its outbound requests (remote write, plugin downloads) need, and
# Grafana's own GF_* settings. Not the server's token, remote-write and receiver secrets
# or anything else of the caller's: each service's own variables come with its Launch.
CHILD_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                       "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY",
                       "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"})
CHILD_ENV_PREFIXES = ("LC_", "GF_")


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a supervised service is given."""
    return {k: v for k, v in environ.items()
            if k in CHILD_ENV or k.startswith(CHILD_ENV_PREFIXES)}


def _probe(url: str, auth: tuple[str, str] | None = None) -> bool:
    try:
        return requests.get(url, timeout=1.0, auth=auth).status_code == 200
    except requests.RequestException:
        return False


class Supervisor:
    """Owns the children; `on_change` is told whenever a pid changes (for the run file)."""

    def __init__(self, settings: SupervisorSettings, logs_dir: Path,
                 on_change: Callable[[dict[str, int | None]], None] | None = None) -> None:
        self.settings = settings
        self.logs_dir = logs_dir
        self.on_change = on_change
        self.children: dict[str, Child] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._env = child_env(os.environ)

    def add(self, launch: Launch) -> None:
        self.children[launch.name] = Child(launch, self.logs_dir / f"{launch.name}.log",
                                           self.settings, self._env)

    def start(self) -> None:
        with self._lock:
            for child in self.children.values():
                child.start()
        self._notify()
        self._thread = supervised("rl-insight-supervisor", self._run, self._stop)
        self._thread.start()

    def _pids(self) -> dict[str, int | None]:
        return {name: c.pid for name, c in self.children.items()}

    def _notify(self) -> None:
        if self.on_change:
            try:
                self.on_change(self._pids())
            except Exception:  # a run-file write must not stop supervision
                log.exception("recording child pids failed")

    def _run(self) -> None:
        while not self._stop.is_set():
            before = self._pids()
            due: list[tuple[Child, int | None, str]] = []
            with self._lock:
                now = time.monotonic()
                for child in self.children.values():
                    try:
                        url = child.tick(now, self._stop.is_set())
                    except Exception:
                        log.exception("supervising %s failed", child.launch.name)
                        continue
                    if url:
                        due.append((child, child.pid, url))
            # up to a second each: outside the lock that status(), /metrics and the
            # status page take
            answers = [(child, pid, _probe(url, child.launch.ready_auth))
                       for child, pid, url in due]
            with self._lock:
                for child, pid, ok in answers:
                    child.probed(pid, ok)
            if self._pids() != before:
                self._notify()
            self._stop.wait(self.settings.check_interval_s)

    def status(self) -> list[ChildStatus]:
        with self._lock:
            return [c.status() for c in self.children.values()]

    def stop(self) -> None:
        """Stop supervision, then every child in parallel, within the stop deadline."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        deadline = time.monotonic() + self.settings.stop_timeout_s
        with self._lock:
            threads = [threading.Thread(target=c.stop, args=(deadline,))
                       for c in self.children.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self._notify()
