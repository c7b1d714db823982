"""The collector's kept-alive connection (collector/connection.py) against a real HTTP
server on loopback: bodies and headers as sent, one connection for many requests, a
connection the server closed opened again, errors raised as HttpError, and the Sender
using it with its back-off on 503."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rl_insight.collector.connection import Connection, HttpError
from rl_insight.collector.push import Sender


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the server does

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        srv = self.server
        srv.seen.append({"path": self.path, "body": body, "port": self.client_address[1],
                         "auth": self.headers.get("Authorization"),
                         "type": self.headers.get("Content-Type")})
        status, extra = srv.answers.pop(0) if srv.answers else (200, {})
        try:
            groups = len(json.loads(body)["groups"])
        except (ValueError, KeyError, TypeError):
            groups = 1
        out = extra.pop("body", None) or json.dumps(
            {"results": [{"status": 200}] * groups, "n": len(srv.seen)}).encode()
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        if srv.close_after:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.seen, srv.answers, srv.close_after = [], [], False
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_requests_share_one_connection_and_carry_body_and_headers(server):
    url = f"http://127.0.0.1:{server.server_port}"
    conn = Connection(url, 5, {"Authorization": "Bearer t"})
    for i in range(5):
        r = conn.request("POST", url + "/v1/traces?x=1", data=f"body{i}".encode(),
                         headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 200 and r.json()["n"] == i + 1
    assert [s["body"] for s in server.seen] == [f"body{i}".encode() for i in range(5)]
    assert {s["path"] for s in server.seen} == {"/v1/traces?x=1"}
    assert {s["auth"] for s in server.seen} == {"Bearer t"}
    assert len({s["port"] for s in server.seen}) == 1  # kept alive


def test_a_connection_the_server_closed_is_opened_again(server):
    url = f"http://127.0.0.1:{server.server_port}"
    conn = Connection(url, 5, {})
    server.close_after = True
    for _ in range(3):
        assert conn.request("POST", url + "/x", json={"a": 1}).status_code == 200
    assert len({s["port"] for s in server.seen}) == 3
    assert {s["type"] for s in server.seen} == {"application/json"}


def test_a_pool_emptied_at_exit_opens_a_connection_at_once(server):
    """urllib3 empties its pools from weakref's exit hook, which may run before the
    client's last pushes (a run finished from an exit hook): the next request opens a
    connection at once; a blocking pool waited its whole timeout for one. Two threads
    still send one at a time, on one connection."""
    from urllib3.connectionpool import _close_pool_connections

    url = f"http://127.0.0.1:{server.server_port}"
    conn = Connection(url, 30, {})
    assert conn.request("POST", url + "/x", data=b"").status_code == 200
    for key in list(conn.manager.pools.keys()):  # what urllib3's finalizer does at exit
        _close_pool_connections(conn.manager.pools[key].pool)
    t0 = time.monotonic()
    assert conn.request("POST", url + "/x", data=b"").status_code == 200
    # a loopback answer takes milliseconds even on a loaded machine; the bug took 30 s
    # (measured 2026-12-07, 20 runs beside one busy loop and an end-to-end run, load
    # 8-10: 0.8-7.4 ms; 15 s is half the timeout the bug waited out)
    assert time.monotonic() - t0 < 15
    server.seen.clear()
    threads = [threading.Thread(target=lambda: [conn.request("POST", url + "/x", data=b"")
                                                for _ in range(5)]) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(server.seen) == 10 and len({s["port"] for s in server.seen}) == 1


def test_nothing_listening_raises_an_http_error():
    from rl_insight.common import netaddr

    url = f"http://127.0.0.1:{netaddr.free_port()}"
    with pytest.raises(HttpError):
        Connection(url, 1, {}).request("POST", url + "/x", data=b"")


def test_the_sender_backs_off_after_503_and_sends_again(server):
    url = f"http://127.0.0.1:{server.server_port}"
    sender = Sender(url, token="tok")
    assert sender._connection(url).proxy == ""  # no proxy here: a direct connection
    server.answers.append((503, {"Retry-After": "0.2"}))
    assert sender.push_groups([("j", {"a": "b"}, "x 1\n", True)]) == [False]
    assert sender.push_groups([("j", {"a": "b"}, "x 1\n", True)]) == [False]  # waiting
    assert len(server.seen) == 1 and sender.backoffs == 1
    deadline = time.monotonic() + 5
    while sender._backing_off() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sender.push_groups([("j", {"a": "b"}, "x 1\n", True)]) == [True]
    assert [s["auth"] for s in server.seen] == ["Bearer tok"] * 2


OURS = "X-RL-Insight-Started"  # every answer of this project's server carries it


def groups(n: int) -> list[tuple[str, dict, str, bool]]:
    return [("j", {"instance": str(i)}, f"x {i}\n", False) for i in range(n)]


def test_a_batch_answer_that_does_not_parse_delivers_nothing(server):
    url = f"http://127.0.0.1:{server.server_port}"
    sender = Sender(url)
    server.answers.append((200, {OURS: "1", "body": b"<html>gateway</html>"}))
    assert sender.push_groups(groups(3)) == [False] * 3  # kept, sent again
    server.answers.append((200, {OURS: "1"}))
    assert sender.push_groups(groups(3)) == [True] * 3
    assert [len(json.loads(s["body"])["groups"]) for s in server.seen] == [3, 3]


def test_a_batch_too_large_is_split_until_each_part_passes(server):
    url = f"http://127.0.0.1:{server.server_port}"
    sender = Sender(url)
    server.answers += [(413, {OURS: "1"}), (413, {OURS: "1"})]  # 8 groups, then 4
    assert sender.push_groups(groups(8)) == [True] * 8
    sizes = [len(json.loads(s["body"])["groups"]) for s in server.seen]
    assert sizes == [8, 4, 2, 2, 4]
    delivered = sorted(g["grouping"]["instance"] for s in server.seen[-3:]
                       for g in json.loads(s["body"])["groups"])
    assert delivered == [str(i) for i in range(8)]


def test_one_group_too_large_alone_is_refused_for_good_and_said(server, caplog):
    url = f"http://127.0.0.1:{server.server_port}"
    sender = Sender(url)
    server.answers += [(413, {OURS: "1"}), (413, {OURS: "1"})]
    assert sender.push_groups(groups(1)) == [True]  # refused for good: not kept
    assert server.seen[-1]["path"].startswith("/metrics/job@base64/")
    assert any("refused: 413" in r.getMessage() for r in caplog.records)


def test_a_404_without_this_servers_header_keeps_the_batch_route(server):
    """A proxy's 404 while the server restarts is no sign of an older server."""
    url = f"http://127.0.0.1:{server.server_port}"
    sender = Sender(url)
    server.answers.append((404, {}))
    assert sender.push_groups(groups(2)) == [False, False]
    assert sender.batch_route


