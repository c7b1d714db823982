"""RL frameworks beyond verl: each one's table (what its keys and spans mean, data only:
tables.py) and the adapter that turns its logging backend on (one module per framework,
importing the framework only when used, calling only the public client API).

Importing this package loads the tables alone: the server reads them to map a
framework's own spans, and neither the client, Ray nor any framework is imported.
"""

from __future__ import annotations

from rl_insight.integrations.table import Framework
from rl_insight.integrations.tables import AREAL, NEMO_RL, ROLL, SKYRL, SLIME, TRL, VERL

FRAMEWORKS: dict[str, Framework] = {
    fw.name: fw for fw in (VERL, SLIME, ROLL, AREAL, NEMO_RL, SKYRL, TRL)}


def get(name: str | None) -> Framework | None:
    """The table of a framework by name (``nemo_rl``, ``nemo-rl`` and ``NeMo-RL`` alike)."""
    if not name:
        return None
    return FRAMEWORKS.get(str(name).strip().lower().replace("-", "_"))


def by_scope(scope: str) -> Framework | None:
    """The framework whose tracers use this OTLP instrumentation scope."""
    for fw in FRAMEWORKS.values():
        if scope in fw.scopes:
            return fw
    return None
