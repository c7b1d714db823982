"""A kept-alive HTTP connection for the collector's frequent requests: the lane actors'
and the hub's pushes and span exports. ``requests`` spent about two thirds of a lane
actor's tick preparing each request (hooks, cookies, settings merged again); this sends
the same bytes through urllib3's connection pool (what ``requests`` uses underneath), one
kept-alive connection per origin, opened again when the server closed it. Used only for
plain HTTP where no proxy applies; proxied and HTTPS senders keep ``requests``."""

from __future__ import annotations

import json as jsonlib
from urllib.parse import urlsplit

import urllib3

HttpError = (OSError, urllib3.exceptions.HTTPError)  # what a request can raise


class Response:
    """What the sender reads of an answer (the part of ``requests.Response`` it uses)."""

    def __init__(self, status: int, headers, content: bytes) -> None:
        self.status_code = status
        self.headers = headers  # case-insensitive get()
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.content)


class Connection:
    """One origin's pool of one connection: one request at a time (a sender may be
    called from two threads; the second waits for the connection), no retries (the
    caller keeps its data and sends again)."""

    def __init__(self, base_url: str, timeout: float, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        self.pool = urllib3.HTTPConnectionPool(
            parts.hostname or "localhost", parts.port, maxsize=1, block=True,
            timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False,
            headers={"User-Agent": "rl-insight", **headers})
        self.timeout = timeout

    def request(self, method: str, url: str, data: bytes | None = None,
                headers: dict[str, str] | None = None, json: object = None) -> Response:
        """Send and read the whole answer; raises one of ``HttpError``."""
        if json is not None:
            data = jsonlib.dumps(json).encode()
            headers = {**(headers or {}), "Content-Type": "application/json"}
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = {**self.pool.headers, **(headers or {})}
        r = self.pool.urlopen(method, path, body=data, headers=head, retries=False,
                              redirect=False, pool_timeout=self.timeout)
        return Response(r.status, r.headers, r.data)

    def close(self) -> None:
        self.pool.close()
