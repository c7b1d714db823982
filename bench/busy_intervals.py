"""Trace volume of verl-like rollout: every request of a replica's async generate is a
``trace_state("vllm_generate", state_lane_id="replica_<r>")`` block, hundreds at once.
Measured in one process, the same load twice: as busy intervals (the default: overlapping
same-state blocks on a lane are one span) and with per-request detail on (one more span
per block, what one-span-per-request would cost). Reported as ratios: spans and OTLP
bytes that reach Tempo, and the caller's cost per block.

    python bench/busy_intervals.py [--quick]

Writes bench/results/busy_intervals.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import save  # noqa: E402
from rl_insight.client import api  # noqa: E402
from rl_insight.client.configuration import ClientConfig  # noqa: E402
from rl_insight.client.core import Client  # noqa: E402
from rl_insight.client.runtime import RUNTIME  # noqa: E402
from rl_insight.collector.otlp_encode import encode  # noqa: E402
from rl_insight.config import ClientSettings, Settings  # noqa: E402
from rl_insight.wire.events import Identity, Span  # noqa: E402


async def replica(rank: int, concurrency: int, rng: random.Random) -> None:
    async def request() -> None:
        with api.trace_state("vllm_generate", state_lane_id=f"replica_{rank}"):
            await asyncio.sleep(rng.uniform(0.001, 0.03))  # decode time, shortened

    await asyncio.gather(*[request() for _ in range(concurrency)])


def run(per_request: bool, replicas: int, concurrency: int, steps: int) -> dict:
    settings = Settings(client=ClientSettings(per_request_spans=per_request))
    c = Client(ClientConfig("http://127.0.0.1:1", settings=settings))
    got: list = []
    c.buffer.export = lambda items, dropped: got.extend(items)
    RUNTIME.client, RUNTIME.checked = c, True
    rng = random.Random(7)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):  # a step: every replica generates its batch, then a pause
        async def step() -> None:
            await asyncio.gather(*[replica(r, concurrency, rng) for r in range(replicas)])
        asyncio.run(step())
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    c.buffer.flush(10)
    RUNTIME.client = None
    spans = [s for s in got if type(s) is Span]
    ident = Identity("bench", "busy")
    payload = sum(len(encode([(ident, "p", s) for s in spans[i:i + 512]]))
                  for i in range(0, len(spans), 512))
    blocks = replicas * concurrency * steps
    return {"spans": len(spans), "events": len(got), "otlp_bytes": payload,
            "blocks": blocks, "cpu_s": cpu, "wall_s": wall,
            "cpu_us_per_block": cpu / blocks * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--concurrency", type=int, default=256)
    args = ap.parse_args()
    replicas, steps = (2, 2) if args.quick else (8, 5)
    merged = run(False, replicas, args.concurrency, steps)
    detail = run(True, replicas, args.concurrency, steps)
    ratios = {
        "spans, one per request / busy intervals": detail["spans"] / merged["spans"],
        "OTLP bytes, one per request / busy intervals":
            detail["otlp_bytes"] / merged["otlp_bytes"],
        "caller CPU per block, per-request detail / busy intervals":
            detail["cpu_us_per_block"] / merged["cpu_us_per_block"],
    }
    print(f"{replicas} replicas x {args.concurrency} concurrent requests x {steps} steps "
          f"= {merged['blocks']:,} trace_state blocks")
    for name, r in (("busy intervals (default)", merged), ("per-request detail", detail)):
        print(f"  {name:<26} spans {r['spans']:>7,}  OTLP {r['otlp_bytes']:>10,} B  "
              f"caller {r['cpu_us_per_block']:.2f} µs CPU/block")
    for name, value in ratios.items():
        print(f"  {name:<58} {value:>8.1f}x")
    save("busy_intervals", {"replicas": replicas, "concurrency": args.concurrency,
                            "steps": steps, "merged": merged, "per_request": detail,
                            "ratios": ratios})
    return 0


if __name__ == "__main__":
    sys.exit(main())
