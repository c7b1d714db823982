"""A kept-alive HTTP connection for the collector's frequent requests: the lane actors'
and the hub's pushes and span exports. ``requests`` spent about two thirds of a lane
actor's tick preparing each request (hooks, cookies, settings merged again); this
sends the same bytes with ``http.client`` on one connection per sender. Used only for
plain HTTP where no proxy applies; proxied and HTTPS senders keep ``requests``."""

from __future__ import annotations

import http.client
import json as jsonlib
import select
import threading
from urllib.parse import urlsplit

HttpError = (OSError, http.client.HTTPException)  # what a request can raise


class Response:
    """What the sender reads of an answer (the part of ``requests.Response`` it uses)."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, content: bytes) -> None:
        self.status_code = status
        self.headers = headers  # case-insensitive get()
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.content)


class Connection:
    """One connection to one origin, opened again when the server closed it; one
    request at a time (a sender may be called from two threads)."""

    def __init__(self, base_url: str, timeout: float, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "localhost", parts.port
        self.timeout = timeout
        self.headers = {"User-Agent": "rl-insight", **headers}
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _open(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _stale(self) -> bool:
        """The server closed the idle connection (readable with nothing to read)."""
        sock = self._conn.sock if self._conn is not None else None
        if sock is None:
            return True
        try:
            return bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def request(self, method: str, url: str, data: bytes | None = None,
                headers: dict[str, str] | None = None, json: object = None) -> Response:
        """Send and read the whole answer; raises one of ``HttpError``."""
        if json is not None:
            data = jsonlib.dumps(json).encode()
            headers = {**(headers or {}), "Content-Type": "application/json"}
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = {**self.headers, **(headers or {})}
        if data is not None:
            head["Content-Length"] = str(len(data))
        with self._lock:
            if self._conn is not None and self._stale():
                self.close()
            if self._conn is None:
                self._conn = self._open()
            try:
                self._conn.request(method, path, body=data, headers=head)
                r = self._conn.getresponse()
                content = r.read()
            except HttpError:
                self.close()
                raise
            if r.will_close:
                self.close()
            return Response(r.status, r.headers, content)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
