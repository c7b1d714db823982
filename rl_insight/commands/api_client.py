"""A small HTTP client for the server's API, used by the CLI and operator tools.

Errors come back as :class:`ApiError` carrying the server's own message, so the CLI can
print it unchanged.
"""

from __future__ import annotations

from typing import Any

import requests


class ApiError(RuntimeError):
    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


# a person waits on the CLI: a server beside a loaded run may take long to answer (a
# fresh clone beside one busy core, 2026-12-07: `report` past 10 s, printing nothing)
TIMEOUT_S = 30.0


class ServerClient:
    def __init__(self, url: str, token: str = "", timeout: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def request(self, method: str, path: str, **kw: Any) -> Any:
        kw.setdefault("headers", self.headers)
        try:
            r = requests.request(method, self.url + path, timeout=self.timeout, **kw)
        except requests.ReadTimeout:
            raise ApiError(None, f"the server at {self.url} took the request but did not "
                                 f"answer within {self.timeout:g} s; it is busy (`rl-insight "
                                 "server status` tells): try again") from None
        except requests.RequestException as exc:
            raise ApiError(None, f"cannot reach the server at {self.url} "
                                 f"({exc.__class__.__name__}); is it running? "
                                 "`rl-insight server status` tells") from None
        if r.status_code >= 400:
            try:
                message = r.json().get("error") or r.text
            except ValueError:
                message = r.text
            raise ApiError(r.status_code, f"{r.status_code}: {message}")
        try:
            return r.json()
        except ValueError:
            return r.text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items()
                                                 if v is not None})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def post_bytes(self, path: str, body: bytes, content_type: str) -> Any:
        """A body as it is (an OTLP export to /v1/traces)."""
        headers = {**self.headers, "Content-Type": content_type}
        return self.request("POST", path, data=body, headers=headers)
