"""Start, watch, report on and stop the server and its services.

`run` is the server process itself (foreground). `start_detached` launches that process in
the background and follows its progress over HTTP. `status` and `stop` find a running
server through the run file.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import requests

from rl_insight.common import netaddr, secret
from rl_insight.config import Settings, env_name, with_values
from rl_insight.server import runfile
from rl_insight.server.app import create_app
from rl_insight.server.services import SERVICES, binaries
from rl_insight.server.services.base import Launch, PortUse, ServiceInfo
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import FULL_GC_EVERY_S, ServerState
from rl_insight.wire import paths

log = logging.getLogger(__name__)
Say = Callable[[str], None]
SERVER_CMDLINE_MARK = "server start"


class StartError(RuntimeError):
    """Start cannot go on; the message is one line that says what to change."""


def port_message(use: PortUse) -> str:
    flag = " or --port" if use.key == "server.port" else ""
    holder = netaddr.port_holder(use.port)
    who = f" by {holder}" if holder else ""
    if not holder or "ray" in holder.lower():
        hint = netaddr.ray_port_hint(use.port)
        who += f" ({hint})" if hint else ""
    return (f"port {use.port} is already in use on {use.host or '0.0.0.0'}{who}; it is "
            f"setting {use.key}: choose another with --set {use.key}=PORT{flag}, "
            f"{env_name(use.key)}, or the config file")


def server_port(settings: Settings) -> PortUse:
    return PortUse("server.port", settings.bind_host("server"), settings.server.port)


def plan(settings: Settings, launch: bool = True
         ) -> tuple[dict[str, ServiceInfo], dict[str, Launch]]:
    """What each service is (installed, version, source) and, with ``launch``, how the
    ones we can run will be launched (this writes their generated configs)."""
    infos: dict[str, ServiceInfo] = {}
    launches: dict[str, Launch] = {}
    for name, service in SERVICES.items():
        if not service.enabled(settings):
            infos[name] = ServiceInfo(name, False, False, message=f"disabled ({name}.enabled)")
            continue
        lookup = binaries.locate(service, settings)
        if lookup.found is None:
            why = "; ".join(lookup.passed_over)
            infos[name] = ServiceInfo(
                name, True, False,
                message="not installed: run `rl-insight server install` "
                        "(or --local-archive DIR on a machine without internet)"
                        + (f"; passed over {why}" if why else ""))
            continue
        f = lookup.found
        port = service.ports(settings)[0]
        url = netaddr.http_url(netaddr.local_host(port.host), port.port)
        infos[name] = ServiceInfo(name, True, True, f.version, str(f.path), f.source, url)
        if launch:
            launches[name] = service.launch(settings, f.path)
    return infos, launches


def check_ports(settings: Settings, names: Sequence[str]) -> None:
    """Fail with one clear line if any port we are about to bind is taken."""
    uses = [server_port(settings)]
    for name in names:
        uses += SERVICES[name].ports(settings)
    seen: dict[int, str] = {}
    for use in uses:
        if use.port in seen:
            raise StartError(f"port {use.port} is set for both {seen[use.port]} and "
                             f"{use.key}; give one of them another port")
        seen[use.port] = use.key
        if netaddr.port_in_use(use.host, use.port):
            raise StartError(port_message(use))


def running_server(settings: Settings) -> dict | None:
    """The run file of a live server, or None (a stale file is ignored)."""
    info = runfile.read(settings)
    if info and runfile.pid_alive(info.get("pid"), SERVER_CMDLINE_MARK):
        return info
    return None


def _ensure_dirs(settings: Settings) -> None:
    for d in (settings.home_path, settings.logs_dir, settings.run_dir, settings.data_dir,
              settings.generated_dir):
        d.mkdir(parents=True, exist_ok=True)


KEEP_ALIVE_S = 65
# Young collections every 2,000 net allocations (CPython's default: 700), full ones
# practically never by count but every state.FULL_GC_EVERY_S: at 1,000 GPUs' lane traffic
# with the defaults the server ran 168 full collections in 5 minutes (0.25 s each, every
# request waiting), a fifth of its CPU (docs/performance.md). Young ones every 20,000
# left 30,000-50,000 new objects to each collection, 20-50 ms of every request waiting
# on this machine; every 2,000, 2-5 ms, and the intake's p99 during a burst of 1,000
# registrations x1.04 of without instead of x3.4 (bench/registrations.py)
GC_THRESHOLDS = (2_000, 10, 1_000)


def _tune_gc(state: ServerState) -> None:
    """What the server loaded at start lives as long as it does: out of the collector's
    way (gc.freeze), and collections far less often for a heap of long-lived objects;
    full ones on the state's clock instead (state.FULL_GC_EVERY_S)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    state.full_gc_every_s = FULL_GC_EVERY_S


