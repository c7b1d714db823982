"""Prometheus: its generated config, command line and upstream release.

The config scrapes the RL-Insight server (with honor_labels, so pushed series keep their
own job and instance) and every target the server writes as file-based discovery, loads
the generated alerting rules, sends what fires to the managed Alertmanager, and copies
every sample to the configured remote-write URLs. ``external_scrape_configs`` is the
same scraping for a Prometheus the server does not manage (HTTP service discovery).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from rl_insight.common import netaddr
from rl_insight.common.files import write_atomic
from rl_insight.common.secret import loopback_only
from rl_insight.config import ConfigError, Settings
from rl_insight.server import doors
from rl_insight.server.analyses import alert_rules
from rl_insight.server.services.base import (
    Launch,
    PortUse,
    Service,
    Upstream,
    version_at_least,
)
from rl_insight.wire import paths

SERVER_JOB = "rl_insight_server"
# Prometheus 2.49 added `scrape_protocols` (config/config.go); Debian's 2.42 refuses it.
SCRAPE_PROTOCOLS_SINCE = "2.49.0"
# Text first: engines answering through prometheus_client's negotiating app (SGLang 0.5.x,
# TransferQueue 0.1.11) keep `:` in names only in the text format; prometheus_client
# >= 0.23 writes `sglang_num_running_reqs` when OpenMetrics is negotiated.
TEXT_FIRST = ["PrometheusText0.0.4", "OpenMetricsText1.0.0", "OpenMetricsText0.0.1",
              "PrometheusProto"]
# Whatever the protocol, names an engine's OpenMetrics answer rewrote are restored, so the
# dashboards read `vllm:` and `sglang:` names from every Prometheus version. Prefixes:
# vLLM 0.33 `vllm:`, vLLM-Omni 0.30 `vllm_omni:`, SGLang 0.5.23 `sglang:` (upstream
# metric definitions; see shared upstream tables). A name that already has a colon is
# left alone (the `[^:]*`), so `vllm_omni:x` never becomes `vllm:omni:x`.
ENGINE_NAME_RELABEL = [
    {"source_labels": ["__name__"], "regex": "(vllm_omni|sglang|vllm)_([^:]*)",
     "target_label": "__name__", "replacement": "${1}:${2}"},
    # vLLM-Omni labels vllm:* with its own `replica` (and `stage`); Prometheus renames the
    # engine's to exported_replica beside the RL replica of the target: name it clearly
    {"source_labels": ["exported_replica"], "regex": "(.+)", "target_label":
     "engine_replica", "replacement": "${1}"},
    {"action": "labeldrop", "regex": "exported_replica"},
]
TARGETS_JOB = "rl_insight_targets"
# the server's route in Prometheus' HTTP service discovery format
SD_PATH = paths.PROMETHEUS_SD
# files beside prometheus.yml holding the remote-write credentials (mode 0600)
PASSWORD_FILE = "remote_write_password"
TOKEN_FILE = "remote_write_bearer_token"
SERVER_TOKEN_FILE = "server_token"  # the server's token, for scraping its /metrics


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _http_url(key: str, value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ConfigError(f"{key}: expected an http:// or https:// URL, got {value!r}")
    return value


def external_scrape_configs(server_url: str, refresh_interval: str = "30s",
                            token_file: str = "") -> list[dict]:
    """The scrape configs a Prometheus the server does not manage adds to scrape what the
    managed one would: the server's own /metrics (pushed run metrics; honor_labels keeps
    their job and instance) and every registered target through HTTP service discovery
    (one block for every job: each group carries its `job`). ``token_file``: where that
    Prometheus keeps the server's token (a server beyond loopback wants it for reads)."""
    parts = urlsplit(_http_url("--server-url", server_url.strip()))
    prefix = parts.path.rstrip("/")
    # Prometheus v2.42.0 and v2.54.1 scrape_config and http_sd_config `authorization`
    auth = {"authorization": {"type": "Bearer", "credentials_file": token_file}} \
        if token_file else {}
    server: dict = {"job_name": SERVER_JOB, "honor_labels": True, **auth}
    if parts.scheme == "https":
        server["scheme"] = "https"
    if prefix:
        server["metrics_path"] = prefix + paths.METRICS
    server["static_configs"] = [{"targets": [parts.netloc]}]
    base = f"{parts.scheme}://{parts.netloc}{prefix}"
    return [
        server,
        {
            "job_name": TARGETS_JOB,
            # Prometheus v2.42.0 and v2.54.1 discovery/http/http.go SDConfig: url,
            # refresh_interval (default 60s)
            "http_sd_configs": [{"url": base + SD_PATH, "refresh_interval": refresh_interval,
                                 **auth}],
            "metric_relabel_configs": ENGINE_NAME_RELABEL,
        },
    ]


