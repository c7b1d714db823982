"""The collector's network edge: pushing a run's metrics to the server's
Pushgateway-style endpoint and its spans to an OTLP/HTTP endpoint. Failures are logged
and reported as False, never raised: the caller keeps the data and tries again.

A server that is overloaded answers 429 or 503 with ``Retry-After``: until then the
sender sends nothing and reports False at once, so the caller keeps its data and the
server gets room instead of a retry storm."""

from __future__ import annotations

import base64
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from rl_insight.collector import connection
from rl_insight.common import tracebacks
from rl_insight.wire import paths

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 60.0


def _ours(response) -> bool:
    return bool(response.headers.get(paths.STARTED_HEADER))


def group_path(job: str, labels: dict[str, str]) -> str:
    """``/metrics/job@base64/<job>/<name>@base64/<value>...``: base64 keeps any value,
    slashes included, intact."""
    def b64(v: str) -> str:
        return base64.urlsafe_b64encode(v.encode()).decode() or "="

    parts = [paths.PUSH_JOB_BASE64 + b64(job)]
    for k, v in labels.items():
        parts.append(f"{k}@base64/{b64(v)}")
    return "/".join(parts)


# servers this process found not to be of this project: server url -> monotonic time
# the verdict holds until (a port can change hands: an ingress or another program on it
# while the server restarts); the lock of the one probe per server; the servers the
# verdict was said of (said once, again only after the server was seen to be ours)
FOREIGN_RECHECK_S = 10.0
_FOREIGN: dict[str, float] = {}
_FOREIGN_SAID: set[str] = set()
_FOREIGN_LOCK = threading.Lock()


OWN_REFRESH_S = 300.0  # an idle sender's own counters, sent again this often


