"""The one source of defaults for RL-Insight: every host, port, path and tunable, in
:class:`Settings` and its sections (rl_insight/config/__init__.py says how values are
layered over them: rl_insight/config/loading.py). Every section is frozen: the settings a
process runs with are built once, and a part that holds them (a client, the server's
state, an actor) can count on them not changing under it."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_HOME = "~/.rl-insight"
CONFIG_ENV = "RL_INSIGHT_CONFIG"
# A training process's own variables (rl_insight/client/configuration.py resolves them):
# where it sends, whether it is on (verl's switch), and the run it names
SERVER_URL_ENV = "RL_INSIGHT_SERVER_URL"
OTLP_ENV = "RL_INSIGHT_OTLP_ENDPOINT"
ENABLE_ENV = "VERL_RL_INSIGHT_ENABLE"
PROJECT_ENV = "RL_INSIGHT_PROJECT"
EXPERIMENT_ENV = "RL_INSIGHT_EXPERIMENT_NAME"
# upstream rl-insight main after 0.3.0 (verl-project/rl-insight#190; its
# tests/monitor/ut/utils/test_monitor_config_loader.py at 72763bee): the client backend
# (``server.backend``) for processes that call init() without the trainer's config
BACKEND_ENV = "RL_INSIGHT_SERVER_BACKEND"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class ServerSettings:
    host: str = ""  # empty: the top-level `host`
    port: int = 18080
    advertise_host: str = ""  # the address printed for clients; empty: detected
    token: str = ""
    log_level: str = "info"
    # scrape targets must resolve into these networks (comma-separated CIDRs); empty: any
    allowed_networks: str = ""
    # a target registered before its run is named waits this long for the run before
    # Prometheus scrapes it without one: verl launches its engines in init_workers and
    # names the run in fit(), after the models loaded, which takes minutes at scale
    unbound_target_grace_s: float = 600.0
    # pushes and span exports in progress at once; beyond, 503 with Retry-After (the
    # senders keep their data and come back) instead of a queue without bound
    max_intake_inflight: int = 128
    # sync every commit of the state database to disk before answering: an acknowledged
    # write then survives a power cut too, not only a crash (SIGKILL), at the cost of a
    # sync per intake batch (docs/scaling.md, run G: on a busy disk the lane flush p99
    # went from 1.3 s to 7.8 s). Off: the log is synced at each checkpoint (every
    # push.persist_interval_s), so a power cut may take back those last seconds
    sync_commits: bool = False


@dataclass(frozen=True)
class PrometheusSettings:
    enabled: bool = True
    host: str = ""
    port: int = 9090
    binary: str = ""  # a configured path to a `prometheus` binary
    min_version: str = "2.42.0"
    version: str = "2.54.1"
    scrape_interval: str = "5s"
    retention: str = "15d"
    # every sample also goes to these (comma-separated) remote-write URLs, e.g. a
    # long-term store; the credentials below are written to files (mode 0600) that
    # prometheus.yml references, never into the YAML or onto a command line
    remote_write_urls: str = ""
    remote_write_username: str = ""
    remote_write_password: str = ""  # a secret: masked, passed to a detached server by env
    remote_write_bearer_token: str = ""  # a secret; instead of username/password


@dataclass(frozen=True)
class TempoSettings:
    enabled: bool = True
    host: str = ""
    port: int = 3200
    grpc_port: int = 9095
    otlp_grpc_port: int = 4317
    otlp_http_port: int = 4318
    binary: str = ""
    min_version: str = "2.3.0"
    version: str = "2.6.1"
    block_retention: str = "336h"
    # span metrics and service graphs from the spans, remote-written to Prometheus
    metrics_generator: bool = True


@dataclass(frozen=True)
class GrafanaSettings:
    enabled: bool = True
    host: str = ""
    port: int = 3000
    binary: str = ""  # a configured path to `bin/grafana` inside a Grafana home
    min_version: str = "10.0.0"
    version: str = "13.0.0"
    admin_user: str = "admin"
    admin_password: str = "admin"
    dashboards_dir: str = ""  # empty: the dashboards shipped in the package


@dataclass(frozen=True)
class InstallSettings:
    # Replaces https://github.com and https://dl.grafana.com in download URLs, for a
    # cluster that mirrors the upstream archives under the same paths.
    mirror: str = ""
    timeout_s: float = 30.0


@dataclass(frozen=True)
class PushSettings:
    """The pushgateway-compatible intake on /metrics/job/..."""

    max_body_bytes: int = 32 * 1024 * 1024
    max_series_per_group: int = 50_000
    max_series_total: int = 2_000_000
    finished_ttl_s: float = 3600.0  # groups of a finished run are dropped after this
    idle_ttl_s: float = 0.0  # groups not pushed for this long are dropped; 0: never
    persist_interval_s: float = 2.0


@dataclass(frozen=True)
class TraceSettings:
    """OTLP/HTTP intake on /v1/traces and its relay to Tempo through an on-disk spool."""

    relay_url: str = ""  # empty: Tempo's OTLP/HTTP receiver on tempo.otlp_http_port
    max_body_bytes: int = 64 * 1024 * 1024
    # a profiler file uploaded to POST /api/v1/import/<profiler>: spooled to disk as it
    # arrives, read streamed (`rl-insight import` reads files of any size)
    import_max_bytes: int = 1024 * 1024 * 1024
    spool_max_bytes: int = 1024 * 1024 * 1024
    relay_timeout_s: float = 10.0
    retry_initial_s: float = 0.5
    retry_max_s: float = 5.0
    max_lanes: int = 100_000
    # the text of spans (prompts, completions, reasoning): off (removed), redacted (a
    # hash and length), full (up to text_max_bytes): rl_insight/server/ingest/textpolicy.py
    text_policy: str = "off"
    text_max_bytes: int = 4096


@dataclass(frozen=True)
class ClientSettings:
    """Every training process (the client), and the hub and lane actors it starts."""

    buffer_max_events: int = 200_000  # full: the oldest are dropped and counted
    batch_size: int = 4096  # a full batch wakes the sender early
    flush_interval_s: float = 0.5
    # finish() and interpreter exit together wait at most this long, even with the server
    # gone: at the end of a run that takes hours, 3 s is not felt, and a healthy hub and
    # server take well under a second to confirm the last batch (a loaded one, more)
    exit_flush_timeout_s: float = 3.0
    hub_push_interval_s: float = 2.0
    max_series_per_run: int = 20_000
    histogram_buckets: str = ""  # comma-separated upper bounds; empty: the defaults
    # Lane actors: one per rollout replica (replica_<r>), one per Ray node for every other
    # lane of the processes on it (rank_<r>, per-request and per-trajectory lanes). Each
    # sends one request of spans and one of metrics per tick.
    # Prometheus reads the lane series every 5 s (prometheus.scrape_interval): ticking
    # faster only multiplies requests (a 1,000-GPU run's 628 lane actors: 126/s at 5 s)
    lane_flush_interval_s: float = 5.0
    lane_batch_size: int = 8192  # spans per request; a full batch wakes the actor early
    lane_max_pending_spans: int = 100_000
    # a lane actor exits this long after every job that sent to it has ended (and its
    # spans are out): the actors belong to the jobs, not to the cluster
    lane_exit_grace_s: float = 20.0
    # the hub forgets a run this long after its finish(), and the hub and lane actors a
    # process silent this long: actors that live for weeks of runs keep the live ones
    # (lane actors forget a run idle for an hour with no lane in a state)
    forget_after_s: float = 600.0
    lane_pool_size: int = 4  # ignored since pooled lanes go to their node's lane actor
    ray_namespace: str = "rl_insight"
    # platform mode (RL_INSIGHT_OTLP_ENDPOINT, no server): the hub (outside Ray, the
    # process) serves /metrics here for the platform's own Prometheus, as upstream
    # rl-insight does (prometheus.metrics_report_port, default 9092, on the node's
    # address: `metrics_host` empty); a taken port moves to a free one, said loudly
    metrics_host: str = ""
    metrics_port: int = 9092
    registration_retry_max_s: float = 30.0
    # events handed to the hub or a lane and not yet confirmed as sent on, kept to be
    # sent again if that actor restarts; beyond this, counted as dropped
    resend_max_events: int = 500_000
    # trace_state: besides one span per busy interval of a lane, a span per block (per
    # request), as a child of the interval; off, as it multiplies trace volume
    per_request_spans: bool = False
    # a lane actor with trainer rank lanes asks the server this often for profiles to
    # capture of its ranks (rl-insight profile): a request per node, never per rank
    profile_poll_s: float = 5.0
    # how a rank is profiled: "py-spy" (from its node's lane actor; a host that refuses
    # ptrace falls back to "self"), or "self" (the process samples its own stacks)
    profile_method: str = "py-spy"


@dataclass(frozen=True)
class HardwareSettings:
    """`attach(hardware=True)`: an agent per Ray node finds or starts exporters."""

    node_exporter_port: int = 9100
    dcgm_exporter_port: int = 9400
    npu_exporter_port: int = 8082
    start_node_exporter: bool = True  # when a node_exporter binary is installed
    node_exporter_binary: str = ""  # empty: prometheus-node-exporter or node_exporter
    fallback: bool = True  # serve psutil / nvidia-smi / npu-smi figures when none is found
    reconcile_interval_s: float = 10.0


@dataclass(frozen=True)
class AnatomySettings:
    """Step anatomy: where each step's time went, derived by the server from the replica
    and rank lanes' state spans and the trainer's step marks (lane ``trainer``)."""

    enabled: bool = True
    # a step is final this long after its end once every lane of the run has reported a
    # span ending after it, or max_wait_s after its end whatever the lanes reported
    settle_s: float = 3.0
    max_wait_s: float = 120.0
    keep_steps: int = 10_000  # rows kept per run for `rl-insight report`
    max_runs: int = 200  # runs followed at once; the least recently active is dropped
    median_steps: int = 20  # the recent steps the median step time is taken over
    expose_s: float = 3600.0  # a run's newest row stays on /metrics this long after its end
    # goodput and the GPU accounting (GPU-seconds per role and cause): GPUs behind each
    # replica lane (its tensor-parallel size) and each rank lane; 0: not told (one is
    # assumed, and the accounting says so; a rank that names its device counts one)
    gpus_per_replica: float = 0.0
    gpus_per_rank: float = 0.0
    # engine request spans held per run until their step is final (the oldest dropped,
    # counted): 128 replicas x 256 requests in flight is 32,768
    max_requests_per_run: int = 65_536


def duration_seconds(text: str) -> float | None:
    """``90s``, ``15m``, ``2h``, ``1d`` or plain seconds; None when it is none of them."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text or ""))
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass(frozen=True)
class ChangesSettings:
    """What changed over a run: the regression rule (rl_insight/anatomy/changes.py says
    what each setting does and docs/anatomy.md what the defaults measured) and what the
    server spends on ranking what moved with a change."""

    enabled: bool = True
    warmup_steps: int = 3  # a run's first steps (compilation, caches) are no baseline
    baseline_min_steps: int = 10  # steps before anything is tested
    baseline_max_steps: int = 60
    guard_steps: int = 12  # the newest steps kept out of the baseline
    window: int = 12  # the steps a change is tested over
    min_steps: int = 3  # a change lasts at least this many steps: one slow step is none
    threshold: float = 4.5  # the test statistic, in baseline spreads
    clip: float = 3.0  # one step weighs at most this many spreads
    floor: float = 0.01  # the smallest spread, relative to the baseline
    min_change: float = 0.02  # step time, throughput: the smallest change reported
    min_part_share: float = 0.01  # a part: the smallest change, of the step time
    recover_steps: int = 5
    accept_after: int = 50  # a change held this long is the run's new level
    # ranking what moved with an open change (Prometheus queries): again every this many
    # steps, looked at every rank_interval_s, at most max_series trainer scalars
    rank_every_steps: int = 5
    rank_interval_s: float = 5.0
    max_series: int = 2000
    before_steps: int = 20  # the steps before the onset a candidate is compared with


