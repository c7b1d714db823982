"""Tempo: its generated config (monolithic, local storage, OTLP on 4317/4318) and launch.

Field names follow the Tempo 2.6 configuration reference
(https://grafana.com/docs/tempo/v2.6.x/configuration/manifest/).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rl_insight import netaddr
from rl_insight.config import Settings
from rl_insight.server.services.base import Launch, PortUse, Service, Upstream, write_atomic


class Tempo(Service):
    name = "tempo"
    binary_names = ("tempo",)
    upstream = Upstream(
        archive="tempo_{version}_linux_{arch}.tar.gz",
        url="https://github.com/grafana/tempo/releases/download/v{version}/{archive}",
        checksum_url="https://github.com/grafana/tempo/releases/download/v{version}/SHA256SUMS",
    )

    def ports(self, settings: Settings) -> list[PortUse]:
        t, host = settings.tempo, settings.bind_host("tempo")
        return [
            PortUse("tempo.port", host, t.port),
            PortUse("tempo.grpc_port", host, t.grpc_port),
            PortUse("tempo.otlp_grpc_port", host, t.otlp_grpc_port),
            PortUse("tempo.otlp_http_port", host, t.otlp_http_port),
        ]

    def render(self, settings: Settings) -> dict:
        """tempo.yaml as plain data."""
        t, host = settings.tempo, settings.bind_host("tempo")
        data = self.data_dir(settings)
        bare = host.strip("[]")
        return {
            "server": {
                "http_listen_address": bare,
                "http_listen_port": t.port,
                "grpc_listen_address": bare,
                "grpc_listen_port": t.grpc_port,
                "log_level": "info",
            },
            "distributor": {
                "receivers": {
                    "otlp": {
                        "protocols": {
                            "grpc": {"endpoint": netaddr.join_host_port(host, t.otlp_grpc_port)},
                            "http": {"endpoint": netaddr.join_host_port(host, t.otlp_http_port)},
                        }
                    }
                }
            },
            "ingester": {"max_block_duration": "5m"},
            "compactor": {"compaction": {"block_retention": t.block_retention}},
            "storage": {
                "trace": {
                    "backend": "local",
                    "local": {"path": str(data / "blocks")},
                    "wal": {"path": str(data / "wal")},
                }
            },
            "usage_report": {"reporting_enabled": False},
        }

    def launch(self, settings: Settings, binary: Path) -> Launch:
        work = self.work_dir(settings)
        config = work / "tempo.yaml"
        write_atomic(config, yaml.safe_dump(self.render(settings), sort_keys=False))
        self.data_dir(settings).mkdir(parents=True, exist_ok=True)
        host = netaddr.local_host(settings.bind_host("tempo"))
        return Launch(self.name, [str(binary), f"-config.file={config}"],
                      netaddr.http_url(host, settings.tempo.port, "/ready"),
                      settings.tempo.port, cwd=str(work))
