"""Prometheus: its generated config, command line and upstream release.

The config scrapes the RL-Insight server (with honor_labels, so pushed series keep their
own job and instance) and every target the server writes as file-based discovery, loads
the generated alerting rules, and sends what fires to the managed Alertmanager.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rl_insight import netaddr
from rl_insight.config import Settings
from rl_insight.server import alert_rules
from rl_insight.server.services.base import (
    Launch,
    PortUse,
    Service,
    Upstream,
    version_at_least,
    write_atomic,
)

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
        if settings.alertmanager.enabled if alertmanager is None else alertmanager:
            am = netaddr.join_host_port(
                netaddr.local_host(settings.bind_host("alertmanager")),
                settings.alertmanager.port)
            out["alerting"] = {"alertmanagers": [
                {"api_version": "v2", "static_configs": [{"targets": [am]}]}]}
        return {
            **out,
            "scrape_configs": [
                {
                    "job_name": SERVER_JOB,
                    "honor_labels": True,
                    "static_configs": [{"targets": [server]}],
                },
                {"job_name": "prometheus", "static_configs": [{"targets": [own]}]},
                {
                    # The server writes one file per job; a group's `job` label names it.
                    "job_name": "rl_insight_targets",
                    "file_sd_configs": [
                        {"files": [str(targets / "*.json")], "refresh_interval": "5s"}
                    ],
                    "metric_relabel_configs": ENGINE_NAME_RELABEL,
                },
            ],
        }

    def launch(self, settings: Settings, binary: Path) -> Launch:
        p = settings.prometheus
        work = self.work_dir(settings)
        self.targets_dir(settings).mkdir(parents=True, exist_ok=True)
        config = work / "prometheus.yml"
        from rl_insight.server.binaries import locate, probe_version
        from rl_insight.server.services.alertmanager import Alertmanager

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
            "--web.enable-lifecycle",
            "--web.enable-remote-write-receiver",
        ]
        ready = netaddr.http_url(netaddr.local_host(host), p.port, "/-/ready")
        return Launch(self.name, argv, ready, p.port, cwd=str(work))
