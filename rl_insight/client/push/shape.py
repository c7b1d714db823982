"""The ``push`` section of the monitor configuration, read as upstream reads it and
checked: what is wrong is said in a warning that names the key and what to write, and
left out; nothing raises.

The shape (verl-project/rl-insight ``rl_insight/client/push/client.py`` at 56d5cb88 and
213541cd, its tests ``tests/monitor/ut/client/push/test_push_client.py``)::

    server: {backend: push}
    push:
      metric_prefix: "trainer."        # before a trainer scalar's name (metric stream)
      trace_prefix: "trace."           # before a span's name (trace stream)
      sinks:
        - name: alpha                  # for messages; else the driver
          driver: "package.module:factory"   # called with this whole node
          prefix: seed.alphaseed       # the sink's own (PushSink.prefix); any other key
          streams: [metric, trace, rollout]   # default [metric, trace]
          rollout_name_prefix: "rollout."     # before a rollout metric's name
          rollout_groups: [vllm]       # only these packs' rollout metrics; default all
          tags_from_env: [{tag: trial, env: [TRIAL_ID], default: "0", format: "{value}"}]
          metric_mapping:              # a whitelist of trainer scalars, renamed
            - {source: timing_s_update_weight, name: timing.driver.duration,
               op: timer, scale: 1000000, tags: {stage: weight_sync}}
      rollout:
        interval_seconds: 15           # the poller's period; 0 or less: no polling
        packs: [vllm, tq]              # rule packs (rl_insight/client/push/packs/)
        metrics: [{source: "vllm:num_requests_running", type: gauge, name: running}]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

STREAMS = ("metric", "trace", "rollout")
DEFAULT_STREAMS = frozenset(("metric", "trace"))
OPS = {"counter": "emit_counter", "store": "emit_store", "timer": "emit_timer"}
KEYS = ("sinks", "metric_prefix", "trace_prefix", "rollout")
ROLLOUT_KEYS = ("interval_seconds", "packs", "metrics")


@dataclass(frozen=True)
class MetricRule:
    """One ``metric_mapping`` item: a trainer scalar's new name, method, scale, tags."""

    name: str
    method: str | None  # None: the event's own (store for a gauge, ...)
    scale: float = 1.0
    tags: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SinkSpec:
    """One ``push.sinks`` item, checked. ``node``: the item as written, which the
    driver's factory receives whole (its own options included)."""

    name: str
    driver: str
    node: Mapping[str, Any]
    streams: frozenset[str] = DEFAULT_STREAMS
    rollout_prefix: str = "rollout."
    rollout_groups: frozenset[str] | None = None  # None: every group
    tags_from_env: tuple[Mapping[str, Any], ...] = ()
    metric_rules: Mapping[str, MetricRule] | None = None  # None: every trainer scalar


@dataclass(frozen=True)
class PushConfig:
    """The ``push`` section: the sinks and how the client's events are named for them."""

    sinks: tuple[SinkSpec, ...]
    metric_prefix: str = "trainer."
    trace_prefix: str = "trace."
    interval_s: float = 15.0
    packs: tuple[str, ...] = ()
    rules: tuple[Mapping[str, Any], ...] = ()  # push.rollout.metrics, as written


def _warn(what: str) -> None:
    log.warning("rl-insight: push: %s", what)


def _text(node: Mapping[str, Any], key: str, default: str) -> str:
    value = node.get(key)
    return default if value is None else str(value)


