"""Grafana's HTTP API, the few calls that put the shipped dashboards into a Grafana the
user runs: plain functions over a base URL and credentials, each error saying what to do
next (which variable to set, which permission to grant, which URL to check).

Credentials come from the environment only, never a flag: a command line is visible to
every user of the machine (``ps``). Calls and answers follow Grafana's documented folder,
dashboard, data source and health API (``/api/folders``, ``/api/dashboards/db``,
``/api/datasources/uid/:uid``, ``/api/health``).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests

TOKEN_VARS = ("RL_INSIGHT_GRAFANA_TOKEN", "GRAFANA_TOKEN")
USER_VAR, PASSWORD_VAR = "GRAFANA_USER", "GRAFANA_PASSWORD"
TOKEN_HOW = ("a service-account token (Grafana: Administration > Users and access > "
             "Service accounts > Add service account, role Editor, then Add token)")


class GrafanaError(RuntimeError):
    """A call Grafana refused or never answered; the message says what to do next.
    ``fatal``: every further call would fail the same way (credentials, network)."""

    def __init__(self, message: str, status: int | None = None, fatal: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.fatal = fatal


class DashboardExists(GrafanaError):
    """412 without overwrite: Grafana already holds a dashboard with that uid."""


@dataclass(frozen=True)
class Auth:
    """The Authorization header and where it came from (named in errors, never shown)."""

    header: str = field(repr=False)
    source: str

    @property
    def basic(self) -> bool:
        return self.header.startswith("Basic ")


def auth_from_env(environ: Mapping[str, str] | None = None) -> Auth:
    """A token (``RL_INSIGHT_GRAFANA_TOKEN``, else ``GRAFANA_TOKEN``) sent as Bearer, else
    basic auth from ``GRAFANA_USER``/``GRAFANA_PASSWORD``."""
    env = os.environ if environ is None else environ
    for name in TOKEN_VARS:
        if env.get(name, "").strip():
            return Auth(f"Bearer {env[name].strip()}", name)
    if env.get(USER_VAR) and env.get(PASSWORD_VAR):
        pair = base64.b64encode(f"{env[USER_VAR]}:{env[PASSWORD_VAR]}".encode()).decode()
        return Auth(f"Basic {pair}", f"{USER_VAR}/{PASSWORD_VAR}")
    raise GrafanaError(
        f"no Grafana credentials: export GRAFANA_TOKEN (or RL_INSIGHT_GRAFANA_TOKEN) with "
        f"{TOKEN_HOW}, or {USER_VAR} and {PASSWORD_VAR} for basic auth. They are read from "
        "the environment only, never from the command line", fatal=True)


def base_url(url: str) -> str:
    """The URL as given, without a trailing slash; a sub-path (Grafana's root_url) stays."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise GrafanaError(f"--grafana-url {url!r}: give the address with its scheme, e.g. "
                           "http://grafana.example:3000", fatal=True)
    return url.strip().rstrip("/")


def link(url: str, path: str) -> str:
    """An absolute link from a path Grafana answered (it includes any sub-path)."""
    return urljoin(url + "/", path) if path else url


def _message(r: requests.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:200] or r.reason
    return str(body.get("message") or body) if isinstance(body, dict) else str(body)


def _refused(url: str, auth: Auth, message: str) -> GrafanaError:
    if auth.basic:
        hint = (f"check {USER_VAR} and {PASSWORD_VAR}, or export GRAFANA_TOKEN with "
                f"{TOKEN_HOW}")
    else:
        hint = f"set {auth.source} to {TOKEN_HOW}; check it is not expired or revoked"
    return GrafanaError(f"Grafana at {url} refused the credentials from {auth.source} "
                        f"(401: {message}): {hint}", 401, fatal=True)


def _forbidden(auth: Auth, what: str, message: str) -> GrafanaError:
    return GrafanaError(f"the account from {auth.source} may not {what} (403: {message}): "
                        "give its service account the Editor role (Admin to create "
                        "folders where Editors may not), or Edit permission on the folder",
                        403, fatal=True)


