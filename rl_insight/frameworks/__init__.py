"""The RL frameworks' tables, data only: what each framework's keys and spans mean
(table.py says how a table reads), one module a framework, and the names their data
crosses to the server with (wire.py). The server and the adapters
(rl_insight/integrations/) both read them; nothing here imports the client, Ray or a
framework. A new framework is a new module here with a ``TABLE``, and its adapter."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from rl_insight.frameworks.table import Framework

SCHEMA = frozenset({"table", "wire", "phases"})  # this package's modules that are no table


@functools.cache
def _tables() -> dict[str, Framework]:
    """Every table of the package, read when first asked for (the wire names alone, which
    every training process's client needs, import none of them)."""
    out: dict[str, Framework] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in SCHEMA:
            continue
        table = importlib.import_module(f"{__name__}.{info.name}").TABLE
        out[table.name] = table
    return out


def __getattr__(name: str):
    """``FRAMEWORKS``: name -> table, read on first use."""
    if name == "FRAMEWORKS":
        return _tables()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str | None) -> Framework | None:
    """The table of a framework by name (``nemo_rl``, ``nemo-rl`` and ``NeMo-RL`` alike)."""
    if not name:
        return None
    return _tables().get(str(name).strip().lower().replace("-", "_"))


def by_scope(scope: str) -> Framework | None:
    """The framework whose tracers use this OTLP instrumentation scope."""
    for fw in _tables().values():
        if scope in fw.scopes:
            return fw
    return None


def named(name: str) -> Framework:
    """A framework's table that must exist (an adapter's own)."""
    fw = get(name)
    if fw is None:
        raise KeyError(f"no table for framework {name!r}; known: {', '.join(_tables())}")
    return fw
