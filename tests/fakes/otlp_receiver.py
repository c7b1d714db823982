"""FAKE Tempo: an OTLP/HTTP trace receiver that decodes every request with
opentelemetry-proto and keeps the spans in arrival order. Tempo itself cannot run on
these machines; this speaks the same wire format on POST /v1/traces."""

from __future__ import annotations

import gzip
import http.server
import socket
import threading

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from rl_insight.server.ingest.otlp import iter_spans


class _Handler(http.server.BaseHTTPRequestHandler):
    receiver: FakeTempo

    def log_message(self, *a):
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or \
                self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415 if self.path == "/v1/traces" else 404)
            self.end_headers()
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        self.receiver.record(req)
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class FakeTempo:
    """Start, stop and start again on the same port; ``spans`` keeps (attrs, span)."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.host, self.port = host, port
        self.spans: list[tuple[dict, object]] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._httpd: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1/traces"

    def record(self, req: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            self.spans.extend(iter_spans(req))

    def attr(self, key: str) -> list:
        with self._lock:
            return [a.get(key) for a, _ in self.spans]

    def attr_maps(self) -> list[dict]:
        """Every span's attributes, with its name under ``span_name``."""
        with self._lock:
            return [{**a, "span_name": s.name} for a, s in self.spans]

    def start(self) -> FakeTempo:
        handler = type("H", (_Handler,), {"receiver": self})

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True
            address_family = socket.AF_INET

        self._httpd = Server((self.host, self.port), handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