class _HttpThread:
    """uvicorn on a socket we bound ourselves (so a taken port is our error, not its)."""

    def __init__(self, app, sock, log_level: str) -> None:
        import uvicorn

        # keep-alive longer than any sender's tick (lane actors: 5 s by default), so a
        # pooled connection is never closed just as the next tick uses it
        # no X-Forwarded-* rewriting: nothing reads the client address, and uvicorn's
        # proxy-headers wrapper costs every request
        config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off",
                                timeout_keep_alive=KEEP_ALIVE_S, proxy_headers=False)
        self.server = uvicorn.Server(config)
        self.sock = sock
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="rl-insight-http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()


def run(settings: Settings, say: Say = print) -> int:
    """Run the server in this process until SIGINT or SIGTERM; then stop everything."""
    _ensure_dirs(settings)
    other = running_server(settings)
    if other:
        raise StartError(f"a server already runs from {settings.home_path} (pid "
                         f"{other['pid']}, {other['url']}); stop it with "
                         "`rl-insight server stop` or use another RL_INSIGHT_HOME")
    infos, launches = plan(settings)
    check_ports(settings, [n for n in launches])
    bind = settings.bind_host("server")
    try:
        sock = netaddr.bind_socket(bind, settings.server.port)
    except OSError:
        raise StartError(port_message(server_port(settings))) from None

    token, token_how = secret.server_token(settings)
    settings = with_values(settings, {"server.token": token})
    advertise, why = netaddr.choose_address(bind, settings.server.advertise_host)
    local_url = netaddr.http_url(netaddr.local_host(bind), settings.server.port)
    record = {"pid": os.getpid(), "url": local_url, "home": str(settings.home_path),
              "started_at": time.time(), "children": {}}
    lock = threading.Lock()

    def record_children(pids: dict[str, int | None]) -> None:
        with lock:
            record["children"] = {k: v for k, v in pids.items() if v}
            runfile.write(settings, record)

    supervisor = Supervisor(settings.supervisor, settings.logs_dir, record_children)
    for launch in launches.values():
        supervisor.add(launch)
    state = ServerState(settings, supervisor, infos, advertise_host=advertise,
                        advertise_reason=why)
    state.open()
    http = _HttpThread(create_app(state), sock, settings.server.log_level)
    _tune_gc(state)

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        runfile.write(settings, record)
        http.start()
        supervisor.start()
        say(f"RL-Insight server (pid {os.getpid()}) listening on "
            f"{netaddr.join_host_port(bind, settings.server.port)}; home {settings.home_path}")
        report = watch(state.services_report, settings.supervisor.ready_timeout_s, say,
                       stop=stop)
        if report is not None:
            say(summary(report, token_advice(settings, token_how,
                                             show=sys.stdout.isatty())))
        stop.wait()
        say("stopping: services first, then the server")
    finally:
        http.stop()
        state.close()
        supervisor.stop()
        runfile.remove(settings)
        for s, handler in previous.items():
            signal.signal(s, handler)
    say("stopped")
    return 0


