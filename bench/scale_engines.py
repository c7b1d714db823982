"""Many simulated vLLM /metrics endpoints in one process, for bench/scale.py.

    python bench/scale_engines.py --count 250 [--engines 2] [--seconds 900]

Each endpoint listens on a port of its own on 127.0.0.1 and answers every GET with a
vLLM-sized text exposition: the families, labels, types and buckets of
examples/fake_engines.py's vLLM engine (after it has run: every dev-mode operation,
finish reason and draft position present), once per engine core of the replica (label
``engine``; two by default, as a data-parallel-2 replica serves), plus the
``process_*`` and ``python_*`` families that prometheus_client's default registry adds
to vLLM's /metrics. Gauges are static; counters and histograms advance with every
scrape (all of a histogram's samples by the same factor, so buckets stay cumulative).

Threads only (no asyncio): one thread accepts on all the process's listening sockets,
one thread per connection answers (HTTP/1.1 keep-alive, as Prometheus scrapes). The
first line on stdout is JSON ``{"pid": ..., "ports": [...], "series": ...}``. The
process ends when its stdin closes or after ``--seconds``, whichever comes first.
"""

from __future__ import annotations

import argparse
import http.server
import json
import random
import selectors
import socket
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import prometheus_client as pc  # noqa: E402

ADVANCING = ("counter", "histogram", "summary")


def fake_vllm(seed: int):
    """examples/fake_engines.py's FAKE vLLM, without its HTTP server (which would listen
    on every interface) and its clock thread: driven here on simulated time."""
    from examples.fake_engines import FakeEngine

    return FakeEngine("vllm", seed=seed, live=False)


def exposition(engines: int) -> str:
    """One replica's /metrics text, as the FAKE vLLM serves it after a few steps."""
    pc.disable_created_metrics()
    texts = []
    for e in range(engines):
        eng = fake_vllm(e)
        eng.submit(40)
        for fam, ops in (("sleep_mode", ("sleep", "wake", "release_kv_cache_memory")),
                         ("rl_weight_update", ("start", "update", "finish"))):
            for op in ops:
                eng.operation(fam, op, 0.0)
        now = time.time()
        for i in range(200):  # 10 s of engine time: requests scheduled, run, finished
            eng._tick(now + i * eng.TICK)
        text = pc.generate_latest(eng.registry).decode()
        if e:
            # the per-process families (no `engine` label) once; the engine's own again
            text = "\n".join(line for line in text.splitlines()
                             if 'engine="0"' in line or line.startswith("#"))
            text = text.replace('engine="0"', f'engine="{e}"') + "\n"
        texts.append(text)
    texts.append(pc.generate_latest(pc.REGISTRY).decode())  # process_*, python_*
    return merge(texts)


def merge(texts: list[str]) -> str:
    """Families of several expositions, each family's samples together, once each."""
    order: list[str] = []
    fams: dict[str, list[str]] = {}
    heads: dict[str, list[str]] = {}
    for text in texts:
        current = None
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("# "):
                parts = line.split(" ", 3)
                current = parts[2]
                if current not in fams:
                    order.append(current)
                    fams[current] = []
                    heads[current] = []
                if line not in heads[current]:
                    heads[current].append(line)
                continue
            fams[current].append(line)
    out = []
    for name in order:
        if fams[name]:
            out += heads[name] + fams[name]
    return "\n".join(out) + "\n"


class Template:
    """The exposition split into fixed text and the values that advance per scrape."""

    def __init__(self, text: str) -> None:
        self.parts: list[str] = []  # text before each advancing value, then the tail
        self.bases: list[float] = []
        self.series = 0
        kind = ""
        fixed: list[str] = []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                kind = line.split()[3]
            if line.startswith("#"):
                fixed.append(line + "\n")
                continue
            self.series += 1
            head, _, value = line.rpartition(" ")
            if kind in ADVANCING and float(value) > 0:
                fixed.append(head + " ")
                self.parts.append("".join(fixed))
                self.bases.append(float(value))
                fixed = ["\n"]
            else:
                fixed.append(line + "\n")
        self.tail = "".join(fixed)

    def render(self, factor: float) -> bytes:
        out = []
        for part, base in zip(self.parts, self.bases, strict=True):
            out.append(part)
            out.append(repr(base * factor))
        out.append(self.tail)
        return "".join(out).encode()


class Endpoint:
    def __init__(self, template: Template, rng: random.Random) -> None:
        self.template = template
        self.scale = rng.uniform(0.5, 2.0)
        self.scrapes = 0
        self.lock = threading.Lock()

    def body(self) -> bytes:
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
        return self.template.render(self.scale * n)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, one connection per scraper

    def do_GET(self):  # noqa: N802
        body = self.server.endpoint.body()
        self.send_response(200)
        self.send_header("Content-Type", pc.CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class _Server:
    """What a request handler needs of its server: here, which endpoint it answers."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint


def serve(endpoints: list[Endpoint], host: str) -> list[int]:
    sel = selectors.DefaultSelector()
    ports = []
    for ep in endpoints:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(64)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, _Server(ep))
        ports.append(s.getsockname()[1])

    def handle(conn: socket.socket, addr, server: _Server) -> None:
        conn.setblocking(True)
        conn.settimeout(120)
        try:
            Handler(conn, addr, server)
        except OSError:
            pass
        finally:
            conn.close()

    def accept_loop() -> None:
        while True:
            for key, _ in sel.select():
                try:
                    conn, addr = key.fileobj.accept()
                except BlockingIOError:
                    continue
                threading.Thread(target=handle, args=(conn, addr, key.data),
                                 daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True, name="accept").start()
    return ports


def main() -> int:
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--engines", type=int, default=2, help="engine cores per replica")
    ap.add_argument("--seconds", type=float, default=900, help="exit after this long")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.host.startswith("127."):
        ap.error("endpoints listen on loopback only (127.0.0.0/8)")
    template = Template(exposition(args.engines))
    rng = random.Random(args.seed)
    endpoints = [Endpoint(template, rng) for _ in range(args.count)]
    ports = serve(endpoints, args.host)
    print(json.dumps({"pid": os.getpid(), "host": args.host, "ports": ports,
                      "series": template.series,
                      "bytes": len(template.render(1.0))}), flush=True)
    done = threading.Event()

    def stdin_closed() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=stdin_closed, daemon=True).start()
    done.wait(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
