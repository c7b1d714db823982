"""Rollout engines' own request spans (vLLM's ``llm_request``, SGLang's request root span),
read as plain records, and what a step's requests say: per role, the latency breakdown
and tokens, and the slowest requests (the tail) with their ids and trace ids.

Plain data in and out, no clock and no I/O (as :mod:`rl_insight.anatomy.rows`): the server
reads the spans (rl_insight/server/ingest/engine_requests.py), the step anatomy joins them to
steps, the report and the dashboards show them.

Attributes, as the engines write them:
- vLLM (``vllm/tracing.py`` ``SpanAttributes``; ``OutputProcessor.do_tracing`` makes one
  span ``llm_request`` of kind SERVER per finished request): ``gen_ai.request.id``,
  ``gen_ai.usage.prompt_tokens``, ``gen_ai.usage.completion_tokens``,
  ``gen_ai.latency.time_in_queue``, ``gen_ai.latency.time_to_first_token``,
  ``gen_ai.latency.e2e``, ``gen_ai.latency.time_in_model_prefill``,
  ``gen_ai.latency.time_in_model_decode``, ``gen_ai.latency.time_in_model_inference``
  (seconds), and its request-journey events' ``num_preemptions``;
- SGLang (``--enable-trace``): the request's root span with ``gen_ai.usage.*``,
  ``gen_ai.latency.*`` and ``gen_ai.response.finish_reasons``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from rl_insight.wire import laneid

TAIL = 5  # the slowest requests kept per step
PHASES = ("queue_s", "prefill_s", "decode_s")


class Request(NamedTuple):
    """One engine request, as its span says (times in seconds, None where unsaid)."""

    request_id: str
    trace_id: str  # hex: the link to the trace
    role: str  # the replica's role (rollout, teacher_x ...)
    replica: str  # as the engine's target is labelled: "0", "teacher_x_0"
    start_ns: int
    end_ns: int
    e2e_s: float
    queue_s: float | None = None
    ttft_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    preemptions: int | None = None
    finish_reason: str = ""

    @property
    def lane(self) -> str:
        """The replica lane the request ran on (``replica_<n>`` for the policy's
        rollout, ``<role>_replica_<n>`` otherwise)."""
        n = self.replica.rpartition("_")[2] if "_" in self.replica else self.replica
        return f"replica_{n}" if self.role == laneid.ROLLOUT else f"{self.role}_replica_{n}"

    def as_dict(self) -> dict:
        return self._asdict()


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.fmean(got) if got else None


def summarize(requests: Sequence[Request]) -> dict[str, dict]:
    """Per role: how many requests, their tokens, end-to-end quantiles, and the mean
    time in each phase (queue, prefill, decode)."""
    by_role: dict[str, list[Request]] = {}
    for r in requests:
        by_role.setdefault(r.role, []).append(r)
    out = {}
    for role, rs in sorted(by_role.items()):
        e2e = [r.e2e_s for r in rs]
        out[role] = {
            "requests": len(rs),
            "prompt_tokens": sum(r.prompt_tokens or 0 for r in rs),
            "completion_tokens": sum(r.completion_tokens or 0 for r in rs),
            "preemptions": sum(r.preemptions or 0 for r in rs),
            "e2e_p50_s": quantile(e2e, 0.5), "e2e_p90_s": quantile(e2e, 0.9),
            "e2e_p99_s": quantile(e2e, 0.99), "e2e_max_s": max(e2e),
            **{f"{p}_mean": _mean(getattr(r, p) for r in rs) for p in PHASES},
            "ttft_s_mean": _mean(r.ttft_s for r in rs),
        }
    return out


def tail(requests: Sequence[Request], n: int = TAIL) -> list[dict]:
    """The ``n`` slowest requests (end to end), slowest first."""
    return [r.as_dict() for r in sorted(requests, key=lambda r: -r.e2e_s)[:n]]


def last_to_finish(requests: Sequence[Request], replica: str, n: int = TAIL) -> list[dict]:
    """What kept ``replica`` generating: its requests that finished last, and its
    longest ones (a 30,000-token answer may finish before the requests it crowded out
    of the KV cache), last to finish first; ``n`` in all."""
    mine = [r for r in requests if r.replica == replica]
    longest = sorted(mine, key=lambda r: -r.e2e_s)[:max(1, n // 2)]
    last = [r for r in sorted(mine, key=lambda r: -r.end_ns) if r not in longest]
    chosen = longest + last[:n - len(longest)]
    return [r.as_dict() for r in sorted(chosen, key=lambda r: -r.end_ns)]


def tail_share(requests: Sequence[Request], start_ns: int, end_ns: int) -> float | None:
    """Share of the step spent waiting on the tail: from when 90% of the step's requests
    had finished to when the last one did, over the step's duration."""
    if len(requests) < 2 or end_ns <= start_ns:
        return None
    ends = sorted(r.end_ns for r in requests)
    p90 = ends[min(len(ends) - 1, int(0.9 * (len(ends) - 1)))]
    return max(0.0, (ends[-1] - p90) / (end_ns - start_ns))
