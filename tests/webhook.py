"""A webhook receiver on loopback, as a team's alert endpoint: it records what
Alertmanager posts (its webhook payload: version 4, `alerts` with labels, annotations,
status)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.posts: list[dict] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unparsed": body.decode("utf-8", "replace")}
                with receiver._lock:
                    receiver.posts.append(doc)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/hook"

    def start(self) -> WebhookReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True,
                         name="webhook").start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def alerts(self) -> list[dict]:
        """Every alert of every post, firing or resolved, oldest first."""
        with self._lock:
            return [a for p in self.posts for a in p.get("alerts", [])]