def watch(get_report: Callable[[], dict | None], timeout: float, say: Say,
          stop: threading.Event | None = None,
          alive: Callable[[], bool] = lambda: True) -> dict | None:
    """Print a line whenever a service changes state until all are ready, the deadline
    passes, or ``alive`` turns false. Returns the last report."""
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    seen: dict[str, str] = {}
    last_note = t0
    report = None
    while time.monotonic() < deadline and alive() and not (stop and stop.is_set()):
        report = get_report() or report
        if report:
            for s in report["services"]:
                key = f"{s['state']}:{s.get('restarts', 0)}"
                if seen.get(s["name"]) != key:
                    seen[s["name"]] = key
                    say(f"  {s['name']:<11} {_describe(s)}  [{time.monotonic() - t0:.1f}s]")
            if report["all_ready"]:
                return report
        if time.monotonic() - last_note >= 5:
            last_note = time.monotonic()
            waiting = [s["name"] for s in (report or {}).get("services", [])
                       if s["state"] in ("starting", "restarting")]
            say(f"  ... waiting for {', '.join(waiting) or 'the server'} "
                f"({time.monotonic() - t0:.0f}s of {timeout:.0f}s)")
        time.sleep(0.2)
    if report and not report["all_ready"]:
        late = [s["name"] for s in report["services"]
                if s["state"] not in ("ready", "disabled", "not installed")]
        say(f"  not ready after {timeout:.0f}s: {', '.join(late)}; see their logs in "
            "`rl-insight server status`")
    return report


def _describe(s: dict) -> str:
    state = s["state"]
    if state == "not installed":
        return s.get("message") or "not installed"
    parts = [state]
    if s.get("pid"):
        parts.append(f"pid {s['pid']}")
    if s.get("restarts"):
        parts.append(f"{s['restarts']} restarts")
    if s.get("message"):
        parts.append(s["message"])
    return ", ".join(parts)


def token_advice(settings: Settings, how: str, show: bool = True) -> list[str]:
    """The export line for the write token (``how`` as :func:`secret.server_token` says)
    and, for one the server made, why and where it is kept. ``show=False`` names the file
    instead of the value: for output that goes to a log."""
    if how == "none":
        return []
    if how == "configured":
        return ["  export RL_INSIGHT_TOKEN=<your server.token>", *door_advice(settings)]
    path = secret.token_path(settings)
    note = (f"  # the server listens on {settings.bind_host('server') or '0.0.0.0'}, beyond "
            f"this machine, so writes need this token ({'made now' if how == 'made' else 'kept'}"
            f" in {path}, mode 0600; set server.token or bind host=127.0.0.1 instead)")
    value = secret.local_token(settings) if show else f"$(cat {path})"
    return [f"  export RL_INSIGHT_TOKEN={value}", note, *door_advice(settings)]


def door_advice(settings: Settings) -> list[str]:
    """Where the passwords of the services beyond loopback are (never the passwords)."""
    from rl_insight.server import doors

    out = []
    for service in doors.GUARDED:
        if getattr(settings, service).enabled and doors.guarded(settings, service):
            out.append(f"  # {service} beyond loopback wants user {doors.USER} and the "
                       f"password in {doors.password_path(settings, service)}")
    return out


def summary(report: dict, token_lines: Sequence[str] = ()) -> str:
    """The lines a user needs after start: every URL and the export lines."""
    c = report["clients"]
    lines = ["", "RL-Insight is up." if report["all_ready"] else "RL-Insight started, "
             "but not everything is ready (see above).",
             f"  {'server':<11} {c['server_url']:<32} ready"]
    host = c["server_url"].split("//", 1)[1].rsplit(":", 1)[0]
    for s in report["services"]:
        url = netaddr.http_url(host.strip("[]"), s["port"]) if s.get("port") else "-"
        what = s["state"]
        if s["state"] == "not installed":
            what = "not installed (run `rl-insight server install`)"
        elif s.get("version"):
            what += f" ({s['version']}, {s['source']})"
        lines.append(f"  {s['name']:<11} {url:<32} {what}")
    others = [f"{a} ({n})" for a, n in c.get("other_addresses", {}).items()
              if a != host.strip("[]")]
    lines += ["", f"Address for clients: {host.strip('[]')}, "
              f"{c.get('address_reason', 'chosen')}."]
    if others:
        lines.append(f"  This host also has {', '.join(others)}; if the cluster reaches it "
                     "there, set server.advertise_host.")
    lines += ["", "Point training at it (driver and every Ray worker):",
              f"  export RL_INSIGHT_SERVER_URL={c['server_url']}",
              "  export VERL_RL_INSIGHT_ENABLE=1", *token_lines, ""]
    return "\n".join(lines)


def fetch_report(url: str, timeout: float = 2.0) -> dict | None:
    try:
        r = requests.get(url.rstrip("/") + paths.SERVICES, timeout=timeout)
        return r.json() if r.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


