"""A burst of 1,000 engine registrations while lane actors push: does the intake wait on
the registrations' discovery files?

    python bench/registrations.py [--baseline REF] [--rounds 3] [--seconds 20] [--rate 400]

For each server (the checkout, then REF in a git worktree: by default the commit before
the discovery files left the database's transaction; each started with the CLI as the
tests start it, Prometheus, Tempo and Grafana off, on CPU 0), the lane load is open loop
on CPU 1: LaneCore's own bodies (spans, run metrics, own counters) at ``--rate``
requests a second over 16 keep-alive connections, each request's latency counted from
the moment it was due (a late start is latency too). ``--rounds`` rounds of two phases of
``--seconds`` each: the load alone, then the load while 8 senders register 1,000 targets
(one engine endpoint each, with their run, as ``register_rollout_replicas`` sends them)
as fast as they are answered, starting 1 s into the phase; between rounds, outside both
phases, the targets are removed again, and a third phase runs the load alone once more.
The figure is the intake's p99 with the burst over its p99 without, per round, and its
median: 1.0 is no interference. Beside it, the p99 of the requests due while the burst
ran (over the alone phase's p99), the p99 of each second, and the third phase's p99 over
the first's: what two phases with no burst at all differ by, the bench's own spread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import save  # noqa: E402
from bench.intake import Sink, lane_requests, running_server, worktree  # noqa: E402
from bench.scale_lanes import Conn  # noqa: E402

BASELINE = "b9f1b14"  # discovery files written inside the transaction, under its lock
CONNECTIONS = 16
SENDERS = 8


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


async def lane_load(host: str, port: int, rate: float, seconds: float,
                    route: str = "pushgateway") -> list[tuple[float, float]]:
    """(due, latency) of each lane request, open loop."""
    plans = [r for plan in lane_requests(400, route) for r in plan]
    lat: list[tuple[float, float]] = []
    start = time.monotonic() + 0.2
    each = CONNECTIONS / rate  # the gap between one connection's requests

    async def conn(c: int) -> None:
        k = Conn(host, port, 30.0)
        i = 0
        while True:
            due = start + c * each / CONNECTIONS + i * each
            if due > start + seconds:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            method, path, body, ctype = plans[(c + i * CONNECTIONS) % len(plans)]
            status = await k.request(method, path, body, ctype)
            lat.append((due, time.monotonic() - due if 200 <= status < 300
                        else float("inf")))
            i += 1
        k.close()

    await asyncio.gather(*(conn(c) for c in range(CONNECTIONS)))
    return lat


async def send_all(host: str, port: int, n: int, method: str = "POST") -> list[int]:
    """The n registrations (or, with DELETE, their removals) from 8 senders, each sending
    its next when the last is answered: (answered 2xx, not)."""
    done = [0, 0]

    async def sender(s: int) -> None:
        k = Conn(host, port, 60.0)
        for i in range(s, n, SENDERS):
            body = json.dumps({"job_name": "vllm",
                               "targets": [f"10.{i // 250}.{i % 250}.1:8000"],
                               "labels": {"replica": str(i)}, "project": "bench",
                               "experiment_name": "registrations"}).encode()
            status = await k.request(method, "/api/v1/prometheus/targets", body,
                                     "application/json")
            done[0 if 200 <= status < 300 else 1] += 1
        k.close()

    await asyncio.gather(*(sender(s) for s in range(SENDERS)))
    return done


async def burst(host: str, port: int, n: int) -> dict:
    await asyncio.sleep(1.0)  # inside the lane load's phase
    began = time.monotonic()
    done = await send_all(host, port, n)
    return {"registered": done[0], "failed": done[1], "burst_s": time.monotonic() - began,
            "window": (began, time.monotonic())}


def phase(url: str, args, registrations: int) -> dict:
    host, port = url.split("//", 1)[1].split(":")

    async def go():
        jobs = [lane_load(host, int(port), args.rate, args.seconds, args.route)]
        if registrations:
            jobs.append(burst(host, int(port), registrations))
        return await asyncio.gather(*jobs)

    got = asyncio.run(go())
    lat = [x for _, x in got[0]]
    out = {"requests": len(lat), "failed": sum(x == float("inf") for x in lat),
           "p50_ms": 1000 * pct(lat, 0.5), "p99_ms": 1000 * pct(lat, 0.99),
           "max_ms": 1000 * max(lat)}
    t0 = got[0][0][0]
    buckets: dict[int, list[float]] = {}
    for due, x in got[0]:
        buckets.setdefault(int(due - t0), []).append(x)
    out["p99_ms_by_second"] = [round(1000 * pct(buckets.get(k, []), 0.99), 1)
                               for k in range(int(args.seconds) + 1)]
    if registrations:
        b = got[1]
        began, ended = b.pop("window")
        # the requests due while the burst ran: the whole phase's p99 would dilute them
        during = [x for due, x in got[0] if began <= due <= ended]
        out["burst_at_s"] = round(began - t0, 2)
        out.update(b, during={"requests": len(during), "p50_ms": 1000 * pct(during, 0.5),
                              "p99_ms": 1000 * pct(during, 0.99),
                              "max_ms": 1000 * max(during, default=0.0)})
    return out


SETTLE_S = 3.0  # after the removals, before the next round's alone phase


def measure(code: Path, label: str, args, sink: Sink) -> dict:
    with running_server(code, sink) as (url, _pid):
        host, port = url.split("//", 1)[1].split(":")
        phase(url, argparse.Namespace(**{**vars(args), "seconds": 5.0}), 0)  # warm-up
        rounds = []
        for r in range(args.rounds):
            alone = phase(url, args, 0)
            with_burst = phase(url, args, args.registrations)
            removed = asyncio.run(send_all(host, int(port), args.registrations, "DELETE"))
            time.sleep(SETTLE_S)
            # the same load alone once more: how far two phases without a burst differ
            again = phase(url, args, 0)
            rounds.append({"alone": alone, "with_burst": with_burst, "removed": removed[0],
                           "alone_again": again,
                           "p99_ratio": with_burst["p99_ms"] / alone["p99_ms"],
                           "p99_during_ratio": with_burst["during"]["p99_ms"]
                           / alone["p99_ms"],
                           "p99_alone_ratio": again["p99_ms"] / alone["p99_ms"]})
            print(f"{label} round {r + 1}: p99 {alone['p99_ms']:.1f} ms alone, "
                  f"{with_burst['p99_ms']:.1f} ms with the burst "
                  f"({with_burst['burst_s']:.1f} s; due during it: p99 "
                  f"{with_burst['during']['p99_ms']:.1f} ms), {again['p99_ms']:.1f} ms alone "
                  "again", flush=True)
        row = {"code": label, "rounds": rounds,
               **{k: statistics.median(x[k] for x in rounds)
                  for k in ("p99_ratio", "p99_during_ratio", "p99_alone_ratio")}}
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=BASELINE, help="git ref to compare ('' for none)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=400.0, help="lane requests a second")
    ap.add_argument("--registrations", type=int, default=1000)
    ap.add_argument("--route", choices=["pushgateway", "batch"], default="pushgateway",
                    help="the lanes' groups as Pushgateway pushes, or in one batch push a "
                         "tick (the lane Sender's path)")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        print("bench/registrations.py needs taskset (util-linux)", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {1})
    sink = Sink()
    rows = [measure(REPO, "checkout", args, sink)]
    if args.baseline:
        base = worktree(args.baseline)
        try:
            rows.append(measure(base, f"baseline {args.baseline}", args, sink))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(base)], capture_output=True)
    for r in rows:
        each = ", ".join(f"x{x['p99_ratio']:.2f}" for x in r["rounds"])
        print(f"{r['code']}: intake p99 with {args.registrations} registrations over "
              f"without: x{r['p99_ratio']:.2f} (median of {each}); requests due during "
              f"the burst: x{r['p99_during_ratio']:.2f}; the load alone again over alone "
              f"(no burst: the measurement's own spread): x{r['p99_alone_ratio']:.2f}")
    path = save("registrations" + ("_batch" if args.route == "batch" else ""),
                {"args": vars(args), "rows": rows})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
