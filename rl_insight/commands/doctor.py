"""`rl-insight doctor`: every item of a monitoring troubleshooting guide, checked by a
program. Each check answers ok, warn (works, with a caveat) or problem, with the fix in
one line. Runs on any training node, or inside a Ray job (`rl_insight.doctor.run()`),
where its probe tasks see exactly what that job's workers get.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from urllib.parse import urlparse

import requests

from rl_insight.client.core import ENABLE_ENV, SERVER_URL_ENV
from rl_insight.common import netaddr
from rl_insight.common.secret import TOKEN_ENV
from rl_insight.config import duration_seconds
from rl_insight.server.ingest.targets import describe_local_targets
from rl_insight.wire import laneid, paths

# the jobs verl registers rollout engines under (rollout_config.name)
ENGINE_JOBS = ("vllm", "sglang", "vllm_omni")

OK, WARN, PROBLEM, SKIPPED = "ok", "warn", "problem", "skipped"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


class Doctor:
    def __init__(self, server_url: str | None, project: str | None = None,
                 experiment: str | None = None, token: str | None = None,
                 ray_probe: bool = True, timeout: float = 5.0) -> None:
        self.url = (server_url or os.environ.get(SERVER_URL_ENV, "")).rstrip("/")
        self.project, self.experiment = project, experiment
        self.token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        self.ray_probe = ray_probe
        self.timeout = timeout
        self.checks: list[Check] = []
        self.report: dict | None = None

    # -- helpers -------------------------------------------------------------------------
    def add(self, name: str, status: str, detail: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, detail, fix))

    def get(self, path: str, **params):
        # reads of run data need the token too when the server has one (server/auth.py)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        r = requests.get(self.url + path, params=params, timeout=self.timeout,
                         headers=headers)
        r.raise_for_status()
        return r.json()

    @property
    def run_given(self) -> bool:
        return bool(self.project and self.experiment)

    # -- the checks ----------------------------------------------------------------------
    def run(self) -> list[Check]:
        self.check_env()
        if not self.url:
            return self.checks
        if not self.check_server():
            for name in ("token", "services", "traces", "targets", "replicas",
                         "engine statistics", "lanes", "workers"):
                self.add(name, SKIPPED, "the server cannot be reached")
            return self.checks
        self.check_token()
        self.check_services()
        self.check_traces()
        self.check_service_ports()
        self.check_local_targets()
        if self.run_given:
            self.check_targets()
            self.check_lanes()
        else:
            for name in ("targets", "replicas", "engine statistics", "lanes"):
                self.add(name, SKIPPED, "give --project and --experiment to check a run")
        if self.ray_probe:
            self.check_workers()
        return self.checks

    def check_env(self) -> None:
        if os.environ.get(SERVER_URL_ENV):
            self.add("RL_INSIGHT_SERVER_URL", OK, os.environ[SERVER_URL_ENV])
        else:
            self.add("RL_INSIGHT_SERVER_URL", PROBLEM, "not set in this process",
                     f"export {SERVER_URL_ENV}=http://<server-ip>:18080 (what `rl-insight "
                     "server start` prints) here and in every worker")
        if os.environ.get(ENABLE_ENV) == "1":
            self.add(ENABLE_ENV, OK, "1")
        else:
            self.add(ENABLE_ENV, PROBLEM, f"is {os.environ.get(ENABLE_ENV)!r}",
                     f"export {ENABLE_ENV}=1 (verl sets it when rl_insight is in "
                     "trainer.logger)")

    def check_server(self) -> bool:
        try:
            self.get(paths.HEALTH)
            self.report = self.get(paths.SERVICES)
        except (requests.RequestException, ValueError) as exc:
            host = urlparse(self.url).hostname or ""
            fix = ("check the address `rl-insight server status` prints and that its port "
                   "is open from this node")
            if netaddr.is_local_host(host):
                fix = ("this URL names this node itself; on a multi-node cluster give every "
                       "node the server's routable address (what `rl-insight server start` "
                       "prints, or server.advertise_host)")
            why = unreachable_why(exc, urlparse(self.url).port)
            self.add("server", PROBLEM, f"cannot reach {self.url}: {why}", fix)
            return False
        self.add("server", OK, f"{self.url} answers (version "
                               f"{self.report['server']['version']})")
        host = urlparse(self.url).hostname or ""
        self.loopback_url = netaddr.is_local_host(host)
        return True

    def check_token(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        r = requests.post(self.url + paths.FINISH, json={}, headers=headers,
                          timeout=self.timeout)  # an invalid body: nothing is changed
        if r.status_code == 401:
            self.add("token", PROBLEM, "the server refuses writes without its token"
                     if not self.token else "the server refuses this token",
                     f"set {TOKEN_ENV} to the server's token in every process")
        else:
            auth = self.report["server"].get("auth")
            self.add("token", OK, "accepted" if auth else "the server takes no token")

    def check_services(self) -> None:
        for svc in self.report["services"]:
            state = svc.get("state")
            if svc.get("ready"):
                self.add(f"service {svc['name']}", OK, f"ready on port {svc.get('port')}")
            elif state in ("not installed", "disabled"):
                what = {"tempo": "spans wait in the server's spool",
                        "grafana": "no dashboards",
                        "alertmanager": "alerts fire and are listed, but not delivered",
                        }.get(svc["name"], "no metrics are stored")
                self.add(f"service {svc['name']}", WARN, f"{state}: {what}",
                         "rl-insight server install (or --local-archive DIR)")
            else:
                self.add(f"service {svc['name']}", PROBLEM, f"{state} "
                         f"({svc.get('message') or 'not answering its readiness check'})",
                         f"see its log {svc.get('log')}; `rl-insight server status`")

    def check_traces(self) -> None:
        from rl_insight.collector.otlp_encode import encode
        from rl_insight.wire.events import Identity, Span

        project = self.project or "rl-insight-doctor"
        experiment = self.experiment or "doctor"
        lane = f"doctor_{uuid.uuid4().hex[:8]}"
        now = time.time_ns()
        payload = encode([(Identity(project, experiment), "doctor",
                           Span("doctor_probe", now - 1000, now, lane, ()))])
        headers = {"Content-Type": "application/x-protobuf"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            r = requests.post(self.url + paths.TRACES, data=payload, headers=headers,
                              timeout=self.timeout)
            seen = r.status_code == 200 and any(
                ln["lane"] == lane for ln in self.get(paths.LANES, project=project,
                                                      experiment_name=experiment)["lanes"])
        except (requests.RequestException, ValueError):
            seen = False
        if not seen:
            self.add("traces", PROBLEM, "a test span did not reach the server",
                     "check the token and that /v1/traces is reachable from this node")
            return
        traces = self.get(paths.SERVICES)["traces"]
        if traces["relay_up"] or traces["spooled_spans"] == 0:
            self.add("traces", OK, f"a test span arrived; relayed to {traces['relay_url']}")
        else:
            self.add("traces", WARN, f"a test span arrived, but {traces['spooled_spans']} "
                     f"spans wait in the spool: {traces['last_error'] or 'Tempo is down'}",
                     "start Tempo (rl-insight server install); spooled spans are replayed")

    def check_service_ports(self) -> None:
        """Every running service's port, as clients and browsers reach it, from this node:
        a firewall that lets the server through but not Grafana is named here."""
        host = urlparse(self.url).hostname or ""
        for svc in (self.report or {}).get("services", []):
            port = svc.get("port")
            # running, ready or not: a firewall rule on the monitoring host can fail the
            # server's own readiness probe of the very port this check is about
            if not port or not (svc.get("ready") or svc.get("pid")):
                continue
            if svc["name"] == "tempo":
                continue  # on loopback by design: spans go through the server's port
            why = reachable(host, int(port))
            name = f"port {svc['name']}"
            if why:
                self.add(name, WARN, f"{host}:{port} is not reachable from this node: {why}",
                         f"open port {port} on the monitoring host to this node if it needs "
                         f"{svc['name']} (browsers need Grafana)")
            else:
                self.add(name, OK, f"{host}:{port} reachable from this node")

    def check_local_targets(self) -> None:
        """Registrations that named the caller's own machine, as the server saw them."""
        log = (self.report or {}).get("local_targets") or {}
        said = describe_local_targets(log)
        if said:
            self.add("target addresses", PROBLEM if log.get("refused") else WARN, said,
                     "register the address Prometheus on the monitoring host can reach (the "
                     "node's IP, e.g. ray.util.get_node_ip_address()), not loopback or "
                     "0.0.0.0")

    def check_targets(self) -> None:
        try:
            data = self.get(paths.EXPERIMENT_TARGETS, project=self.project,
                            experiment_name=self.experiment)
        except requests.RequestException:
            self.add("targets", PROBLEM, f"no experiment {self.project}/{self.experiment}",
                     "check the names (`rl-insight server experiments list`); has the run "
                     "called rl_insight.init?")
            return
        targets = data["targets"]
        down = [t for t in targets if t.get("health") == "down"]
        slow = self.answered_again([t for t in down if TIMED_OUT in
                                    (t.get("last_error") or "")])
        for t in down:
            name, error = f"target {t['job_name']} {t['target']}", \
                t.get("last_error") or "no answer"
            if (t["job_name"], t["target"]) in slow:
                self.add(name, WARN, f"a scrape timed out ({error}), a later one did not",
                         "a busy host or a slow /metrics: if it lasts, raise "
                         "prometheus.scrape_interval (the scrape's timeout is the interval)")
            else:
                self.add(name, PROBLEM, f"down: {error}",
                         "check the process serves /metrics at that address and the "
                         "server's host can reach it")
        if len(slow) == len(down):
            self.add("targets", OK if targets else WARN,
                     f"{len(targets)} registered, none down"
                     + (f" ({len(slow)} slow to answer, above)" if slow else "")
                     if targets else
                     "none registered (rollout engines, TransferQueue)",
                     "" if targets else "register them with rl_insight.update_prometheus_"
                     "config or register_rollout_replicas")
        for t in targets:
            if (t["job_name"], t["target"]) in slow:
                t["health"] = "up"  # slow: its engine statistics are asked for below
        self.check_replicas(targets)

    def answered_again(self, timed_out: list[dict]) -> set[tuple[str, str]]:
        """The targets whose last scrape timed out that answer a scrape within three
        scrape intervals (5 s at least): slow on a busy host, not down. Watched, with a
        line on stderr, only when there are some."""
        if not timed_out:
            return set()
        interval = max(duration_seconds(t.get("scrape_interval") or "") or 0.0
                       for t in timed_out)
        watch = min(60.0, max(5.0, 3 * interval))
        print(f"rl-insight doctor: {len(timed_out)} target(s) timed out at their last "
              f"scrape; watching their next scrapes for {watch:.0f} s", file=sys.stderr)
        left = {(t["job_name"], t["target"]) for t in timed_out}
        again: set[tuple[str, str]] = set()
        end = time.monotonic() + watch
        while left and time.monotonic() < end:
            time.sleep(0.5)  # Prometheus scrapes on its own clock: this paces the asking
            try:
                rows = self.get(paths.EXPERIMENT_TARGETS, project=self.project,
                                experiment_name=self.experiment)["targets"]
            except (requests.RequestException, KeyError):
                break
            up = {(t["job_name"], t["target"]) for t in rows if t.get("health") == "up"}
            again |= left & up
            left -= up
        return again

    def check_replicas(self, targets: list[dict]) -> None:
        """Every replica lane (of any role: the policy's rollout, a teacher, a reward
        model) has its engine registered under the ``replica`` label verl gives it."""
        lanes = self.get(paths.LANES, project=self.project,
                         experiment_name=self.experiment)["lanes"]
        replicas = {laneid.replica_key(ln["lane"]): ln["lane"] for ln in lanes
                    if laneid.is_replica(ln["lane"])}
        rollout = [t for t in targets if t["job_name"] in ENGINE_JOBS]
        registered = {str(t["labels"].get("replica")) for t in rollout}
        missing = sorted(set(replicas) - registered, key=lambda k: laneid.sort_key(
            replicas[k]))
        if missing:
            self.add("replicas", PROBLEM, "replica lanes without a registered engine "
                     f"endpoint: {', '.join(replicas[m] for m in missing)}",
                     "register every replica's engine (rl_insight.register_rollout_replicas"
                     "(addresses, backend), or verl's RLInsightLogger.register_rollout_"
                     "metrics with labels [{'replica': <rank>}], a teacher's "
                     "[{'replica': '<role>_<rank>'}])")
        else:
            self.add("replicas", OK if rollout else SKIPPED,
                     f"{len(rollout)} engine endpoints registered" if rollout else
                     "no rollout replicas in this run")
        self.check_engine_stats(rollout)

    def check_engine_stats(self, rollout: list[dict]) -> None:
        up = [t for t in rollout if t.get("health") == "up"]
        if not up:
            self.add("engine statistics", SKIPPED, "no rollout target is up")
            return
        # over the last minute: a slow target's timed-out scrape left its series stale
        q = (f'count by (replica) (last_over_time({{__name__=~"vllm:num_requests_running|'
             f'sglang:num_running_reqs",project="{self.project}",'
             f'experiment_name="{self.experiment}"}}[1m]))')
        try:
            res = self.get(paths.PROMETHEUS_QUERY, query=q)["data"]["result"]
        except (requests.RequestException, KeyError, ValueError):
            self.add("engine statistics", SKIPPED, "Prometheus cannot be asked")
            return
        with_stats = {r["metric"].get("replica") for r in res}
        without = sorted({t["labels"].get("replica") for t in up} - with_stats)
        if without:
            self.add("engine statistics", PROBLEM,
                     f"replicas {', '.join(map(str, without))} serve /metrics without engine "
                     "statistics", "set disable_log_stats=False for the rollout engine")
        else:
            self.add("engine statistics", OK, f"{len(with_stats)} replicas report them")

    def check_lanes(self) -> None:
        lanes = self.get(paths.LANES, project=self.project,
                         experiment_name=self.experiment)["lanes"]
        lanes = [ln for ln in lanes if not ln["lane"].startswith("doctor_")]
        if not lanes:
            self.add("lanes", WARN, "no state spans from this run",
                     "wrap rollout and training phases in rl_insight.trace_state(...)")
            return
        last = max(ln["last_span_end"] for ln in lanes)
        age = time.time() - last
        self.add("lanes", OK if age < 300 else WARN,
                 f"{len(lanes)} lanes, last span {age:.0f}s ago",
                 "" if age < 300 else "is the run still going?")

    def check_workers(self) -> None:
        try:
            import ray
        except ImportError:
            self.add("workers", SKIPPED, "Ray is not installed here")
            return
        if not ray.is_initialized():
            if not os.environ.get("RAY_ADDRESS"):
                self.add("workers", SKIPPED, "not in a Ray job and RAY_ADDRESS is not set")
                return
            ray.init(log_to_driver=False)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) > 1 and getattr(self, "loopback_url", False):
            self.add("server URL", PROBLEM, f"{self.url} is a loopback address but the "
                     f"cluster has {len(nodes)} nodes",
                     "use the server's routable address (server.advertise_host)")
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=0)
        def probe():
            return {k: os.environ.get(k) for k in (SERVER_URL_ENV, ENABLE_ENV)}

        refs = {n["NodeManagerAddress"] + " " + n["NodeID"][:8]: probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote() for n in nodes}
        bad = []
        for node, ref in refs.items():
            try:
                env = ray.get(ref, timeout=60)
            except Exception as exc:
                bad.append(f"{node} (probe failed: {exc.__class__.__name__})")
                continue
            missing = [k for k, v in env.items() if not v or (k == ENABLE_ENV and v != "1")]
            if missing:
                bad.append(f"{node} misses {', '.join(missing)}")
        if bad:
            self.add("workers", PROBLEM, "; ".join(bad),
                     "give jobs the variables: rl_insight.ray.attach(), `ray job submit "
                     "--runtime-env \"$(rl-insight ray-env --path)\"`, or "
                     "RAY_RUNTIME_ENV_HOOK=rl_insight.ray.hooks.runtime_env_hook")
        else:
            self.add("workers", OK, f"workers on {len(nodes)} node(s) get the variables")


