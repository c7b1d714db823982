"""A run's configuration as flat, JSON-safe, bounded data: whatever a framework hands its
tracker (nested mappings and lists, dataclasses, argparse and simple namespaces, pydantic
models, OmegaConf's DictConfig and ListConfig read as the mappings and sequences they are,
never imported) becomes dotted keys (``actor_rollout_ref.actor.optim.lr``) with str, int,
float, bool or None values. Secrets are masked on the way (secrets.py) and what the bounds
leave out is counted (wire.py: keys, bytes per value and per run, depth), so a reader
knows a missing key may have been cut rather than absent.

A list of plain values is one value (its JSON text: ``["console", "rl_insight"]``); a list
holding mappings or lists is entered by index (``reward.functions.0.name``). A value that
cannot be read (an OmegaConf interpolation that does not resolve, a ``???``) is kept as
written. Anything else is its text, without the memory addresses that would make two
runs of the same code differ.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import math
import re
import types
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rl_insight.runconfig import secrets
from rl_insight.wire.runconfig import (
    CUT,
    CUT_KINDS,
    MASKED,
    MAX_DEPTH,
    MAX_KEY_CHARS,
    MAX_KEYS,
    MAX_NODES,
    MAX_RUN_BYTES,
    MAX_VALUE_BYTES,
    TRUNCATED,
    VALUES,
)

Scalar = str | int | float | bool | None
ROOT = "config"  # the key of a configuration that is one plain value
PLAIN_LIST_MAX = 256  # a longer list of plain values is entered by index
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_PLAIN = (str, int, float, bool, type(None))


@dataclass
class Flat:
    """A configuration flattened: its values by dotted key, in the order it gave them,
    how many were masked, and what the bounds cut (``CUT_KINDS``)."""

    values: dict[str, Scalar] = field(default_factory=dict)
    masked: int = 0
    cut: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CUT_KINDS, 0))

    def body(self) -> dict[str, Any]:
        """The wire's fields (wire.py)."""
        return {VALUES: self.values, MASKED: self.masked, CUT: dict(self.cut)}


