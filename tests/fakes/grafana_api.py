"""FAKE Grafana HTTP API (Grafana cannot run here): the folder, dashboard, data source and
health calls `rl-insight dashboards install` makes, answered the way Grafana documents
them (docs/sources/developers/http_api/{folder,dashboard}.md) and its source behaves
(pkg/services/dashboards/errors.go, pkg/api/apierrors/{folder,dashboard}.go, the
version check of the dashboard store, pkg/services/authn/clients/api_key.go). Not Grafana.

- ``GET /api/health``: no credentials needed.
- Everything else needs ``Authorization: Bearer <token>`` (or basic auth, or basic
  ``api_key:<token>``): 401 ``{"message": "Invalid API key", ...}`` for an unknown token,
  ``{"message": "Unauthorized"}`` without any. A token of role Viewer gets 403 on writes.
- ``GET /api/folders`` (``limit``, ``page``), ``GET /api/folders/:uid`` (404 ``{"status":
  "not-found", "message": "folder not found"}``), ``POST /api/folders`` ({uid, title};
  400 without title, 409 on a uid taken).
- ``POST /api/dashboards/db`` ({dashboard, folderUid, overwrite, message}): a new uid is
  version 1; an existing one whose version differs from the one sent answers 412
  ``{"status": "version-mismatch"}`` unless overwrite, else it is saved as version + 1;
  an unknown folderUid is 400 ``folder not found``; no folderUid puts it at the root.
- ``GET /api/dashboards/uid/:uid`` ({dashboard, meta: {folderUid, version, url}}) and
  ``GET /api/datasources/uid/:uid`` (404 ``{"message": "Data source not found"}``).
"""

from __future__ import annotations

import base64
import copy
import http.server
import json
import re
import threading
from urllib.parse import parse_qs, unquote, urlsplit

UID = re.compile(r"[A-Za-z0-9._-]+")
WRITE_ROLES = ("Editor", "Admin")


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


class FakeGrafanaAPI:
    """Started on a free loopback port by the test; ``state`` is what Grafana would store."""

    def __init__(self, tokens: dict[str, str] | None = None,
                 users: dict[str, str] | None = None,
                 datasources: list[dict] | None = None, version: str = "13.0.0") -> None:
        self.tokens = dict(tokens or {})          # token -> role
        self.users = dict(users or {})            # user -> password (role Admin)
        self.version = version
        self.lock = threading.Lock()
        self.folders: dict[str, dict] = {}
        self.dashboards: dict[str, dict] = {}     # uid -> {id, dashboard, folderUid, version}
        self.datasources = {d["uid"]: d for d in (datasources or [])}
        self.requests: list[dict] = []            # method, path, authorization, body
        self.hold_first = threading.Event()       # set: the first API call waits ...
        self.held = threading.Event()             # ... here (seen) until ...
        self.release = threading.Event()          # ... this is set
        self._ids = 0
        self._server: http.server.ThreadingHTTPServer | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> FakeGrafanaAPI:
        fake = self

        class Handler(_Handler):
            grafana = fake

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- the model ----------------------------------------------------------------
    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def role(self, authorization: str) -> tuple[str | None, dict | None]:
        """The caller's role, or the 401 body Grafana answers."""
        if authorization.startswith("Bearer "):
            role = self.tokens.get(authorization[7:])
            return (role, None) if role else \
                (None, {"message": "Invalid API key", "messageId": "api-key.invalid",
                        "statusCode": 401, "traceID": ""})
        if authorization.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(authorization[6:]).decode().partition(
                    ":")
            except ValueError:
                user, password = "", ""
            if user == "api_key":
                return self.role(f"Bearer {password}")
            if user in self.users and self.users[user] == password:
                return "Admin", None
            return None, {"message": "Invalid username or password",
                          "messageId": "password-auth.failed", "statusCode": 401,
                          "traceID": ""}
        return None, {"message": "Unauthorized"}

    def folder_view(self, f: dict) -> dict:
        return {**f, "url": f"/dashboards/f/{f['uid']}/{slug(f['title'])}",
                "hasAcl": False, "canSave": True, "canEdit": True, "canAdmin": True}

    def create_folder(self, body: dict) -> tuple[int, object]:
        title = (body.get("title") or "").strip()
        uid = body.get("uid") or f"f{self._ids + 1:09d}"
        if not title:
            return 400, {"message": "folder title cannot be empty"}
        if len(uid) > 40:
            return 400, {"message": "uid too long, max 40 characters"}
        if not UID.fullmatch(uid):
            return 400, {"message": "invalid uid for folder provided"}
        if uid in self.folders or uid in self.dashboards:
            return 409, {"message": "a folder/dashboard with the same uid already exists"}
        self.folders[uid] = {"id": self._next_id(), "uid": uid, "title": title,
                             "version": 1}
        return 200, self.folder_view(self.folders[uid])

    def save_dashboard(self, body: dict) -> tuple[int, object]:
        dash = body.get("dashboard")
        if not isinstance(dash, dict):
            return 400, {"message": "bad request data"}
        title = (dash.get("title") or "").strip()
        if not title:
            return 400, {"message": "Dashboard title cannot be empty", "status": "empty-name"}
        uid = dash.get("uid") or f"d{self._ids + 1:09d}"
        if len(uid) > 40:
            return 400, {"message": "uid too long, max 40 characters"}
        if not UID.fullmatch(uid):
            return 400, {"message": "uid contains illegal characters"}
        folder = body.get("folderUid") or ""
        if folder and folder not in self.folders:
            return 400, {"message": "folder not found"}
        overwrite = bool(body.get("overwrite"))
        sent_id = dash.get("id") or 0
        by_id = next((d for d in self.dashboards.values() if d["id"] == sent_id), None)
        if sent_id and by_id is None:
            return 404, {"message": "Dashboard not found", "status": "not-found"}
        existing = self.dashboards.get(uid)
        if by_id is not None and existing is not None and by_id is not existing:
            return 400, {"message": "A dashboard with the same uid already exists"}
        existing = existing or by_id
        if existing is not None:
            if (dash.get("version") or 0) != existing["version"] and not overwrite:
                return 412, {"message": "The dashboard has been changed by someone else",
                             "status": "version-mismatch"}
            version, did = existing["version"] + 1, existing["id"]
        else:
            version, did = 1, self._next_id()
        stored = copy.deepcopy(dash)
        stored.update(id=did, uid=uid, version=version)
        self.dashboards[uid] = {"id": did, "uid": uid, "dashboard": stored,
                                "folderUid": folder, "version": version,
                                "message": body.get("message", "")}
        return 200, {"id": did, "uid": uid, "url": f"/d/{uid}/{slug(title)}",
                     "status": "success", "version": version, "slug": slug(title)}


