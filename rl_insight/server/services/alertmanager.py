"""Alertmanager: delivers what the managed Prometheus fires to the configured receivers
(webhooks, Slack, e-mail), grouped per alert and run. One instance, clustering off.

Config keys and flags follow Alertmanager 0.27.0's source (pinned in
tests/upstream_keys/); Debian 12's 0.25 reads the same file (`amtool check-config`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from rl_insight.common import netaddr
from rl_insight.common.files import write_atomic
from rl_insight.config import ConfigError, Settings
from rl_insight.server import doors
from rl_insight.server.analyses.alert_rules import duration
from rl_insight.server.services.base import Launch, PortUse, Service, Upstream

RECEIVER = "rl-insight"
GROUP_BY = ["alertname", "project", "experiment_name"]
CONFIG_FILE = "alertmanager.yml"


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _url(key: str, value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ConfigError(f"{key}: expected an http:// or https:// URL, got {value!r}")
    return value


class Alertmanager(Service):
    name = "alertmanager"
    # upstream's archive holds `alertmanager` (beside amtool); Debian installs it as
    # /usr/bin/prometheus-alertmanager (its --version still says "alertmanager, version")
    binary_names = ("alertmanager", "prometheus-alertmanager")
    upstream = Upstream(
        archive="alertmanager-{version}.linux-{arch}.tar.gz",
        url="https://github.com/prometheus/alertmanager/releases/download/v{version}/"
            "{archive}",
        checksum_url="https://github.com/prometheus/alertmanager/releases/download/"
        "v{version}/sha256sums.txt",
    )

    def ports(self, settings: Settings) -> list[PortUse]:
        return [PortUse("alertmanager.port", settings.bind_host("alertmanager"),
                        settings.alertmanager.port)]

    def receiver(self, settings: Settings) -> dict:
        """The one receiver every alert goes to; with nothing configured it has no
        integrations, so alerts are listed (API, `rl-insight alerts`) but sent nowhere."""
        a = settings.alertmanager
        out: dict = {"name": RECEIVER}
        hooks = [_url("alertmanager.webhook_urls", u) for u in _csv(a.webhook_urls)]
        if hooks:
            out["webhook_configs"] = [{"url": u, "send_resolved": True} for u in hooks]
        if a.slack_api_url:
            slack: dict = {"api_url": _url("alertmanager.slack_api_url", a.slack_api_url),
                           "send_resolved": True}
            if a.slack_channel:
                slack["channel"] = a.slack_channel
            out["slack_configs"] = [slack]
        if a.email_to:
            # Alertmanager refuses an e-mail receiver without a sender and a smarthost
            # (config/config.go: "no global SMTP smarthost set"): say which setting
            for key in ("email_from", "smtp_smarthost"):
                if not getattr(a, key):
                    raise ConfigError(f"alertmanager.{key} must be set when "
                                      "alertmanager.email_to is")
            host, _, port = a.smtp_smarthost.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError("alertmanager.smtp_smarthost: expected host:port, got "
                                  f"{a.smtp_smarthost!r}")
            email: dict = {"to": a.email_to, "from": a.email_from,
                           "smarthost": a.smtp_smarthost, "send_resolved": True}
            if a.smtp_auth_username:
                email["auth_username"] = a.smtp_auth_username
            if a.smtp_auth_password:
                email["auth_password"] = a.smtp_auth_password
            out["email_configs"] = [email]
        return out

    def render(self, settings: Settings) -> dict:
        """alertmanager.yml as plain data (it holds the receivers' secrets)."""
        a = settings.alertmanager
        return {
            "route": {
                "receiver": RECEIVER,
                "group_by": GROUP_BY,
                "group_wait": duration("alertmanager.group_wait", a.group_wait),
                "group_interval": duration("alertmanager.group_interval", a.group_interval,
                                           nonzero=True),
                "repeat_interval": duration("alertmanager.repeat_interval",
                                            a.repeat_interval, nonzero=True),
            },
            "receivers": [self.receiver(settings)],
        }

    def config_path(self, settings: Settings) -> Path:
        return self.work_dir(settings) / CONFIG_FILE

    def launch(self, settings: Settings, binary: Path) -> Launch:
        config = self.config_path(settings)
        # secrets live in this file only (never in argv or logs); write_atomic creates
        # it through mkstemp, mode 0600, and the chmod keeps it so if that ever changes
        write_atomic(config, yaml.safe_dump(self.render(settings), sort_keys=False))
        os.chmod(config, 0o600)
        data = self.data_dir(settings)
        data.mkdir(parents=True, exist_ok=True)
        host, port = settings.bind_host("alertmanager"), settings.alertmanager.port
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.path={data}",
            f"--web.listen-address={netaddr.join_host_port(host, port)}",
            "--cluster.listen-address=",  # one instance: no gossip port (9094) at all
        ]
        web = doors.web_config(settings, self.name, self.work_dir(settings))
        if web is not None:  # beyond loopback: silences and alerts need the password
            argv.append(f"--web.config.file={web}")
        ready = netaddr.http_url(netaddr.local_host(host), port, "/-/ready")
        return Launch(self.name, argv, ready, port, cwd=str(self.work_dir(settings)),
                      ready_auth=doors.basic_auth(settings, self.name))
