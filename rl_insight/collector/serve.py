"""External OTLP mode has no server to push to: the collector serves its metrics on a
/metrics endpoint of its own (a free port unless configured), and logs the address."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Callable

from rl_insight import netaddr

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    def __init__(self, render: Callable[[], str], host: str = "0.0.0.0", port: int = 0,
                 announce: bool = True) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
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

        family = socket.AF_INET6 if netaddr.is_ipv6(host) or host == "::" else socket.AF_INET

        class Server(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.httpd = Server((host.strip("[]"), port), Handler)
        self.port = self.httpd.server_address[1]
        self.address = netaddr.join_host_port(netaddr.routable_address(host), self.port)
        threading.Thread(target=self.httpd.serve_forever, name="rl-insight-metrics",
                         daemon=True).start()
        if announce:
            log.warning("rl-insight: no server configured (external OTLP mode); metrics "
                        "are served at http://%s/metrics for your Prometheus to scrape",
                        self.address)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
