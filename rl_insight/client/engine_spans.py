"""Stamping an engine's own request spans with their run and replica, in the engine's
process, the first time this package's ``trace_state`` runs there on a replica lane.

verl 0.9.1's vLLM server (``vllm_async_server.py``) runs the engine's front end, where
vLLM's ``OutputProcessor.do_tracing`` makes each request's ``llm_request`` span, in the
same Ray actor that wraps every request in ``trace_state("vllm_generate",
state_lane_id=f"replica_{rank}")``. Without verl main's ``OTEL_RESOURCE_ATTRIBUTES``
nothing on those spans says whose they are. So, on that first block:

- when the engine's tracer already exists (vLLM's ``init_tracer`` installs its
  TracerProvider as the global one, ``vllm/tracing.py``) and its resource does not name
  the run and replica already (verl main's ``OTEL_RESOURCE_ATTRIBUTES``, which stand as
  the caller set them), a span processor is added to it
  that writes ``project``, ``experiment_name``, ``replica`` and ``role`` on every span it
  starts (``on_start``, before the engine sets its own attributes);
- otherwise, in a process that has imported an engine (``vllm``, ``sglang``), those go
  into ``OTEL_RESOURCE_ATTRIBUTES`` of this process, where a tracer made later takes
  them as its resource (the engine's variables win: only keys it has not set are
  added). A process with no engine is left alone.

The server reads span attributes first, then the resource's
(rl_insight/server/ingest/engine_requests.py). Spans of a process that never runs a replica
lane's ``trace_state`` are not stamped; their run comes from the resource, or they are
counted as unattributed.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from urllib.parse import quote

from rl_insight.wire import laneid

log = logging.getLogger(__name__)
RESOURCE_ENV = "OTEL_RESOURCE_ATTRIBUTES"
ENGINES = ("vllm", "sglang")  # the engines whose request spans are stamped

_stamped: set[str] = set()  # the replica lanes this process stamped for
_lock = threading.Lock()


def stamp_processor(replica: str, role: str,
                    identity: Callable[[], tuple[str, str] | None]):
    """An OpenTelemetry span processor that writes a replica's identity on every span
    its provider starts (``identity()`` is read at each start: the run may be named after
    the engine started)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class StampProcessor(SpanProcessor):
        def on_start(self, span, parent_context=None) -> None:
            try:
                ident = identity()
                if ident is not None:
                    span.set_attribute("project", ident[0])
                    span.set_attribute("experiment_name", ident[1])
                span.set_attribute("replica", replica)
                span.set_attribute("role", role)
            except Exception:  # never break the engine's tracing
                pass

    return StampProcessor()


def stamp(lane: str, identity: Callable[[], tuple[str, str] | None]) -> str | None:
    """Once per replica lane and process: how this process's engine spans get ``lane``'s
    replica and the run (``"processor"``, ``"resource"``), None when ``lane`` is no
    replica lane or was stamped already. Never raises."""
    c = laneid.classify(lane)
    if c.kind != laneid.REPLICA:
        return None
    with _lock:
        if lane in _stamped:
            return None
        _stamped.add(lane)
    replica = laneid.replica_key(lane)
    try:
        provider = _sdk_provider()
        if provider is not None:
            if _attributed(provider):  # verl main's OTEL_RESOURCE_ATTRIBUTES: theirs
                return "resource"
            provider.add_span_processor(stamp_processor(replica, c.role, identity))
            return "processor"
        if not any(m in sys.modules for m in ENGINES):
            return None
        ident = identity()
        attrs = {"replica": replica, "role": c.role}
        if ident is not None:
            attrs.update(project=ident[0], experiment_name=ident[1])
        _add_resource_env(attrs)
        return "resource"
    except Exception as exc:
        log.debug("rl-insight: could not stamp engine spans: %s", exc)
        return None


def _sdk_provider():
    """The process's global TracerProvider when it is the SDK's (an engine set one)."""
    if "opentelemetry.trace" not in sys.modules:  # nobody traces here: do not import it
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return provider if hasattr(provider, "add_span_processor") else None


def _attributed(provider) -> bool:
    """True when the caller already put the run and replica in the engine's resource
    (verl main exports ``OTEL_RESOURCE_ATTRIBUTES`` with ``project``, ``experiment_name``,
    ``replica`` before the engine starts): its words stand, nothing is stamped over them."""
    attrs = getattr(getattr(provider, "resource", None), "attributes", None) or {}
    return all(k in attrs for k in ("project", "experiment_name", "replica"))


def _add_resource_env(attrs: dict[str, str]) -> None:
    """Add to OTEL_RESOURCE_ATTRIBUTES the keys it does not hold yet."""
    current = os.environ.get(RESOURCE_ENV, "")
    have = {part.split("=", 1)[0].strip() for part in current.split(",") if "=" in part}
    extra = [f"{k}={quote(str(v), safe='')}" for k, v in attrs.items() if k not in have]
    if extra:
        os.environ[RESOURCE_ENV] = ",".join([p for p in (current,) if p] + extra)


def _reset() -> None:
    """A forked child stamps for itself (its own engine, its own providers)."""
    global _lock
    _stamped.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset)