def as_text(value: Scalar) -> str:
    """A value as one line of text (a label's value, a table's cell): JSON's spelling of
    null, booleans and numbers, a string as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value)


def flatten(config: Any) -> Flat:
    """``config`` flattened, masked and bounded (the module's rules). Never raises: what
    cannot be read is kept as its text or counted as cut."""
    out = _Out()
    try:
        _walk(config, ROOT, ROOT, 0, False, set(), out)
    except _Full:
        out.cut["keys"] += 1  # at least one more: the walk stopped at MAX_NODES
    except Exception:  # what was kept stands; the rest is one cut key at least
        out.cut["keys"] += 1
    return out.flat()


def bound(values: Mapping[str, Any]) -> Flat:
    """Flat values (a hand-over the server received) masked and bounded again, by the
    same rules: a client that is not ours is held to them too. A key's dotted parts are
    its sections: ``credentials.user`` is a secret's."""
    out = _Out()
    for key, value in values.items():
        parts = str(key).split(".")
        out.add(str(key), parts[-1], _scalar(value),
                any(secrets.secret_name(p) for p in parts[:-1]))
    return out.flat()


class _Full(Exception):
    """The walk visited MAX_NODES: it stops (a bounded time, whatever it was given)."""


class _Out:
    """What the walk keeps, within the bounds."""

    def __init__(self) -> None:
        self.values: dict[str, Scalar] = {}
        self.masked = 0
        self.cut: Counter[str] = Counter()
        self.bytes = 0
        self.nodes = 0

    def visit(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Full

    def add(self, key: str, name: str, value: Scalar, in_secret: bool) -> None:
        key = _utf8(key)
        value, hidden = secrets.masked(name, _utf8(value), in_secret)
        self.masked += hidden
        if isinstance(value, str) and len(value.encode()) > MAX_VALUE_BYTES:
            keep = MAX_VALUE_BYTES - len(TRUNCATED.encode())
            value = value.encode()[:keep].decode(errors="ignore") + TRUNCATED
            self.cut["values"] += 1
        size = len(key.encode()) + len(as_text(value).encode())
        if len(key) > MAX_KEY_CHARS or len(self.values) >= MAX_KEYS or \
                self.bytes + size > MAX_RUN_BYTES:
            self.cut["keys"] += 1
            return
        self.values[key] = value
        self.bytes += size

    def flat(self) -> Flat:
        return Flat(self.values, self.masked, {k: self.cut[k] for k in CUT_KINDS})


def _walk(value: Any, key: str, name: str, depth: int, in_secret: bool, path: set[int],
          out: _Out) -> None:
    """One node: a leaf kept, a container entered (its children's keys under ``key``,
    but for the root's)."""
    out.visit()
    try:
        children = _children(value)
    except Exception as exc:  # an object whose every attribute raises
        children, value = None, _Unread(None, exc)
    if children is None:
        out.add(key, name, _leaf(value), in_secret)
        return
    if depth >= MAX_DEPTH or id(value) in path:  # too deep, or a cycle: not entered
        out.cut["depth"] += 1
        out.add(key, name, _text(value), in_secret)
        return
    try:
        items = list(children)
    except _Full:
        raise
    except Exception as exc:
        out.add(key, name, _text(_Unread(None, exc)), in_secret)
        return
    if not items:
        out.add(key, name, "{}" if _is_mapping_like(value) else "[]", in_secret)
        return
    if not _is_mapping_like(value):  # a list of plain values: one value
        plain = [_leaf(v) for _, v in items] if len(items) <= PLAIN_LIST_MAX and all(
            isinstance(v, _PLAIN) or _children(v) is None for _, v in items) else None
        if plain is not None:
            out.add(key, name, json.dumps(plain, ensure_ascii=False), in_secret)
            return
    path.add(id(value))
    try:
        for child_name, child in items:
            sub = child_name if depth == 0 else f"{key}.{child_name}"
            _walk(child, sub, child_name, depth + 1,
                  in_secret or secrets.secret_name(child_name), path, out)
    finally:
        path.discard(id(value))


def _utf8(value: Any) -> Any:
    """A string UTF-8 can carry (a lone surrogate replaced), anything else as it is."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode(errors="replace").decode()
    return value


def _is_mapping_like(value: Any) -> bool:
    return not isinstance(value, Sequence)


def _children(value: Any) -> Iterator[tuple[str, Any]] | None:
    """A container's (name, child) pairs, or None for a leaf."""
    if isinstance(value, (*_PLAIN, bytes, bytearray, enum.Enum)):
        return None
    if isinstance(value, Mapping):  # DictConfig too
        return _items(value, _keys(value))
    if isinstance(value, (argparse.Namespace, types.SimpleNamespace)):
        return ((str(k), v) for k, v in vars(value).items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f.name, _attr(value, f.name)) for f in dataclasses.fields(value))
    fields = getattr(type(value), "model_fields", None)  # a pydantic model
    if isinstance(fields, Mapping) and callable(getattr(value, "model_dump", None)):
        return ((str(n), _attr(value, n)) for n in fields)
    if isinstance(value, Sequence):  # list, tuple, ListConfig
        try:
            n = len(value)
        except Exception:
            return None
        return _items(value, range(min(n, MAX_NODES)))
    return None


def _keys(mapping: Mapping) -> list:
    try:
        return list(mapping.keys())
    except Exception:
        return []


def _items(container: Any, keys) -> Iterator[tuple[str, Any]]:
    for k in keys:
        try:
            v = container[k]
        except Exception as exc:  # an interpolation that does not resolve, a "???"
            v = _Unread(_raw(container, k), exc)
        yield str(k), v


class _Unread:
    """A value that could not be read: kept as written (OmegaConf's node holds it)."""

    def __init__(self, raw: Any, exc: Exception) -> None:
        self.raw, self.exc = raw, exc

    def __str__(self) -> str:
        return str(self.raw) if self.raw is not None else \
            f"<unreadable: {type(self.exc).__name__}>"


def _raw(container: Any, key: Any) -> Any:
    """What OmegaConf's node holds unresolved (``${...}``, ``???``), without importing it."""
    try:
        return container._get_node(key)._value()
    except Exception:
        return None


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except Exception as exc:
        return _Unread(None, exc)


def _text(value: Any) -> str:
    try:
        text = str(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return _ADDRESS.sub("", text)


def _leaf(value: Any) -> Scalar:
    try:
        return _scalar(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _scalar(value: Any) -> Scalar:
    """A leaf as a JSON-safe value."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        inner = value.value
        return _scalar(inner) if isinstance(inner, _PLAIN) else value.name
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        try:  # a numpy or torch scalar
            got = value.item()
        except Exception:
            got = None
        if isinstance(got, _PLAIN):
            return _scalar(got)
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (set, frozenset)):
        return json.dumps(sorted(as_text(_scalar(v)) for v in value), ensure_ascii=False)
    if isinstance(value, type) or isinstance(value, (types.FunctionType,
                                                     types.BuiltinFunctionType)):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
    return _text(value)
