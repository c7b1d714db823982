"""FAKE prime_rl/utils/metrics_server.py (559b4477 l.77-176): the trainer's own
Prometheus server, an isolated registry served at ``/metrics`` (and ``/health``) from a
thread, ``update(...)`` after each step."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest


class MetricsServer:
    def __init__(self, config) -> None:
        self.port, self.host = config.port, config.host
        self._registry = CollectorRegistry()
        r = self._registry
        self._step = Gauge("trainer_step", "Current training step", registry=r)
        self._loss = Gauge("trainer_loss", "Current training loss", registry=r)
        self._throughput = Gauge("trainer_throughput_tokens_per_sec",
                                 "Training throughput in tokens/sec", registry=r)
        self._last_step_ts = Gauge("trainer_last_step_timestamp_seconds",
                                   "Unix timestamp of last step", registry=r)
        self._server: HTTPServer | None = None

    def _make_handler(self):
        registry = self._registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/metrics":
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                    self.end_headers()
                    self.wfile.write(generate_latest(registry))
                elif self.path == "/health":
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok\n")
                else:
                    self.send_response(404)
                    self.end_headers()

            def log_message(self, format, *args):
                pass

        return Handler

    def start(self) -> None:
        self._server = HTTPServer((self.host, self.port), self._make_handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def update(self, step: int, loss: float, throughput: float, **_) -> None:
        self._step.set(step)
        self._loss.set(loss)
        self._throughput.set(throughput)
        self._last_step_ts.set(time.time())