class _Handler(http.server.BaseHTTPRequestHandler):
    grafana: FakeGrafanaAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.route("GET")

    def do_POST(self):  # noqa: N802
        self.route("POST")

    def route(self, method: str) -> None:
        g = self.grafana
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        path, query = unquote(parts.path), parse_qs(parts.query)
        auth = self.headers.get("Authorization", "")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        with g.lock:
            g.requests.append({"method": method, "path": self.path, "authorization": auth,
                               "body": body})
        if path == "/api/health" and method == "GET":
            return self.answer(200, {"commit": "FAKE", "database": "ok",
                                     "version": g.version})
        if not path.startswith("/api/"):
            return self.answer(404, {"message": "Not found"})
        if g.hold_first.is_set() and not g.held.is_set():
            g.held.set()
            g.release.wait(30)
        role, refused = g.role(auth)
        if refused is not None:
            return self.answer(401, refused)
        if body is None:
            return self.answer(400, {"message": "bad request data"})
        if method == "POST" and role not in WRITE_ROLES:
            action = "folders:create" if path == "/api/folders" else "dashboards:create"
            return self.answer(403, {"message": "You'll need additional permissions to "
                                     f"perform this action. Permissions needed: {action}"})
        with g.lock:
            code, out = self.dispatch(method, path, query, body)
        self.answer(code, out)

    def dispatch(self, method: str, path: str, query: dict, body: dict):
        g = self.grafana
        if method == "GET" and path == "/api/folders":
            limit = int(query.get("limit", ["1000"])[0])
            page = int(query.get("page", ["1"])[0])
            rows = [{"id": f["id"], "uid": f["uid"], "title": f["title"]}
                    for f in sorted(g.folders.values(), key=lambda f: f["title"])]
            return 200, rows[(page - 1) * limit:page * limit]
        if method == "GET" and path.startswith("/api/folders/"):
            f = g.folders.get(path.removeprefix("/api/folders/"))
            return (200, g.folder_view(f)) if f else \
                (404, {"status": "not-found", "message": "folder not found"})
        if method == "POST" and path == "/api/folders":
            return g.create_folder(body)
        if method == "POST" and path == "/api/dashboards/db":
            return g.save_dashboard(body)
        if method == "GET" and path.startswith("/api/dashboards/uid/"):
            d = g.dashboards.get(path.removeprefix("/api/dashboards/uid/"))
            if d is None:
                return 404, {"message": "Dashboard not found", "status": "not-found"}
            return 200, {"dashboard": d["dashboard"], "meta": {
                "folderUid": d["folderUid"], "version": d["version"],
                "url": f"/d/{d['uid']}/{slug(d['dashboard']['title'])}"}}
        if method == "GET" and path.startswith("/api/datasources/uid/"):
            ds = g.datasources.get(path.removeprefix("/api/datasources/uid/"))
            return (200, ds) if ds else (404, {"message": "Data source not found"})
        return 404, {"message": "Not found"}