# glibc gives each thread that allocates its own malloc arena; the server's request
# threads each kept tens of MB of freed /metrics and push buffers (733 MB of RSS at a
# 1,000-GPU run's lane traffic, bench/scale_tier.py). Two arenas; a user's setting wins.
SERVER_ENV = {"MALLOC_ARENA_MAX": "2"}


def start_detached(settings: Settings, args: Sequence[str],
                   secret_env: dict[str, str] | None = None, say: Say = print) -> int:
    """Launch `server start` (foreground) in a new session; follow it until ready."""
    _ensure_dirs(settings)
    other = running_server(settings)
    if other:
        raise StartError(f"a server already runs from {settings.home_path} (pid "
                         f"{other['pid']}, {other['url']}); `rl-insight server status` shows it")
    _, launches = plan(settings)
    check_ports(settings, list(launches))
    log_path = settings.logs_dir / "server.log"
    had_token = bool(secret.local_token(settings))
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rl_insight", "server", "start",
                                 *args], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**SERVER_ENV, **os.environ, **(secret_env or {})})
    say(f"server starting in the background (pid {proc.pid}, log {log_path})")
    url = netaddr.http_url(netaddr.local_host(settings.bind_host("server")),
                           settings.server.port)
    report = watch(lambda: fetch_report(url), settings.supervisor.ready_timeout_s, say,
                   alive=lambda: proc.poll() is None)
    if proc.poll() is not None:
        tail = _last_error(log_path)
        raise StartError(f"the server exited with code {proc.returncode}: {tail} "
                         f"(full log: {log_path})")
    if report is None:
        raise StartError(f"the server did not answer on {url}; see {log_path}")
    how = "configured" if settings.server.token else "kept" if had_token else "made"
    say(summary(report, token_advice(settings, how) if report["server"].get("auth") else []))
    return 0 if report["all_ready"] else 1


def _last_error(log_path) -> str:
    try:
        lines = [ln.strip() for ln in open(log_path, errors="replace").read().splitlines()
                 if ln.strip()]
    except OSError:
        return "no log"
    for ln in reversed(lines[-50:]):
        if ln.startswith("rl-insight:") or "error" in ln.lower():
            return ln
    return lines[-1] if lines else "no output"


def status(settings: Settings) -> tuple[dict, int]:
    """The report of a running server, or what is installed when none runs; and the
    exit code (0 only when everything configured and installed is ready)."""
    info = running_server(settings)
    report = fetch_report(info["url"]) if info else None
    if report is None:
        infos, _ = plan(settings, launch=False)
        services = [{**vars(i), "state": "not installed" if i.enabled and not i.installed
                     else ("disabled" if not i.enabled else "stopped"), "pid": None,
                     "ready": False, "restarts": 0, "port": None}
                    for i in infos.values()]
        why = ("not running" if info is None else
               f"pid {info['pid']} runs but does not answer on {info['url']}")
        return {"running": False, "message": why, "services": services,
                "all_ready": False}, 1
    report["running"] = True
    return report, 0 if report["all_ready"] else 1


def stop(settings: Settings, say: Say = print) -> int:
    """Stop a running server gracefully (it stops its services), then make sure no
    process it recorded is left."""
    info = runfile.read(settings)
    if info is None:
        say("no server is running from " + str(settings.home_path))
        return 0
    pid = info.get("pid")
    deadline = settings.supervisor.stop_timeout_s + 10
    if runfile.pid_alive(pid, SERVER_CMDLINE_MARK):
        say(f"stopping the server (pid {pid}) and its services ...")
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, deadline):
            say(f"the server did not stop within {deadline:.0f}s; killing it")
            _kill(pid)
    mark = str(settings.generated_dir)
    for name, child in (info.get("children") or {}).items():
        if runfile.pid_alive(child, mark):
            say(f"stopping leftover {name} (pid {child})")
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                continue
            if not _wait_gone(child, settings.supervisor.stop_timeout_s, mark):
                _kill(child)
    runfile.remove(settings)
    say("stopped")
    return 0


def _wait_gone(pid: int, timeout: float, mark: str = SERVER_CMDLINE_MARK) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not runfile.pid_alive(pid, mark):
            return True
        time.sleep(0.1)
    return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
