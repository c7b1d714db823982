"""Prometheus: its generated config, command line and upstream release.

The config scrapes the RL-Insight server (with honor_labels, so pushed series keep their
own job and instance) and every target the server writes as file-based discovery.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rl_insight import netaddr
from rl_insight.config import Settings
from rl_insight.server.services.base import Launch, PortUse, Service, Upstream, write_atomic

SERVER_JOB = "rl_insight_server"


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

    def render(self, settings: Settings) -> dict:
        """The prometheus.yml as plain data."""
        p = settings.prometheus
        server = netaddr.join_host_port(netaddr.local_host(settings.bind_host("server")),
                                        settings.server.port)
        own = netaddr.join_host_port(netaddr.local_host(settings.bind_host("prometheus")),
                                     p.port)
        targets = self.targets_dir(settings)
        return {
            "global": {
                "scrape_interval": p.scrape_interval,
                "evaluation_interval": p.scrape_interval,
            },
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
                },
            ],
        }

    def launch(self, settings: Settings, binary: Path) -> Launch:
        p = settings.prometheus
        work = self.work_dir(settings)
        self.targets_dir(settings).mkdir(parents=True, exist_ok=True)
        config = work / "prometheus.yml"
        write_atomic(config, yaml.safe_dump(self.render(settings), sort_keys=False))
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
