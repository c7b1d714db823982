"""The collector's HTTP: one kept-alive connection per origin for the lane actors', the
hub's and a process's own pushes and span exports, through urllib3 (what ``requests``
uses underneath, without the two thirds of a lane actor's tick ``requests`` spent
preparing each request). One stack for every case a sender meets: plain HTTP, HTTPS
(certifi's CA bundle, or the file ``REQUESTS_CA_BUNDLE`` or ``SSL_CERT_FILE`` names, for a
server behind a private CA) and the environment's proxies (``http_proxy``,
``https_proxy``, ``no_proxy``: HTTPS through a CONNECT tunnel), read once per origin."""

from __future__ import annotations

import json as jsonlib
import os
import threading
import urllib.request
from urllib.parse import urlencode, urlsplit

import urllib3

HttpError = (OSError, urllib3.exceptions.HTTPError)  # what a request can raise
# a CA bundle of the user's, in this order: requests' own variable first (a process that
# set it for requests expects it here too), then OpenSSL's
CA_ENV = ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


class Response:
    """What the sender reads of an answer."""

    def __init__(self, status: int, headers, content: bytes) -> None:
        self.status_code = status
        self.headers = headers  # case-insensitive get()
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.content)


def proxy_for(url: str) -> str:
    """The proxy the environment names for ``url`` ("" for none, or one ``no_proxy``
    bypasses), as curl and ``requests`` read it."""
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    if not proxies or urllib.request.proxy_bypass_environment(parts.hostname or "",
                                                              proxies):
        return ""
    return proxies.get(parts.scheme, "")


def ca_bundle() -> str:
    """The CA bundle HTTPS is verified against: the user's, else certifi's."""
    for name in CA_ENV:
        path = os.environ.get(name, "")
        if path and os.path.isfile(path):
            return path
    import certifi

    return certifi.where()


class Connection:
    """One origin's pool of one connection, direct or through its proxy: one request at a
    time (a sender may be called from two threads; the second waits for the
    connection), no retries (the caller keeps its data and sends again).

    The waiting is ours (a lock), not urllib3's (a blocking pool): urllib3 empties its
    pools at interpreter exit from a ``weakref.finalize``, whose exit hook may run before
    the client's last pushes (a run finished from an exit hook); a blocking pool emptied
    so waited its whole timeout for a connection that never came back, a request each,
    the exit's whole budget with the run's end not sent. A non-blocking pool opens a new
    connection where it finds none."""

    def __init__(self, base_url: str, timeout: float, headers: dict[str, str],
                 proxy: str | None = None) -> None:
        self.timeout = timeout
        self.proxy = proxy_for(base_url) if proxy is None else proxy
        self.headers = {"User-Agent": "rl-insight", **headers}  # sent with each request
        self._one = threading.Lock()  # one request at a time
        kw: dict = {"maxsize": 1, "block": False, "retries": False,
                    "timeout": urllib3.Timeout(connect=timeout, read=timeout)}
        if base_url.startswith("https://"):
            kw.update(cert_reqs="CERT_REQUIRED", ca_certs=ca_bundle())
        self.manager = urllib3.ProxyManager(self.proxy, num_pools=1, **kw) if self.proxy \
            else urllib3.PoolManager(num_pools=1, **kw)

    def request(self, method: str, url: str, data: bytes | None = None,
                headers: dict[str, str] | None = None, json: object = None,
                params: dict | None = None) -> Response:
        """Send and read the whole answer; raises one of ``HttpError``."""
        if json is not None:
            data = jsonlib.dumps(json).encode()
            headers = {**(headers or {}), "Content-Type": "application/json"}
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        if not self._one.acquire(timeout=self.timeout):
            raise urllib3.exceptions.EmptyPoolError(
                None, f"another request held the connection for {self.timeout:g}s")
        try:
            r = self.manager.urlopen(method, url, body=data,
                                     headers={**self.headers, **(headers or {})},
                                     retries=False, redirect=False)
            return Response(r.status, r.headers, r.data)
        finally:
            self._one.release()

    def close(self) -> None:
        self.manager.clear()