def external_config_text(server_url: str, refresh_interval: str = "30s",
                         token_file: str = "") -> str:
    """``external_scrape_configs`` as the YAML an operator pastes into prometheus.yml
    (docs/server.md and the test use this same text)."""
    body = yaml.safe_dump({"scrape_configs": external_scrape_configs(
        server_url, refresh_interval, token_file)}, sort_keys=False)
    where = f"# {token_file} holds the server's token (RL_INSIGHT_TOKEN), readable by " \
            "Prometheus only\n" if token_file else ""
    return (f"# RL-Insight at {server_url}: add these jobs to your prometheus.yml\n"
            "# (under an existing scrape_configs: only the two list entries)\n" + where + body)


class Prometheus(Service):
    name = "prometheus"
    binary_names = ("prometheus",)
    upstream = Upstream(
        archive="prometheus-{version}.linux-{arch}.tar.gz",
        url="https://github.com/prometheus/prometheus/releases/download/v{version}/{archive}",
        checksum_url="https://github.com/prometheus/prometheus/releases/download/"
        "v{version}/sha256sums.txt",
    )

    def ports(self, settings: Settings) -> list[PortUse]:
        return [PortUse("prometheus.port", settings.bind_host("prometheus"),
                        settings.prometheus.port)]

    def targets_dir(self, settings: Settings) -> Path:
        """Where the server writes file_sd target files that Prometheus watches."""
        return settings.generated_dir / "targets"

    def render(self, settings: Settings, version: str = "",
               alertmanager: bool | None = None) -> dict:
        """The prometheus.yml as plain data, for the binary's ``version`` (empty: the
        oldest we accept, so nothing newer is written); alerts go to the managed
        Alertmanager when ``alertmanager`` (default: when it is enabled)."""
        p = settings.prometheus
        server = netaddr.join_host_port(netaddr.local_host(settings.bind_host("server")),
                                        settings.server.port)
        own = netaddr.join_host_port(netaddr.local_host(settings.bind_host("prometheus")),
                                     p.port)
        targets = self.targets_dir(settings)
        glob: dict = {"scrape_interval": p.scrape_interval,
                      "evaluation_interval": p.scrape_interval}
        if version and version_at_least(version, SCRAPE_PROTOCOLS_SINCE):
            glob["scrape_protocols"] = TEXT_FIRST
        out: dict = {"global": glob}
        if settings.alerts.enabled:
            out["rule_files"] = [str(alert_rules.rule_file(settings))]
        writes = self.remote_write(settings)
        if writes:
            out["remote_write"] = writes
        if settings.alertmanager.enabled if alertmanager is None else alertmanager:
            am = netaddr.join_host_port(
                netaddr.local_host(settings.bind_host("alertmanager")),
                settings.alertmanager.port)
            out["alerting"] = {"alertmanagers": [
                {"api_version": "v2", "static_configs": [{"targets": [am]}],
                 **doors.client_config(settings, "alertmanager")}]}
        return {
            **out,
            "scrape_configs": [
                {
                    "job_name": SERVER_JOB,
                    "honor_labels": True,
                    "static_configs": [{"targets": [server]}],
                    **self.server_auth(settings),
                },
                {"job_name": "prometheus", "static_configs": [{"targets": [own]}],
                 **doors.client_config(settings, "prometheus")},
                {
                    # The server writes one file per job; a group's `job` label names it.
                    "job_name": TARGETS_JOB,
                    "file_sd_configs": [
                        {"files": [str(targets / "*.json")], "refresh_interval": "5s"}
                    ],
                    "metric_relabel_configs": ENGINE_NAME_RELABEL,
                },
            ],
        }

    def server_auth(self, settings: Settings) -> dict:
        """The server's /metrics holds the runs' data: with a token (configured, or made
        because the server listens beyond loopback) the scrape sends it, from a file
        (``write_secrets``; Prometheus v2.42.0 and v2.54.1 scrape_config
        ``authorization``: type, credentials_file)."""
        if not (settings.server.token or
                not loopback_only(settings.bind_host("server"))):
            return {}
        return {"authorization": {"type": "Bearer", "credentials_file":
                                  str(self.work_dir(settings) / SERVER_TOKEN_FILE)}}

    def remote_write(self, settings: Settings) -> list[dict]:
        """One remote_write section per URL of ``prometheus.remote_write_urls``. The
        credentials are referenced by file (``write_secrets`` writes them), so neither
        prometheus.yml nor a command line holds them."""
        p = settings.prometheus
        urls = [_http_url("prometheus.remote_write_urls", u)
                for u in _csv(p.remote_write_urls)]
        if p.remote_write_bearer_token and (p.remote_write_username
                                            or p.remote_write_password):
            # Prometheus refuses both in one client config (common config/http_config.go
            # HTTPClientConfig.Validate: at most one of basic_auth, authorization, ...)
            raise ConfigError("prometheus.remote_write_bearer_token and "
                              "prometheus.remote_write_username/password exclude each other")
        if p.remote_write_password and not p.remote_write_username:
            raise ConfigError("prometheus.remote_write_password needs "
                              "prometheus.remote_write_username")
        auth: dict = {}
        work = self.work_dir(settings)
        if p.remote_write_username:
            # basic_auth: username, password_file (prometheus/common v0.39.0 and v0.55.0,
            # config/http_config.go BasicAuth, the versions Prometheus v2.42.0 and v2.54.1
            # require)
            basic: dict = {"username": p.remote_write_username}
            if p.remote_write_password:
                basic["password_file"] = str(work / PASSWORD_FILE)
            auth["basic_auth"] = basic
        elif p.remote_write_bearer_token:
            # authorization: type, credentials_file (same files, type Authorization)
            auth["authorization"] = {"type": "Bearer",
                                     "credentials_file": str(work / TOKEN_FILE)}
        # url (Prometheus v2.42.0 and v2.54.1 config/config.go RemoteWriteConfig)
        return [{"url": u, **auth} for u in urls]

    def write_secrets(self, settings: Settings) -> None:
        """The remote-write credentials into files only the server's user reads (0600);
        a file no setting asks for any more is removed."""
        p = settings.prometheus
        work = self.work_dir(settings)
        wanted = {PASSWORD_FILE: p.remote_write_password if p.remote_write_username else "",
                  TOKEN_FILE: p.remote_write_bearer_token}
        for name, secret in wanted.items():
            path = work / name
            if secret and p.remote_write_urls.strip():
                write_atomic(path, secret)  # mkstemp: created 0600
                os.chmod(path, 0o600)
            else:
                path.unlink(missing_ok=True)
        path = work / SERVER_TOKEN_FILE
        if self.server_auth(settings):
            from rl_insight.common.secret import server_token

            write_atomic(path, server_token(settings)[0])
            os.chmod(path, 0o600)
        else:
            path.unlink(missing_ok=True)

    def launch(self, settings: Settings, binary: Path) -> Launch:
        p = settings.prometheus
        work = self.work_dir(settings)
        self.targets_dir(settings).mkdir(parents=True, exist_ok=True)
        config = work / "prometheus.yml"
        self.write_secrets(settings)
        from rl_insight.server.services.alertmanager import Alertmanager
        from rl_insight.server.services.binaries import locate, probe_version

        if settings.alerts.enabled:
            alert_rules.write(settings)
        # an Alertmanager that is not installed is not sent to (Prometheus would log a
        # refused connection at every evaluation)
        am = settings.alertmanager.enabled and locate(Alertmanager(), settings).found is not None
        write_atomic(config, yaml.safe_dump(
            self.render(settings, probe_version(binary) or "", alertmanager=am),
            sort_keys=False))
        data = self.data_dir(settings)
        data.mkdir(parents=True, exist_ok=True)
        host = settings.bind_host("prometheus")
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--storage.tsdb.retention.time={p.retention}",
            f"--web.listen-address={netaddr.join_host_port(host, p.port)}",
            # the server reloads, Tempo's generator writes: beyond loopback, both behind
            # the web config's password like every other request
            "--web.enable-lifecycle",
            "--web.enable-remote-write-receiver",
        ]
        web = doors.web_config(settings, self.name, work)
        if web is not None:
            argv.append(f"--web.config.file={web}")
        ready = netaddr.http_url(netaddr.local_host(host), p.port, "/-/ready")
        return Launch(self.name, argv, ready, p.port, cwd=str(work),
                      ready_auth=doors.basic_auth(settings, self.name))