# -- one HTTP stack for every case a sender meets: HTTPS behind a private CA, and the
# environment's proxy (a real one: Debian's tinyproxy) for HTTP and for HTTPS (CONNECT)
def _private_ca(tmp_path):
    """A CA and a certificate for 127.0.0.1 it signed: (the CA's PEM, cert, key)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(
        ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
          .public_key(ca_key.public_key()).serial_number(1)
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    import ipaddress
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem")]
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.fixture
def tls_server(server, tmp_path):
    import ssl

    ca, cert, key = _private_ca(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.socket = context.wrap_socket(srv.socket, server_side=True)
    srv.seen, srv.answers, srv.close_after = [], [], False
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.ca = ca
    yield srv
    srv.shutdown()
    srv.server_close()


def test_https_behind_a_private_ca_is_verified_against_the_bundle_named(tls_server,
                                                                        monkeypatch):
    """Without the CA, the certificate is refused (kept and said, never raised); with
    SSL_CERT_FILE (or REQUESTS_CA_BUNDLE) naming it, the pushes go."""
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    url = f"https://127.0.0.1:{tls_server.server_port}"
    refused = Sender(url, token="tok")
    assert refused.push_groups(groups(2)) == [False, False]
    assert "SSL" in refused.last_error or "Certificate" in refused.last_error, \
        refused.last_error
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_server.ca))
    tls_server.answers.append((200, {OURS: "1"}))
    sender = Sender(url, token="tok")
    assert sender.push_groups(groups(2)) == [True, True]
    assert tls_server.seen[-1]["auth"] == "Bearer tok"


@pytest.fixture
def proxy(tmp_path):
    """Debian's tinyproxy on a free loopback port, logging what it forwards."""
    import shutil
    import subprocess

    from rl_insight.common import netaddr
    from tests.conftest import wait_for

    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy (Debian tinyproxy-bin) is not installed: "
                    "scripts/system-deps.sh")
    port = netaddr.free_port()
    log = tmp_path / "tinyproxy.log"
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile \"{log}\"\n"
                    "LogLevel Connect\nMaxClients 20\nAllow 127.0.0.1\n")
    # no ConnectPort line: CONNECT to any port (the TLS server's), as tinyproxy(8) says
    proc = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    import socket

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_for(listening, 10, "tinyproxy listening")
    yield f"http://127.0.0.1:{port}", log
    proc.kill()
    proc.wait(5)


@pytest.mark.integration  # starts tinyproxy
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_environments_proxy_carries_http_and_https(server, tls_server, proxy, scheme,
                                                        monkeypatch):
    """http_proxy / https_proxy as curl reads them (no_proxy emptied: loopback is usually
    in it): plain HTTP forwarded, HTTPS tunnelled with CONNECT and still verified."""
    proxy_url, log = proxy
    target = server if scheme == "http" else tls_server
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(f"{scheme}_proxy", proxy_url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_server.ca))
    url = f"{scheme}://127.0.0.1:{target.server_port}"
    sender = Sender(url, token="tok")
    assert sender._connection(url).proxy == proxy_url
    target.answers.append((200, {OURS: "1"}))
    assert sender.push_groups(groups(2)) == [True, True], sender.last_error
    assert target.seen[-1]["auth"] == "Bearer tok"
    said = log.read_text()
    # the request lines tinyproxy logged: a tunnel for HTTPS, the absolute URL for HTTP
    asked = "CONNECT 127.0.0.1" if scheme == "https" else "POST http://127.0.0.1"
    assert f"): {asked}:{target.server_port}" in said, said[-2000:]
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    assert Sender(url)._connection(url).proxy == ""  # bypassed as no_proxy says
