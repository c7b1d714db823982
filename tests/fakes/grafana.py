"""FAKE Grafana (Grafana cannot be installed here): the parts of `bin/grafana` the server
drives, with the real command lines and answers (Grafana 13: `grafana server --homepath H
--config C`, `grafana cli --homepath H --config C admin reset-admin-password
--password-from-stdin`, `GET /api/health`). It keeps the admin password in
``<[paths] data>/FAKE-admin-password`` the way the real one keeps it in its database:
set from [security] admin_password only when the user is first created, changed only by
the reset command. Not Grafana."""

from __future__ import annotations

import configparser
import http.server
import json
import sys
from pathlib import Path

VERSION = "13.0.0"


def options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    flags, rest, it = {}, [], iter(argv)
    for a in it:
        if a in ("--homepath", "--config"):
            flags[a[2:]] = next(it)
        else:
            rest.append(a)
    return flags, rest


def ini(path: str) -> configparser.ConfigParser:
    c = configparser.ConfigParser(interpolation=None)
    c.read(path)
    return c


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-v"]):
        print(f"grafana version {VERSION}")
        return 0
    command, flags, rest = argv[0], *options(argv[1:])
    conf = ini(flags["config"])
    stored = Path(conf["paths"]["data"]) / "FAKE-admin-password"
    if command == "cli":
        if rest != ["admin", "reset-admin-password", "--password-from-stdin"]:
            print(f"FAKE grafana cli: unsupported {rest}", file=sys.stderr)
            return 2
        if not stored.exists():
            print("Error: could not find admin user", file=sys.stderr)
            return 1
        stored.write_text(sys.stdin.read().strip())
        print("Admin password changed successfully ✔")
        return 0
    if command != "server":
        return 2
    stored.parent.mkdir(parents=True, exist_ok=True)
    if not stored.exists():  # the admin user is created with the configured password once
        stored.write_text(conf["security"]["admin_password"])

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"database": "ok", "version": VERSION}).encode()
            self.send_response(200 if self.path == "/api/health" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer((conf["server"]["http_addr"],
                                     int(conf["server"]["http_port"])), Health)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