# how Prometheus (Go's net/http) says a scrape ran out of time (its scrape_timeout)
TIMED_OUT = "context deadline exceeded"


def unreachable_why(exc: BaseException, port: int | None = None) -> str:
    """What a failed connection says about the path: refused, dropped, unresolved, or
    another program on the port (``port`` names Ray's workers when they may hold it)."""
    text = f"{exc.__class__.__name__}: {exc}"
    if isinstance(exc, (requests.ConnectTimeout, socket.timeout, TimeoutError)) or \
            "timed out" in text:
        return ("timed out: a firewall between here and there drops the packets, or the "
                "host is down")
    if "Connection refused" in text or isinstance(exc, ConnectionRefusedError):
        return "connection refused: nothing listens on that address and port there"
    if "Name or service not known" in text or "resolve" in text.lower() or \
            isinstance(exc, socket.gaierror):
        return "the host name does not resolve from here"
    if "No route to host" in text or "unreachable" in text.lower():
        return "no route to that host from here"
    if "BadStatusLine" in text or "RemoteDisconnected" in text:
        hint = netaddr.ray_port_hint(port) if port else ""
        return ("something else listens there: it does not answer as an HTTP/1.1 server "
                "does (a gRPC or other service, not an RL-Insight server)"
                + (f"; {hint}" if hint else ""))
    return text[:200]


def reachable(host: str, port: int, timeout: float = 3.0) -> str:
    """'' when a TCP connection to host:port opens from here, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return ""
    except OSError as exc:
        return unreachable_why(exc)


def run(server_url: str | None = None, project: str | None = None,
        experiment: str | None = None, **kw) -> list[Check]:
    """Run every check (inside a Ray job the worker probe sees that job's env)."""
    return Doctor(server_url, project, experiment, **kw).run()


def render(checks: list[Check]) -> str:
    marks = {OK: "ok     ", WARN: "warn   ", PROBLEM: "PROBLEM", SKIPPED: "skipped"}
    lines = []
    for c in checks:
        lines.append(f"{marks[c.status]}  {c.name}: {c.detail}")
        if c.fix and c.status in (WARN, PROBLEM):
            lines.append(f"         fix: {c.fix}")
    problems = sum(c.status == PROBLEM for c in checks)
    lines.append(f"\n{problems} problem(s)" if problems else "\nall checks passed")
    return "\n".join(lines)


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
