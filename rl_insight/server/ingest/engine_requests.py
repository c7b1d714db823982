"""Engine request spans at the server: found in every OTLP export (vLLM's ``llm_request``,
SGLang's request root span: rl_insight/anatomy/requests.py names their attributes), read
into :class:`~rl_insight.anatomy.requests.Request` records with their run and replica,
counted as bounded ``rl_insight_request_*`` histograms per run, role and replica (never a
request id or text as a label), and handed to the step anatomy, which joins them to steps.

A request's run and replica come, in this order, from the span's own attributes (this
package stamps ``project``, ``experiment_name``, ``replica`` and ``role`` on them in the
engine's process: rl_insight/client/engine_spans.py) or its resource's
(``OTEL_RESOURCE_ATTRIBUTES``, as verl main's ``trace.enable_otel`` sets ``project``,
``experiment_name``, ``replica``). A request with no run is counted and skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from rl_insight.anatomy.requests import Request
from rl_insight.server.ingest.otlp import value_of
from rl_insight.server.ingest.spanwalk import SpanAt
from rl_insight.wire import laneid

REQUEST_SPANS = ("llm_request",)
MARK = "gen_ai.latency.e2e"  # an engine's request span, whatever its name
SECONDS = {"queue_s": "gen_ai.latency.time_in_queue",
           "ttft_s": "gen_ai.latency.time_to_first_token",
           "prefill_s": "gen_ai.latency.time_in_model_prefill",
           "decode_s": "gen_ai.latency.time_in_model_decode"}
TOKENS = {"prompt_tokens": "gen_ai.usage.prompt_tokens",
          "completion_tokens": "gen_ai.usage.completion_tokens"}
IDENTITY = ("project", "experiment_name", "replica", "role")
PREFIX = "rl_insight_request_"
SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                   300.0, 600.0)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
FAMILIES = (  # (name, Request field, buckets, help)
    ("queue_seconds", "queue_s", SECONDS_BUCKETS, "Time an engine request waited in the "
     "engine's queue"),
    ("time_to_first_token_seconds", "ttft_s", SECONDS_BUCKETS, "Time to an engine "
     "request's first token"),
    ("prefill_seconds", "prefill_s", SECONDS_BUCKETS, "Time an engine request spent in "
     "the model's prefill"),
    ("decode_seconds", "decode_s", SECONDS_BUCKETS, "Time an engine request spent in the "
     "model's decode"),
    ("e2e_seconds", "e2e_s", SECONDS_BUCKETS, "An engine request from arrival to its last "
     "token"),
    ("prompt_tokens", "prompt_tokens", TOKEN_BUCKETS, "Prompt tokens of an engine request"),
    ("completion_tokens", "completion_tokens", TOKEN_BUCKETS, "Tokens an engine request "
     "generated"),
)


def _number(v) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out if out == out else None


def is_request(span) -> bool:
    if span.name in REQUEST_SPANS:
        return True
    return any(kv.key == MARK for kv in span.attributes)


def request_at(s: SpanAt, resources: dict[int, dict]) -> tuple[str, str, Request] | None:
    """The span's request, when it is an engine's request span; ``resources`` keeps each
    resource's identity decoded once."""
    if not is_request(s.span):
        return None
    resource = resources.get(id(s.resource))
    if resource is None:
        resource = resources[id(s.resource)] = {
            k: v for k, v in s.resource.items() if k in IDENTITY}
    return request_of(s.span, resource, s.attrs)


def request_of(span, resource: dict, attrs: dict) -> tuple[str, str, Request]:
    def ident(key: str) -> str:
        v = attrs.get(key, resource.get(key))
        return "" if v is None else str(v)

    replica = ident("replica")
    role = ident("role") or (laneid.engine_role(replica) if replica else "") or \
        laneid.ROLLOUT
    e2e = _number(attrs.get(MARK))
    if e2e is None:
        e2e = max(0, span.end_time_unix_nano - span.start_time_unix_nano) / 1e9
    preempt = _number(attrs.get("num_preemptions"))
    for event in span.events:  # vLLM's request-journey events carry the count so far
        for kv in event.attributes:
            if kv.key == "num_preemptions":
                n = _number(value_of(kv.value))
                if n is not None:
                    preempt = max(preempt or 0, n)
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, dict):  # an OTLP array, as value_of gives it
        reasons = [v.get("stringValue", "") for v in reasons.get("values", [])]
    reason = reasons[0] if isinstance(reasons, list) and reasons else str(reasons or "")
    fields = {k: _number(attrs.get(a)) for k, a in SECONDS.items()}
    tokens = {k: None if (n := _number(attrs.get(a))) is None else int(n)
              for k, a in TOKENS.items()}
    r = Request(str(attrs.get("gen_ai.request.id", "")), span.trace_id.hex(), role, replica,
                span.start_time_unix_nano, span.end_time_unix_nano, e2e, **fields, **tokens,
                preemptions=None if preempt is None else int(preempt),
                finish_reason=str(reason))
    return ident("project"), ident("experiment_name"), r


