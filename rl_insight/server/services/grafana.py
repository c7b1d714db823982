"""Grafana: generated grafana.ini, provisioned datasources (uids `prometheus`, `tempo`)
and the dashboards shipped in the package (`rl_insight/dashboards/`) in the
`RL-Insight` folder.

Formats: https://grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/ (ini)
and https://grafana.com/docs/grafana/latest/administration/provisioning/ (YAML).
"""

from __future__ import annotations

import configparser
import io
import logging
from pathlib import Path

import yaml

from rl_insight.common import netaddr, resources
from rl_insight.common.files import write_atomic
from rl_insight.config import Settings
from rl_insight.server import doors
from rl_insight.server.endpoints import prometheus_url, tempo_host
from rl_insight.server.services.base import (
    Launch,
    PortUse,
    Service,
    Upstream,
)
from rl_insight.server.services.tempo import Tempo

log = logging.getLogger(__name__)
FOLDER = "RL-Insight"
FOLDER_UID = "rl-insight"
SYSTEM_HOME = Path("/usr/share/grafana")  # where distribution packages put it


def default_dashboards_dir() -> Path:
    """The dashboards shipped in the package (a wheel install or a source checkout)."""
    return resources.dashboards_dir()


class Grafana(Service):
    name = "grafana"
    binary_names = ("grafana", "grafana-server")
    upstream = Upstream(
        archive="grafana-{version}.linux-{arch}.tar.gz",
        url="https://dl.grafana.com/oss/release/{archive}",
        checksum_url="https://dl.grafana.com/oss/release/{archive}.sha256",
        checksum_style="single",
        # the name grafana.com's download page gives 13.x archives (a build number
        # inside: grafana_13.2.3_36482603486_linux_amd64.tar.gz), same content
        also_named=("grafana_{version}_*_linux_{arch}.tar.gz",),
    )

    def ports(self, settings: Settings) -> list[PortUse]:
        return [PortUse("grafana.port", settings.bind_host("grafana"), settings.grafana.port)]

    def home_of(self, binary: Path) -> Path:
        candidate = binary.resolve().parent.parent
        if (candidate / "conf" / "defaults.ini").is_file():
            return candidate
        return SYSTEM_HOME

    def dashboards_dir(self, settings: Settings) -> Path:
        return Path(settings.grafana.dashboards_dir or default_dashboards_dir()).expanduser()

    def admin_password(self, settings: Settings) -> str:
        """The configured password, except admin/admin on a non-loopback address: then a
        generated one, kept (mode 0600) in $RL_INSIGHT_HOME/state/grafana-admin-password."""
        g = settings.grafana
        host = settings.bind_host("grafana").strip("[]")
        loopback = host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")
        if g.admin_password != "admin" or loopback:
            return g.admin_password
        path = settings.state_dir / "grafana-admin-password"
        if not path.is_file():
            import os
            import secrets

            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(16) + "\n")
        log.warning("grafana binds %s with the default admin/admin: using a generated "
                    "password instead, in %s (set grafana.admin_password to choose one)",
                    host or "0.0.0.0", path)
        return path.read_text().strip()

    def render_ini(self, settings: Settings) -> str:
        g = settings.grafana
        work, data = self.work_dir(settings), self.data_dir(settings)
        ini = configparser.ConfigParser(interpolation=None)
        ini["paths"] = {
            "data": str(data),
            "logs": str(settings.logs_dir / "grafana"),
            "plugins": str(data / "plugins"),
            "provisioning": str(work / "provisioning"),
        }
        ini["server"] = {"http_addr": settings.bind_host("grafana").strip("[]"),
                         "http_port": str(g.port)}
        ini["security"] = {"admin_user": g.admin_user,
                           "admin_password": self.admin_password(settings)}
        ini["users"] = {"allow_sign_up": "false"}
        ini["analytics"] = {"reporting_enabled": "false", "check_for_updates": "false",
                            "check_for_plugin_updates": "false"}
        ini["log"] = {"mode": "console"}
        # Grafana 12+ installs and updates plugins from grafana.com at start-up, which
        # fails or stalls on an air-gapped cluster; the bundled plugins (Prometheus,
        # Tempo in 13) are all the dashboards need
        ini["plugins"] = {"preinstall_disabled": "true", "preinstall_auto_update": "false"}
        out = io.StringIO()
        ini.write(out)
        return out.getvalue()

    def render_datasources(self, settings: Settings) -> dict:
        prom = prometheus_url(settings)
        tempo = netaddr.http_url(tempo_host(settings), settings.tempo.port)
        # a Prometheus beyond loopback wants its password: Grafana reads it from the
        # file at start ($__file{}), so the provisioning file holds no secret
        prom_auth: dict = {}
        if doors.guarded(settings, "prometheus"):
            doors.password(settings, "prometheus")
            prom_auth = {"basicAuth": True, "basicAuthUser": doors.USER, "secureJsonData": {
                "basicAuthPassword":
                    f"$__file{{{doors.password_path(settings, 'prometheus')}}}"}}
        return {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": "Prometheus", "type": "prometheus", "uid": "prometheus",
                    "access": "proxy", "url": prom, "isDefault": True, "editable": False,
                    "jsonData": {"timeInterval": settings.prometheus.scrape_interval},
                    **prom_auth,
                },
                {
                    "name": "Tempo", "type": "tempo", "uid": "tempo", "access": "proxy",
                    "url": tempo, "editable": False,
                    "jsonData": {
                        # the service graph Tempo's metrics generator writes to Prometheus
                        **({"serviceMap": {"datasourceUid": "prometheus"}}
                           if Tempo().generates_metrics(settings) else {}),
                        "nodeGraph": {"enabled": True},
                    },
                },
            ],
        }

    def render_dashboards(self, settings: Settings) -> dict:
        return {
            "apiVersion": 1,
            "providers": [
                {
                    "name": "rl-insight", "orgId": 1, "folder": FOLDER,
                    "folderUid": FOLDER_UID, "type": "file", "disableDeletion": False,
                    "updateIntervalSeconds": 30, "allowUiUpdates": False,
                    "options": {"path": str(self.dashboards_dir(settings)),
                                "foldersFromFilesStructure": False},
                }
            ],
        }

    def launch(self, settings: Settings, binary: Path) -> Launch:
        work = self.work_dir(settings)
        prov = work / "provisioning"
        for sub in ("plugins", "alerting", "notifiers"):
            (prov / sub).mkdir(parents=True, exist_ok=True)
        write_atomic(prov / "datasources" / "rl-insight.yaml",
                     yaml.safe_dump(self.render_datasources(settings), sort_keys=False))
        write_atomic(prov / "dashboards" / "rl-insight.yaml",
                     yaml.safe_dump(self.render_dashboards(settings), sort_keys=False))
        config = work / "grafana.ini"
        write_atomic(config, self.render_ini(settings))
        self.data_dir(settings).mkdir(parents=True, exist_ok=True)
        home = self.home_of(binary)
        argv = [str(binary)]
        if binary.name == "grafana":  # the unified CLI; grafana-server takes flags directly
            argv.append("server")
        argv += ["--homepath", str(home), "--config", str(config)]
        host = netaddr.local_host(settings.bind_host("grafana"))
        return Launch(self.name, argv, netaddr.http_url(host, settings.grafana.port,
                                                        "/api/health"),
                      settings.grafana.port, cwd=str(home),
                      after_ready=[self.password_reset(settings, binary, home, config)])

    def password_reset(self, settings: Settings, binary: Path, home: Path,
                       config: Path) -> tuple[list[str], str]:
        """Grafana applies [security] admin_password only when it creates the admin user;
        its own CLI sets it on an existing data directory too (password on stdin, never
        in argv). Grafana 13: `grafana cli --homepath H --config C admin
        reset-admin-password --password-from-stdin`; older layouts ship grafana-cli."""
        cli = [str(binary), "cli"] if binary.name == "grafana" else \
            [str(binary.with_name("grafana-cli"))]
        return ([*cli, "--homepath", str(home), "--config", str(config), "admin",
                 "reset-admin-password", "--password-from-stdin"],
                self.admin_password(settings))
