"""Platform mode has no server to push to: the hub (or, outside Ray, the process) serves
its metrics on a /metrics endpoint of its own for the platform's Prometheus, at the
address the platform's scrape rule expects: ``prometheus.metrics_report_port`` (9092,
upstream rl-insight's default) on the node's address.

When that port is taken, training goes on: the endpoint moves to a free port and says
so loudly, with what to do. With a token (``RL_INSIGHT_TOKEN``) the endpoint answers
only requests that carry it (``Authorization: Bearer``, as Prometheus' ``authorization``
scrape setting sends it); without one it is open, as upstream's and node_exporter's are,
and says so once.
"""

from __future__ import annotations

import errno
import hmac
import http.server
import logging
import socket
import threading
from collections.abc import Callable

from rl_insight.common import netaddr
from rl_insight.wire import paths

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    def __init__(self, render: Callable[[], str], host: str = "0.0.0.0", port: int = 0,
                 announce: bool = True, token: str = "") -> None:
        expected = f"Bearer {token}".encode() if token else b""

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.split("?")[0] != paths.METRICS:
                    self.send_error(404, "only /metrics is served here")
                    return
                given = (self.headers.get("Authorization") or "").encode()
                if expected and not hmac.compare_digest(given, expected):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Bearer")
                    body = (b"this endpoint needs the run's RL_INSIGHT_TOKEN: scrape it with "
                            b"Prometheus' authorization: {type: Bearer, credentials_file: "
                            b"...}\n")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                try:
                    body = render().encode()
                except Exception as exc:  # never take the endpoint down
                    log.exception("rendering metrics failed")
                    self.send_error(500, str(exc))
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        bind = host.strip("[]") or "0.0.0.0"
        family = socket.AF_INET6 if netaddr.is_ipv6(bind) or bind == "::" else socket.AF_INET

        class Server(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.wanted = port
        try:
            self.httpd = Server((bind, port), Handler)
        except OSError as exc:
            if port == 0 or exc.errno != errno.EADDRINUSE:
                raise
            self.httpd = Server((bind, 0), Handler)
            log.error(
                "rl-insight: port %d on %s is taken (another process listens there: "
                "`ss -ltnp 'sport = :%d'` names it), so this run's metrics are served on "
                "port %d instead, where a platform's pre-agreed scrape rule for port %d "
                "does not look. Training goes on. Free the port, or agree another with "
                "the platform and set it (prometheus.metrics_report_port in "
                "trainer.rl_insight, or RL_INSIGHT_CLIENT_METRICS_PORT).",
                port, bind, port, self.httpd.server_address[1], port)
        self.port = self.httpd.server_address[1]
        self.address = netaddr.join_host_port(
            bind if bind not in ("0.0.0.0", "::") else netaddr.routable_address(bind),
            self.port)
        threading.Thread(target=self.httpd.serve_forever, name="rl-insight-metrics",
                         daemon=True).start()
        if announce:
            log.warning("rl-insight: platform mode (no server, spans to the OTLP endpoint): "
                        "metrics are served at http://%s/metrics for the platform's "
                        "Prometheus to scrape%s", self.address,
                        "" if token else " (open to anyone who can reach it: set "
                        "RL_INSIGHT_TOKEN to require a bearer token)")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
