"""`init(config=...)`: the framework's ``trainer.rl_insight`` mapping. Keys that name a
client setting override it for this process; unknown keys are ignored with a warning."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from rl_insight import config as config_mod

log = logging.getLogger("rl_insight")


def apply_buckets(client, value: Any) -> None:
    """A list: the default bounds; a mapping: bounds per metric name."""
    from rl_insight.client.core import parse_buckets

    try:
        if isinstance(value, Mapping):
            for name, bounds in value.items():
                client.bucket_map[str(name)] = parse_buckets(bounds)
        else:
            client.default_buckets = parse_buckets(value)
    except (TypeError, ValueError) as exc:
        log.warning("rl-insight: init(config): histogram_buckets %r: %s; keeping the "
                    "defaults", value, exc)


def apply_init_config(client, mapping: Mapping[str, Any]) -> list[str]:
    """Apply known keys to ``client.settings`` (when there is a client); return the
    unknown ones."""
    known = {f.name for f in dataclasses.fields(config_mod.ClientSettings)}
    unknown = []
    for key, value in dict(mapping).items():
        if key not in known:
            unknown.append(str(key))
            continue
        if client is None:
            continue
        target = client.settings
        if key == "histogram_buckets":
            apply_buckets(client, value)
            continue
        try:
            setattr(target, key, config_mod._coerce(f"client.{key}",
                                                    getattr(target, key), value))
        except config_mod.ConfigError as exc:
            log.warning("rl-insight: init(config): %s; keeping %r", exc,
                        getattr(target, key))
    if unknown:
        log.warning("rl-insight: init(config) ignores unknown keys: %s (known: %s)",
                    ", ".join(sorted(unknown)), ", ".join(sorted(known)))
    return unknown
