"""Where a run's configuration keeps this package's own options: ``trainer.rl_insight``
(verl's and SkyRL's layout), which ``init(config=...)`` reads, while the whole
configuration is the run's, handed to the server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECTION = ("trainer", "rl_insight")


def options_section(config: Any) -> Mapping | None:
    """``trainer.rl_insight`` of a mapping or an object (a dataclass, a namespace, a
    DictConfig), or None; a struct-mode DictConfig that raises for a missing key has
    none."""
    node = config
    try:
        for name in SECTION:
            node = node.get(name) if isinstance(node, Mapping) else getattr(node, name, None)
    except Exception:
        return None
    return node if isinstance(node, Mapping) else None