def _names(value: Any, key: str, where: str) -> list[str] | None:
    """A list of names (``streams``, ``rollout_groups``, ``packs``); a lone string is
    taken as a list of one."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    _warn(f"{where}.{key} must be a list of names, got {value!r}; ignored")
    return None


def scalar_tags(tags: Any) -> dict[str, str]:
    """Tags as strings, keeping scalar values only (upstream drops sequences)."""
    if not isinstance(tags, Mapping):
        return {}
    return {str(k): str(v) for k, v in tags.items()
            if v is None or isinstance(v, (str, bool, int, float))}


def _rule(item: Any, where: str) -> tuple[str, MetricRule] | None:
    if not isinstance(item, Mapping) or not item.get("source") or not item.get("name"):
        _warn(f"{where}: {item!r} needs `source` (the trainer scalar's name as the "
              "caller gives it) and `name` (what the sink receives); left out")
        return None
    op = item.get("op")
    if op is not None and str(op) not in OPS:
        _warn(f"{where}: op {op!r} of {item['source']!r} is none of {', '.join(OPS)}; "
              "left out")
        return None
    try:
        scale = float(item.get("scale", 1.0))
    except (TypeError, ValueError):
        _warn(f"{where}: scale {item.get('scale')!r} of {item['source']!r} is not a "
              "number; left out")
        return None
    return str(item["source"]), MetricRule(str(item["name"]),
                                           OPS[str(op)] if op is not None else None,
                                           scale, scalar_tags(item.get("tags")))


def _metric_rules(raw: Any, where: str) -> dict[str, MetricRule] | None:
    if raw is None:
        return None
    if not isinstance(raw, (list, tuple)):
        _warn(f"{where}.metric_mapping must be a list of {{source, name}}; ignored, so "
              "this sink receives every trainer scalar")
        return None
    rules = (_rule(item, f"{where}.metric_mapping[{i}]") for i, item in enumerate(raw))
    return dict(r for r in rules if r is not None)


def _sink(node: Any, index: int) -> SinkSpec | None:
    where = f"push.sinks[{index}]"
    if not isinstance(node, Mapping):
        _warn(f"{where} must be a mapping with a `driver`, got {node!r}; left out")
        return None
    name = str(node.get("name") or node.get("driver") or f"sink {index}")
    driver = str(node.get("driver") or "").strip()
    if not driver:
        _warn(f"{where} ({name}) has no `driver`; write driver: \"package.module:factory\" "
              "(a function returning a rl_insight.client.push.sinks.base.PushSink)")
        return None
    streams = _names(node.get("streams"), "streams", where)
    unknown = sorted(set(streams or ()) - set(STREAMS))
    if unknown:
        _warn(f"{where} ({name}): streams {unknown} are unknown (known: "
              f"{', '.join(STREAMS)}); ignored")
    groups = _names(node.get("rollout_groups"), "rollout_groups", where)
    env_rules = node.get("tags_from_env") or ()
    if not isinstance(env_rules, (list, tuple)):
        _warn(f"{where}.tags_from_env must be a list of {{tag, env, default}}; ignored")
        env_rules = ()
    return SinkSpec(name, driver, dict(node),
                    DEFAULT_STREAMS if streams is None else frozenset(streams) & set(STREAMS),
                    _text(node, "rollout_name_prefix", "rollout."),
                    None if groups is None else frozenset(groups),
                    tuple(r for r in env_rules if isinstance(r, Mapping)),
                    _metric_rules(node.get("metric_mapping"), where))


def _rollout(raw: Any) -> tuple[float, tuple[str, ...], tuple[Mapping[str, Any], ...]]:
    if raw is None:
        return 15.0, (), ()
    if not isinstance(raw, Mapping):
        _warn(f"push.rollout must be a mapping ({', '.join(ROLLOUT_KEYS)}); ignored")
        return 15.0, (), ()
    try:
        interval = float(raw.get("interval_seconds", 15.0))
    except (TypeError, ValueError):
        _warn(f"push.rollout.interval_seconds {raw.get('interval_seconds')!r} is not a "
              "number of seconds; using 15")
        interval = 15.0
    packs = tuple(_names(raw.get("packs"), "packs", "push.rollout") or ())
    rules = raw.get("metrics") or ()
    if not isinstance(rules, (list, tuple)):
        _warn("push.rollout.metrics must be a list of rules ({source, type, name}); ignored")
        rules = ()
    return interval, packs, tuple(r for r in rules if isinstance(r, Mapping))


def read_push(section: Any) -> PushConfig | None:
    """The ``push`` section checked; None (with a warning saying what to write) when it
    names no usable sink. Never raises."""
    if not isinstance(section, Mapping):
        _warn("server.backend is push but there is no `push` section; add push.sinks "
              "(docs/client.md, \"The push backend\")")
        return None
    extra = sorted(set(map(str, section)) - set(KEYS))
    if extra:
        _warn(f"push.{', push.'.join(extra)} unknown (known: push.{', push.'.join(KEYS)}); "
              "ignored")
    nodes = section.get("sinks") or ()
    if not isinstance(nodes, (list, tuple)):
        nodes = ()
    sinks = tuple(s for s in (_sink(n, i) for i, n in enumerate(nodes)) if s is not None)
    if not sinks:
        _warn("server.backend is push but push.sinks names no sink with a driver; the "
              "push backend is off (add `- driver: \"package.module:factory\"` under "
              "push.sinks)")
        return None
    interval, packs, rules = _rollout(section.get("rollout"))
    return PushConfig(sinks, _text(section, "metric_prefix", "trainer."),
                      _text(section, "trace_prefix", "trace."), interval, packs, rules)