@dataclass(frozen=True)
class ProfileSettings:
    """Profiles of a trainer rank's code (``rl-insight profile``, POST /api/v1/profiles):
    captured in the cluster by the rank's node lane actor with py-spy, kept with their
    run (docs/anatomy.md, "The culprit's code")."""

    enabled: bool = True  # off: every request is refused, and nothing is captured
    default_seconds: float = 5.0
    max_seconds: float = 60.0
    min_interval_s: float = 60.0  # between two captures of one rank
    max_pending_per_run: int = 4
    max_per_run: int = 20  # kept per run: the oldest go first
    max_bytes: int = 4 * 1024 * 1024  # one profile's file
    pending_expire_s: float = 120.0  # a request no lane actor took: expired
    auto: bool = True  # a change that lives on one rank has that rank profiled once


@dataclass(frozen=True)
class AlertSettings:
    """Alerting rules generated for the managed Prometheus (the thresholds of each alert;
    see rl_insight/server/analyses/alert_rules.py)."""

    enabled: bool = True  # the rule file is written and loaded
    pending_for: str = "1m"  # how long a condition holds before an alert fires (`for:`)
    # no new step for max(stall_factor * the recent median step time, stall_min_s)
    stall_factor: float = 3.0
    stall_min_s: float = 120.0
    # gauges (names after rl_insight_monitor_, comma-separated) that must stay finite
    nonfinite_metrics: str = ("actor_pg_loss,actor_entropy,actor_grad_norm,actor_ppo_kl,"
                              "critic_vf_loss,critic_score_mean,critic_rewards_mean,"
                              "critic_advantages_mean")
    # a replica in one state max(state_stuck_factor * its usual time there over
    # state_stuck_window, state_stuck_min_s) plus one client.lane_flush_interval_s
    state_stuck_factor: float = 5.0
    state_stuck_min_s: float = 300.0
    state_stuck_window: str = "1h"
    kv_cache_usage_max: float = 0.95  # fraction 0..1 of the engine's KV cache
    preemptions_per_s_max: float = 1.0
    target_down_for: str = "1m"
    dropped_window: str = "5m"  # any event or span dropped within this window