class OwnGroup:
    """A sender's own counters (a hub's, a lane actor's) as the server last took them:
    sent only when they changed, after ``OWN_REFRESH_S`` (the server drops groups not
    pushed for ``push.idle_ttl_s``), or once the server restarted, so an idle sender
    sends nothing (hundreds of lane actors tick in a large run)."""

    def __init__(self, sender: Sender, refresh_s: float = OWN_REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self.sent: str | None = None
        self.sent_at = 0.0
        sender.on_server_restart.append(self.lost)

    def due(self, text: str) -> bool:
        return text != self.sent or time.monotonic() - self.sent_at >= self.refresh_s

    def took(self, text: str) -> None:
        self.sent, self.sent_at = text, time.monotonic()

    def lost(self) -> None:
        self.sent = None


class Sender:
    """One HTTP session to the server (or an OTLP endpoint), with a short timeout and a
    log line per state change rather than per failure."""

    def __init__(self, server_url: str, token: str = "", timeout: float = 5.0,
                 otlp_url: str = "") -> None:
        self.server_url = server_url.rstrip("/") if server_url else ""
        self.otlp_url = otlp_url or (self.server_url + paths.TRACES if server_url else "")
        self.timeout = timeout
        # one kept-alive connection per origin, direct or through the environment's
        # proxy for it, read once (connection.py: one HTTP stack for every case)
        self._connections: dict[str, connection.Connection] = {}
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.ok = True
        self.last_error = ""
        self._last_log = 0.0
        self.server_started: str | None = None
        self.on_server_restart: list = []  # called when the server's start time changes
        self.retry_at = 0.0  # monotonic time before which an overloaded server is spared
        self.backoffs = 0  # 429/503 answers with Retry-After, counted
        self.batch_route = True  # False once the server answered 404 to its batch path
        self.foreign = False  # the server was last found not to be of this project
        # the server's profiles header as last seen (None: a server that sends none)
        self.profiles_asked: str | None = None

    def _seen(self, response) -> None:
        started = response.headers.get(paths.STARTED_HEADER)
        asked = response.headers.get(paths.PROFILES_HEADER)
        if asked is not None:
            self.profiles_asked = f"{started}/{asked}"
        if started and self.foreign:
            self._ours_again()
        if started and started != self.server_started:
            restarted = self.server_started is not None
            self.server_started = started
            if restarted:
                log.info("rl-insight: the server restarted; sending everything again")
                for callback in self.on_server_restart:
                    callback()

    def _note(self, ok: bool, what: str) -> bool:
        if ok:
            if not self.ok:
                log.info("rl-insight: %s works again", what)
            self.ok, self.last_error = True, ""
            return True
        now = time.monotonic()
        if self.ok or now - self._last_log > 60:
            self._last_log = now
            log.warning("rl-insight: %s failed (%s); keeping the data and retrying",
                        what, self.last_error)
        self.ok = False
        return False

    def _is_foreign(self, r, url: str) -> bool:
        """On a 404 or 405 without this project's header: is the server another kind
        (upstream rl-insight 0.3, an ingress, another program on the port)? Probed once per
        server for the process (its senders share the answer), asked again after
        FOREIGN_RECHECK_S; meanwhile nothing is sent, and what was not taken is kept."""
        if _ours(r):  # ours (an older version, maybe)
            return False
        with _FOREIGN_LOCK:  # one probe; the other threads wait for its answer
            now = time.monotonic()
            until = _FOREIGN.get(self.server_url, 0.0)
            if until <= now:
                until = now + FOREIGN_RECHECK_S if self._probe(r.status_code, url) else 0.0
                _FOREIGN[self.server_url] = until
        self.foreign = until > now
        if self.foreign:
            self.retry_at = max(self.retry_at, until)
        return self.foreign

    def _ours_again(self) -> None:
        """The server answers as ours: whatever was said of a foreign one is over."""
        self.foreign = False
        with _FOREIGN_LOCK:
            _FOREIGN.pop(self.server_url, None)
            if self.server_url in _FOREIGN_SAID:
                _FOREIGN_SAID.discard(self.server_url)
                log.info("rl-insight: %s answers as an RL-Insight server now; sending what "
                         "was kept", self.server_url)

    def _probe(self, status: int, url: str) -> bool:
        """Is the server another kind? It is ours if its status route answers with our
        header (the 404 came from something else, or was a real 404 of ours). The caller
        holds the lock."""
        try:
            got = self._get(self.server_url + paths.SERVICES)
        except connection.HttpError:
            return False  # unreachable now: an ordinary failure, retried
        if _ours(got):
            return False
        try:
            body = got.json()
        except ValueError:
            body = None
        upstream = isinstance(body, dict) and "otlp_port" in body and "server" not in body
        if self.server_url not in _FOREIGN_SAID:
            _FOREIGN_SAID.add(self.server_url)
            log.error(
                "rl-insight: %s is %s: it has no route for this client's pushes and spans "
                "(%s %s). This process keeps what it measures (the oldest dropped when its "
                "buffers fill) and asks again every %.0f s. Start this package's server "
                "(`rl-insight server start`) and point RL_INSIGHT_SERVER_URL at it%s. "
                "This is said once, and again only after it answered as ours.",
                self.server_url,
                "an upstream rl-insight 0.3 server (it takes scrape targets only)" if
                upstream else "not an RL-Insight server", status, urlsplit(url).path,
                FOREIGN_RECHECK_S,
                ", or run upstream's client with that server" if upstream else "")
        return True

    def _backing_off(self) -> bool:
        return time.monotonic() < self.retry_at

    def _overloaded(self, r) -> None:
        """429/503: wait as long as the server asks (Retry-After, seconds)."""
        try:
            wait = float(r.headers.get("Retry-After", "1"))
        except ValueError:
            wait = 1.0
        # spread the senders that were refused together over twice the wait asked for
        wait = min(max(wait, 0.1), MAX_BACKOFF_S) * random.uniform(1.0, 2.0)
        self.retry_at = time.monotonic() + wait
        self.backoffs += 1

    def _request(self, method: str, url: str, what: str, **kw) -> bool:
        return self._call(method, url, what, **kw)[0]

    def _call(self, method: str, url: str, what: str, **kw):
        """(ok, response or None): ok as ``_request`` reports it."""
        if self._backing_off():
            self.last_error = "the server asked to wait (Retry-After)"
            return False, None
        try:
            r = self._connection(url).request(method, url, **kw)
        except connection.HttpError as exc:
            tracebacks.release(exc)  # the body goes now, not at the next full collection
            self.last_error = f"{exc.__class__.__name__} talking to {url}"
            return self._note(False, what), None
        self._seen(r)
        if r.status_code in (429, 503):
            self._overloaded(r)
        if r.status_code >= 400:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            self.last_error = f"{r.status_code}: {msg[:300]}"
            on_server = bool(self.server_url) and url.startswith(self.server_url)
            if r.status_code in (404, 405) and on_server and self._is_foreign(r, url):
                self.ok = False
                return False, r  # not this project's server (now): kept, asked again
            if r.status_code in (404, 413) and url.endswith(paths.PUSH_BATCH):
                return False, r  # an older server, or too large: the caller sees to it
            if on_server and not _ours(r):
                # something else answered for the server (a proxy, a port changing
                # hands): no verdict on the data; kept and sent again
                return self._note(False, what), r
            if 400 <= r.status_code < 500 and r.status_code not in (408, 429):
                # the server will never take this body; say so loudly, do not retry
                log.error("rl-insight: %s refused: %s", what, self.last_error)
                self._note(False, what)
                return True, r
            return self._note(False, what), r
        return self._note(True, what), r

    def _get(self, url: str, **params) -> connection.Response:
        return self._connection(url).request("GET", url, params=params or None)

    def _connection(self, url: str) -> connection.Connection:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        conn = self._connections.get(origin)
        if conn is None:
            conn = self._connections[origin] = connection.Connection(origin, self.timeout,
                                                               self._auth)
        return conn

    def call_json(self, method: str, path: str, what: str, body: object = None,
                  **params) -> tuple[int, object]:
        """A JSON request to the server's ``path`` with its credential: (status, parsed
        answer or None); status 0 when nothing answered."""
        if not self.server_url:
            return 0, None
        url = self.server_url + path
        if method == "GET":
            try:
                r = self._get(url, **params)
            except connection.HttpError as exc:
                tracebacks.release(exc)
                self.last_error = f"{exc.__class__.__name__} talking to {url}"
                return 0, None
        else:
            _, r = self._call(method, url, what, data=json.dumps(body).encode(),
                              headers={"Content-Type": "application/json"})
            if r is None:
                return 0, None
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    def push(self, job: str, grouping: dict[str, str], text: str,
             replace: bool = False) -> bool:
        """POST (merge families) or PUT (replace the group) a text exposition."""
        if not self.server_url:
            return True
        return self._request("PUT" if replace else "POST",
                             self.server_url + group_path(job, grouping), f"push to {job}",
                             data=text.encode(),
                             headers={"Content-Type": "text/plain; version=0.0.4"})

    def push_groups(self, groups: Sequence[tuple[str, dict[str, str], str, bool]]
                    ) -> list[bool]:
        """Several groups, (job, grouping, text, replace) each, in one request; per group,
        whether the server has it (or refused it for good: kept would never pass). A batch
        too large for the server is split in halves; a server without the batch route gets
        one request per group, as before."""
        if not self.server_url or not groups:
            return [True] * len(groups)
        if not self.batch_route:
            return [self.push(job, grouping, text, replace)
                    for job, grouping, text, replace in groups]
        body = json.dumps({"groups": [
            {"job": job, "grouping": grouping, "text": text, "replace": replace}
            for job, grouping, text, replace in groups]})
        ok, r = self._call("POST", self.server_url + paths.PUSH_BATCH, "metrics push",
                           data=body.encode(), headers={"Content-Type": "application/json"})
        if r is None or (r.status_code >= 400 and not _ours(r)):
            return [ok] * len(groups)  # not delivered (or not to this server): kept
        if r.status_code == 413:  # each half may pass; one group alone says why not
            if len(groups) == 1:
                job, grouping, text, replace = groups[0]
                return [self.push(job, grouping, text, replace)]
            half = len(groups) // 2
            return self.push_groups(groups[:half]) + self.push_groups(groups[half:])
        if r.status_code == 404:
            log.info("rl-insight: the server has no %s; pushing group by group", paths.PUSH_BATCH)
            self.batch_route = False
            return self.push_groups(groups)
        if r.status_code >= 400:
            return [ok] * len(groups)
        return self._batch_results(r, groups)

    def _batch_results(self, r, groups) -> list[bool]:
        """Per group, from the server's answer; an answer that does not parse delivered
        nothing anyone can be sure of: every group is kept and sent again (a push holds
        values, not increments, so sending one twice is harmless)."""
        try:
            results = r.json()["results"]
            statuses = [int(res.get("status", 200)) for res in results]
        except (ValueError, KeyError, TypeError, AttributeError):
            self.last_error = f"{r.status_code} with an answer that does not parse: " \
                              f"{r.text[:200]!r}"
            self._note(False, "metrics push")
            return [False] * len(groups)
        out = []
        for (job, _, _, _), res, status in zip(groups, results, statuses, strict=False):
            for_good = 400 <= status < 500 and status not in (408, 429)
            if for_good:  # the server will never take it: say so, do not retry
                log.error("rl-insight: push to %s refused: %s: %s", job, status,
                          str(res.get("error", ""))[:300])
            out.append(status < 400 or for_good)
        return out + [False] * (len(groups) - len(out))

    def delete(self, job: str, grouping: dict[str, str]) -> bool:
        if not self.server_url:
            return True
        return self._request("DELETE", self.server_url + group_path(job, grouping),
                             f"delete of {job}")

    def spans(self, payload: bytes) -> bool:
        """POST an encoded ExportTraceServiceRequest."""
        if not self.otlp_url:
            return True
        return self._request("POST", self.otlp_url, "span export", data=payload,
                             headers={"Content-Type": "application/x-protobuf"})

    def post_json(self, path: str, body: dict) -> bool:
        if not self.server_url:
            return True
        return self._request("POST", self.server_url + path, path, json=body)

    def delete_json(self, path: str, body: dict) -> bool:
        if not self.server_url:
            return True
        return self._request("DELETE", self.server_url + path, path, json=body)

    def get_text(self, path: str) -> str | None:
        if not self.server_url:
            return None
        try:
            r = self._get(self.server_url + path)
        except connection.HttpError:
            return None
        self._seen(r)
        return r.text if r.status_code == 200 else None

    def get_json(self, path: str, **params) -> dict | None:
        """A GET of the server's API; None (logged like other failures) when it fails."""
        if not self.server_url:
            return None
        try:
            r = self._get(self.server_url + path, **params)
            if r.status_code < 400:
                self._note(True, path)
                return r.json()
            self.last_error = f"{r.status_code}: {r.text[:200]}"
        except (*connection.HttpError, ValueError) as exc:
            self.last_error = f"{exc.__class__.__name__} talking to {self.server_url}"
        self._note(False, path)
        return None