class _Hist:
    __slots__ = ("counts", "total", "n")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0
        self.n = 0


class RequestMetrics:
    """The ``rl_insight_request_*`` families: a histogram of each latency and token count
    per run, role and replica, requests and preemptions counted; bounded by runs and
    replicas (a finished run's go when the run is forgotten)."""

    def __init__(self, max_series: int = 20_000) -> None:
        self.max_series = max_series
        self._series: dict[tuple[str, str, str, str], dict] = {}
        self.unattributed = 0  # request spans with no run: counted, not kept
        self.dropped_series_limit = 0
        self._lock = threading.Lock()

    def observe(self, rows: Iterable[tuple[str, str, Request]]) -> list[tuple[str, str, Request]]:
        """Count each request; returns the attributed ones (for the step anatomy)."""
        kept = []
        with self._lock:
            for project, experiment, r in rows:
                if not project:
                    self.unattributed += 1
                    continue
                kept.append((project, experiment, r))
                key = (project, experiment, r.role, r.replica)
                s = self._series.get(key)
                if s is None:
                    if len(self._series) >= self.max_series:
                        self.dropped_series_limit += 1
                        continue
                    s = self._series[key] = {
                        "requests": 0, "preemptions": 0,
                        **{f: _Hist(len(b)) for _, f, b, _ in FAMILIES}}
                s["requests"] += 1
                s["preemptions"] += r.preemptions or 0
                for _, field, buckets, _ in FAMILIES:
                    v = getattr(r, field)
                    if v is None:
                        continue
                    h = s[field]
                    for i, bound in enumerate(buckets):
                        if v <= bound:
                            h.counts[i] += 1
                            break
                    h.total += v
                    h.n += 1
        return kept

    def forget(self, runs: set[tuple[str, str]]) -> int:
        with self._lock:
            gone = [k for k in self._series if (k[0], k[1]) in runs]
            for k in gone:
                del self._series[k]
            return len(gone)

    def collect(self):
        labels = ["project", "experiment_name", "role", "replica"]
        with self._lock:
            items = [(k, {f: (list(h.counts), h.total, h.n) if isinstance(h, _Hist) else h
                          for f, h in s.items()}) for k, s in self._series.items()]
            unattributed = self.unattributed
        total = CounterMetricFamily(PREFIX.rstrip("_") + "s", "Engine requests traced, per "
                                    "run, role and replica", labels=labels)
        pre = CounterMetricFamily(PREFIX + "preemptions", "Preemptions the engines reported "
                                  "for their requests", labels=labels)
        for key, s in items:
            total.add_metric(list(key), s["requests"])
            pre.add_metric(list(key), s["preemptions"])
        yield total
        yield pre
        for name, field, buckets, doc in FAMILIES:
            fam = HistogramMetricFamily(PREFIX + name, doc, labels=labels)
            for key, s in items:
                counts, total_v, n = s[field]
                if not n:
                    continue
                acc, cumulative = 0, []
                for bound, c in zip(buckets, counts, strict=True):
                    acc += c
                    cumulative.append((_bound(bound), acc))
                cumulative.append(("+Inf", n))
                fam.add_metric(list(key), cumulative, total_v)
            yield fam
        u = CounterMetricFamily(PREFIX + "spans_unattributed", "Engine request spans with "
                                "no run (no project attribute, span or resource): counted, "
                                "not kept")
        u.add_metric([], unattributed)
        yield u


def _bound(b: float) -> str:
    return repr(float(b))
