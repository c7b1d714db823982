"""What the GPU accounting, the verdict and the what-if cost the server (issue 56, point
5), at 1,000 GPUs: 128 rollout replicas (their generation, sleep, wake-up and KV-cache
states, and a GRPO batch of engine requests) and 1,000 trainer ranks (4 phases each, with
their Flight Recorder summaries), each figure against a reference in the same run:

- a finalized step: the step's accounting (rl_insight/anatomy/bound.py) against the
  whole row it is part of (rows.step_row, which makes it);
- the verdict and the what-if the server makes again with each finalized step, over the
  run's newest 20 steps, against the same row;
- ``GET /api/v1/anatomy/bound`` over a week's run kept whole (10,000 steps): the CPU of
  one answer, and the memory the accounting adds to a kept row.

Nothing runs on the training side: the accounting reads the spans the lanes already send.

    .venv/bin/python -m bench.bound [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
import tracemalloc

from bench.common import save
from rl_insight.anatomy import bound, boundreport, verdict, whatif
from rl_insight.anatomy import ranks as attribution
from rl_insight.anatomy.requests import Request
from rl_insight.anatomy.rows import step_row

S = 1_000_000_000
PHASES = ("actor_compute_log_prob", "ref_compute_log_prob", "actor_update")


def step_at(replicas: int, ranks: int, requests: int, t0: float = 0.0, seed: int = 0
            ) -> tuple[int, int, dict, list[Request]]:
    """One synchronous colocated step of about 60 s: the replicas generate (one of them
    1.5x as long), sleep, the ranks run their phases and the weight sync while the
    replicas wake up and resume their KV cache; ``requests`` engine requests spread over
    the replicas."""
    rng = random.Random(seed)
    lanes: dict[str, list[tuple]] = {}
    reqs: list[Request] = []
    per = max(1, requests // replicas)
    for r in range(replicas):
        gen = 20.0 * (1.5 if r == 1 else 1.0) * rng.lognormvariate(0, 0.02)
        lanes[f"replica_{r}"] = [
            ("vllm_generate", int(t0 * S), int((t0 + gen) * S)),
            ("vllm_sleep", int((t0 + 31) * S), int((t0 + 32) * S)),
            ("vllm_wake_up", int((t0 + 55) * S), int((t0 + 56) * S)),
            ("vllm_resume_kv_cache", int((t0 + 56) * S), int((t0 + 57) * S))]
        for i in range(per):
            start = t0 + gen * i / per * 0.9
            end = min(t0 + gen, start + gen * 0.1 * rng.random() + 0.5)
            reqs.append(Request(f"r{r}-{i}", "ab" * 16, "rollout", str(r), int(start * S),
                                int(end * S), end - start, 0.01, 0.05, 0.05, end - start - 0.1,
                                512, rng.randint(200, 4000)))
    at = t0 + 32.0
    for phase in (*PHASES, "update_weights"):
        end = at + (7.0 if phase != "update_weights" else 3.0)
        for k in range(ranks):
            ev = {attribution.COLLECTIVES: 32,
                  attribution.MEAN_TO_END: 3.0 * rng.lognormvariate(0, 0.01),
                  attribution.FIRST_TO_END: 6.5 * rng.lognormvariate(0, 0.01),
                  attribution.NODE: f"node-{k // 8}", attribution.GPU: str(k % 8)}
            lanes.setdefault(f"rank_{k}", []).append(
                (phase, int(at * S), int(end * S), attribution.pack(ev)))
        at = end + 0.5
    return int(t0 * S), int((t0 + 60) * S), lanes, reqs


def finalized_step(replicas: int, ranks: int, requests: int, rounds: int) -> dict:
    lo, hi, lanes, reqs = step_at(replicas, ranks, requests)
    row_s, bound_s = [], []
    for _ in range(rounds):
        t0 = time.process_time()
        row = step_row(1, lo, hi, lanes, reqs)
        row_s.append(time.process_time() - t0)
        t0 = time.process_time()
        bound.step_bound(lo, hi, lanes, reqs)
        bound_s.append(time.process_time() - t0)
    rows = []
    for i in range(20):
        lo_i, hi_i, lanes_i, reqs_i = step_at(replicas, 16, requests // 8, 60.0 * i, seed=i)
        r = step_row(i + 1, lo_i, hi_i, lanes_i, reqs_i)
        r.bound.roles = {**r.bound.roles, "trainer": row.bound.roles["trainer"]}
        rows.append({"step": r.step, "duration_s": r.duration_s,
                     "bound": r.bound.as_dict(replicas=False)})
    summ = []
    for _ in range(rounds):
        t0 = time.process_time()
        acc = verdict.account(rows)
        verdict.decide(acc)
        whatif.predict(rows)
        summ.append(time.process_time() - t0)
    r_s, b_s, s_s = (statistics.median(x) for x in (row_s, bound_s, summ))
    return {"replicas": replicas, "ranks": ranks, "requests": len(reqs),
            "row_cpu_ms": r_s * 1e3, "accounting_cpu_ms": b_s * 1e3,
            "accounting_share_of_row": b_s / r_s,
            "verdict_and_whatif_cpu_ms_per_step": s_s * 1e3,
            "verdict_and_whatif_share_of_row": s_s / r_s,
            "verdict": verdict.decide(verdict.account(rows))["verdict"],
            "causes_add_up": all(abs(sum(rb.causes) - rb.lanes * rb.gpus_per_lane * 60.0)
                                 < 0.01 * rb.lanes * 60.0 for rb in row.bound.roles.values())}


def kept_run(replicas: int, steps: int) -> dict:
    """A run's rows kept whole (anatomy.keep_steps): the memory the accounting adds per
    row (its packed per-replica causes, its roles and path), and one answer of the bound
    route over all of them."""
    lo, hi, lanes, reqs = step_at(replicas, 16, 1024)
    template = step_row(1, lo, hi, lanes, reqs)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = []
    for i in range(steps):  # each step its own objects, as the server keeps them
        b = template.bound
        kept.append(bound.StepBound(tuple(x + 0.0 * i for x in b.path),
                                    {k: bound.RoleBound(v.lanes, v.gpus_per_lane,
                                                        v.gpus_known, tuple(v.causes))
                                     for k, v in b.roles.items()},
                                    b.replica_keys, type(b.replica_causes)(
                                        "f", b.replica_causes), b.colocated, b.inputs))
    after = tracemalloc.take_snapshot()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    # the rest of a kept row (its replicas', roles' and ranks' figures), the reference
    bare = copy.copy(template)
    bare.bound = None
    before = tracemalloc.take_snapshot()
    rest = [copy.deepcopy(bare) for _ in range(200)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    row_bytes = sum(s.size_diff for s in after.compare_to(before, "filename")) / len(rest)
    t0 = time.process_time()  # as the route answers: lean rows, replicas summed packed
    rows = [{"step": i + 1, "duration_s": 60.0, "bound": b.as_dict(replicas=False)}
            for i, b in enumerate(kept)]
    got = boundreport.report(rows, replicas=bound.sum_replicas(kept))
    answer = time.process_time() - t0
    return {"replicas": replicas, "steps": steps,
            "bytes_per_row": grown / steps, "mib_per_run": grown / 2**20,
            "rest_of_row_bytes": row_bytes, "share_of_row": grown / steps / row_bytes,
            "bound_route_cpu_s": answer, "verdict": got["verdict"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller, not saved")
    args = ap.parse_args()
    if args.quick:
        out = {"step": finalized_step(16, 100, 2048, 2), "run": kept_run(16, 200)}
    else:
        out = {"step": finalized_step(128, 1000, 32_768, 5),
               "step_fewer_requests": finalized_step(128, 1000, 8_192, 5),
               "run": kept_run(128, 10_000)}
    print(json.dumps(out, indent=2))
    if not args.quick:
        print(save("bound", out))


if __name__ == "__main__":
    main()