@dataclass(frozen=True)
class AlertmanagerSettings:
    """Alertmanager, the optional fourth service: delivers the alerts Prometheus fires
    to the receivers configured here (webhooks, Slack, e-mail)."""

    enabled: bool = True
    host: str = ""
    port: int = 9093
    binary: str = ""  # a configured path to an `alertmanager` binary
    min_version: str = "0.25.0"  # Debian 12's prometheus-alertmanager
    version: str = "0.27.0"
    webhook_urls: str = ""  # comma-separated
    slack_api_url: str = ""  # a secret: masked, never on a command line
    slack_channel: str = ""
    email_to: str = ""
    email_from: str = ""
    smtp_smarthost: str = ""  # host:port
    smtp_auth_username: str = ""
    smtp_auth_password: str = ""  # a secret: masked, never on a command line
    group_wait: str = "10s"
    group_interval: str = "1m"
    repeat_interval: str = "4h"


@dataclass(frozen=True)
class SupervisorSettings:
    ready_timeout_s: float = 90.0
    stop_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    stable_after_s: float = 60.0  # a child up this long has its backoff reset
    check_interval_s: float = 0.25


@dataclass(frozen=True)
class Settings:
    home: str = DEFAULT_HOME
    host: str = "0.0.0.0"  # where every server of ours binds unless its section says
    server: ServerSettings = field(default_factory=ServerSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    tempo: TempoSettings = field(default_factory=TempoSettings)
    grafana: GrafanaSettings = field(default_factory=GrafanaSettings)
    install: InstallSettings = field(default_factory=InstallSettings)
    push: PushSettings = field(default_factory=PushSettings)
    traces: TraceSettings = field(default_factory=TraceSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    anatomy: AnatomySettings = field(default_factory=AnatomySettings)
    changes: ChangesSettings = field(default_factory=ChangesSettings)
    profiles: ProfileSettings = field(default_factory=ProfileSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings)
    supervisor: SupervisorSettings = field(default_factory=SupervisorSettings)

    # -- derived paths: one place decides the layout of RL_INSIGHT_HOME -------------
    @property
    def home_path(self) -> Path:
        return Path(os.path.expanduser(self.home)).resolve()

    @property
    def services_dir(self) -> Path:
        return self.home_path / "services"

    @property
    def data_dir(self) -> Path:
        return self.home_path / "data"

    @property
    def logs_dir(self) -> Path:
        return self.home_path / "logs"

    @property
    def run_dir(self) -> Path:
        return self.home_path / "run"

    @property
    def state_dir(self) -> Path:
        """What the server persists: targets, experiments, pushed groups, the spool."""
        return self.home_path / "state"

    @property
    def generated_dir(self) -> Path:
        """Configs generated for the managed services; rewritten at every start."""
        return self.home_path / "generated"

    def bind_host(self, section: str) -> str:
        """The host a section binds to: its own `host`, else the top-level one."""
        own = getattr(getattr(self, section), "host", "")
        return own or self.host