def request(url: str, auth: Auth | None, method: str, path: str, what: str,
            body: Any = None, timeout: float = 15.0) -> requests.Response:
    """One call; network failures and 401/403 become errors naming the fix, other
    statuses are left to the caller."""
    headers = {"Accept": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth.header
    try:
        r = requests.request(method, url + path, headers=headers, json=body,
                             timeout=timeout, allow_redirects=False)
    except requests.exceptions.SSLError as exc:
        raise GrafanaError(f"TLS with Grafana at {url} failed ({exc.__class__.__name__}): "
                           "if it uses a private CA, export REQUESTS_CA_BUNDLE=<the CA "
                           "file>", fatal=True) from None
    except requests.Timeout:
        raise GrafanaError(f"Grafana at {url} did not answer within {timeout:.0f}s ({what}):"
                           " a firewall, or the wrong host in --grafana-url?",
                           fatal=True) from None
    except requests.ConnectionError as exc:
        reason = "connection refused" if "refused" in str(exc).lower() else \
            exc.__class__.__name__
        raise GrafanaError(f"cannot reach Grafana at {url} ({reason}): check --grafana-url "
                           "(scheme, host and port; Grafana listens on 3000 by default) and"
                           " that Grafana runs", fatal=True) from None
    if r.status_code == 401 and auth is not None:
        raise _refused(url, auth, _message(r))
    if r.status_code == 403 and auth is not None:
        raise _forbidden(auth, what, _message(r))
    if 300 <= r.status_code < 400:
        raise GrafanaError(f"Grafana at {url} redirected {path} to "
                           f"{r.headers.get('location', '?')}: give that address (with its "
                           "sub-path) as --grafana-url", r.status_code, fatal=True)
    return r


def _json(r: requests.Response, url: str, what: str) -> Any:
    try:
        return r.json()
    except ValueError:
        raise GrafanaError(f"{url} answered {what} with something other than JSON "
                           f"({r.status_code}): is --grafana-url Grafana itself, with its "
                           "sub-path if it is served under one?", r.status_code,
                           fatal=True) from None


def _failed(r: requests.Response, what: str) -> GrafanaError:
    return GrafanaError(f"{what}: Grafana answered {r.status_code}: {_message(r)}",
                        r.status_code)


def health(url: str, timeout: float = 15.0) -> dict:
    """``GET /api/health`` (no credentials needed): Grafana's version, database state."""
    r = request(url, None, "GET", "/api/health", "report its health", timeout=timeout)
    body = _json(r, url, "GET /api/health")
    if not isinstance(body, dict) or "database" not in body:
        raise GrafanaError(f"{url}/api/health does not answer like Grafana ({r.status_code}"
                           "): check --grafana-url", r.status_code, fatal=True)
    if r.status_code != 200 or body.get("database") != "ok":
        raise GrafanaError(f"Grafana at {url} is not healthy (database: "
                           f"{body.get('database')}): see Grafana's own log", r.status_code,
                           fatal=True)
    return body


def get_folder(url: str, auth: Auth, uid: str) -> dict | None:
    """``GET /api/folders/:uid``; None when Grafana says 404 (absent, or not visible)."""
    what = f"read folder {uid}"
    r = request(url, auth, "GET", f"/api/folders/{quote(uid, safe='')}", what)
    if r.status_code == 404:
        return None
    if r.status_code != 200:
        raise _failed(r, what)
    return _json(r, url, what)


def list_folders(url: str, auth: Auth) -> list[dict]:
    """``GET /api/folders``, every page (Grafana answers at most ``limit`` per page)."""
    out: list[dict] = []
    limit = 1000
    for page in range(1, 1000):
        r = request(url, auth, "GET", f"/api/folders?limit={limit}&page={page}",
                    "list folders")
        if r.status_code != 200:
            raise _failed(r, "list folders")
        got = _json(r, url, "list folders")
        out += got
        if len(got) < limit:
            break
    return out


def create_folder(url: str, auth: Auth, uid: str, title: str) -> dict:
    """``POST /api/folders`` with a fixed uid, so every later run finds the same folder."""
    what = f"create folder {title!r}"
    r = request(url, auth, "POST", "/api/folders", what, {"uid": uid, "title": title})
    if r.status_code == 409:
        raise GrafanaError(
            f"{what}: a folder or dashboard with uid {uid!r} exists but the account cannot "
            f"read it (409: {_message(r)}): give the service account View permission on "
            "that folder (Dashboards > the folder > Permissions), or choose another "
            "--folder", 409, fatal=True)
    if r.status_code != 200:
        raise _failed(r, what)
    return _json(r, url, what)


def get_datasource(url: str, auth: Auth, uid: str) -> dict | None:
    """``GET /api/datasources/uid/:uid``; None when there is none with that uid."""
    what = f"read data source {uid}"
    r = request(url, auth, "GET", f"/api/datasources/uid/{quote(uid, safe='')}", what)
    if r.status_code == 404:
        return None
    if r.status_code != 200:
        raise _failed(r, what)
    return _json(r, url, what)


def save_dashboard(url: str, auth: Auth, dashboard: dict, folder_uid: str,
                   overwrite: bool, message: str = "") -> dict:
    """``POST /api/dashboards/db``: {id, uid, url, status, version}. Without overwrite, a
    dashboard already there answers 412 and is kept (:class:`DashboardExists`)."""
    what = f"save dashboard {dashboard.get('uid')}"
    body = {"dashboard": dashboard, "folderUid": folder_uid, "overwrite": overwrite,
            "message": message}
    r = request(url, auth, "POST", "/api/dashboards/db", what, body)
    if r.status_code == 412:
        raise DashboardExists(f"{what}: {_message(r)}", 412)
    if r.status_code == 400 and "folder not found" in _message(r).lower():
        raise GrafanaError(f"{what}: Grafana does not find folder {folder_uid!r} for this "
                           "account (400: folder not found): give its service account "
                           "Edit permission on the folder", 400, fatal=True)
    if r.status_code != 200:
        raise _failed(r, what)
    return _json(r, url, what)
