"""Tempo: its generated config (monolithic, local storage, OTLP on 4317/4318, the metrics
generator writing span metrics and service graphs to Prometheus) and launch.

Field names follow Tempo 2.6.1's config structs (pinned in tests/upstream_keys/).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rl_insight.common import netaddr
from rl_insight.common.files import write_atomic
from rl_insight.config import Settings
from rl_insight.server import doors
from rl_insight.server.endpoints import prometheus_url, tempo_host
from rl_insight.server.services.base import Launch, PortUse, Service, Upstream

# Tempo 2.6.1 with target `all` pins its ingester and generator rings to 127.0.0.1
# (cmd/tempo/main.go L210-220) and dials 127.0.0.1:<grpc port> for pushes and for the
# querier's frontend worker (modules/modules.go L298-303): whatever the bind host, the
# internal gRPC server listens on loopback, where those calls arrive. Nothing outside the
# process uses it (Grafana talks HTTP; OTLP has its own listeners).
INTERNAL_GRPC_HOST = "127.0.0.1"


class Tempo(Service):
    name = "tempo"
    binary_names = ("tempo",)
    upstream = Upstream(
        archive="tempo_{version}_linux_{arch}.tar.gz",
        url="https://github.com/grafana/tempo/releases/download/v{version}/{archive}",
        checksum_url="https://github.com/grafana/tempo/releases/download/v{version}/SHA256SUMS",
    )

    def ports(self, settings: Settings) -> list[PortUse]:
        t, host = settings.tempo, tempo_host(settings)
        return [
            PortUse("tempo.port", host, t.port),
            PortUse("tempo.grpc_port", INTERNAL_GRPC_HOST, t.grpc_port),
            PortUse("tempo.otlp_grpc_port", host, t.otlp_grpc_port),
            PortUse("tempo.otlp_http_port", host, t.otlp_http_port),
        ]

    def generates_metrics(self, settings: Settings) -> bool:
        """Span metrics and service graphs need a Prometheus to remote-write to."""
        return settings.tempo.metrics_generator and settings.prometheus.enabled

    def render(self, settings: Settings) -> dict:
        """tempo.yaml as plain data (keys checked against Tempo 2.6.1's config structs by
        tests/test_upstream_keys.py; Tempo refuses unknown keys)."""
        t, host = settings.tempo, tempo_host(settings)
        data = self.data_dir(settings)
        out: dict = {
            "target": "all",
            "server": {
                "http_listen_address": host.strip("[]"),
                "http_listen_port": t.port,
                "grpc_listen_address": INTERNAL_GRPC_HOST,
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
            # ready as soon as the ring has it (dskit's default waits 15 s)
            "ingester": {"max_block_duration": "5m", "lifecycler": {"min_ready_duration": "0s"}},
            "compactor": {"compaction": {"block_retention": t.block_retention}},
            # target `all` never starts memberlist (every ring is in memory); pinned to
            # loopback so that no setting can make it listen on every interface
            "memberlist": {"bind_addr": [INTERNAL_GRPC_HOST]},
            "storage": {
                "trace": {
                    "backend": "local",
                    "local": {"path": str(data / "blocks")},
                    "wal": {"path": str(data / "wal")},
                }
            },
            "usage_report": {"reporting_enabled": False},
        }
        if self.generates_metrics(settings):
            prom = prometheus_url(settings, "/api/v1/write")
            out["metrics_generator"] = {
                "storage": {"path": str(data / "generator" / "wal"),
                            "remote_write": [{"url": prom,
                                              **doors.client_config(settings, "prometheus")}]},
                # span metrics per run, as every RL-Insight series is (span attributes)
                "processor": {"span_metrics": {"dimensions": ["project", "experiment_name"]}},
            }
            out["overrides"] = {"defaults": {"metrics_generator": {
                "processors": ["service-graphs", "span-metrics"]}}}
        return out

    def launch(self, settings: Settings, binary: Path) -> Launch:
        work = self.work_dir(settings)
        config = work / "tempo.yaml"
        write_atomic(config, yaml.safe_dump(self.render(settings), sort_keys=False))
        self.data_dir(settings).mkdir(parents=True, exist_ok=True)
        host = tempo_host(settings)
        return Launch(self.name, [str(binary), f"-config.file={config}"],
                      netaddr.http_url(host, settings.tempo.port, "/ready"),
                      settings.tempo.port, cwd=str(work))

