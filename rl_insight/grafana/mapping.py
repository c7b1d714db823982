"""The shipped dashboards name their data sources by uid (``prometheus``, ``tempo``: the
uids the managed Grafana provisions). Another Grafana has its own uids: this rewrites
every data source reference, in panels, targets, templating and annotations alike.

Pure functions: a dashboard dict in, a new dict out, the input untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# what Grafana accepts as a uid (letters, digits, '-', '_', '.'; at most 40 characters)
UID = re.compile(r"[A-Za-z0-9._-]{1,40}")


def _reference_uid(value: Any) -> str | None:
    """The uid a ``datasource`` object names (the schema the dashboards are built with)."""
    uid = value.get("uid") if isinstance(value, dict) else None
    return uid if isinstance(uid, str) else None


def referenced(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Every data source the dashboard refers to, anywhere in it: {uid: type}."""
    found: dict[str, str] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "datasource" and (uid := _reference_uid(value)) is not None:
                    found.setdefault(uid, str(value.get("type", "")))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dashboard)
    return found


def map_datasources(dashboard: Mapping[str, Any], mapping: Mapping[str, str]) -> dict:
    """A copy of ``dashboard`` whose data source references named in ``mapping`` point at
    the mapped uids; everything else (the dashboard's own uid too) unchanged."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                uid = _reference_uid(value) if key == "datasource" else None
                if uid in mapping:
                    out[key] = {**value, "uid": mapping[uid]}
                else:
                    out[key] = walk(value)
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(dashboard)


def parse_mapping(items: Iterable[str], known: Iterable[str]) -> dict[str, str]:
    """``--datasource NAME=UID`` flags as {shipped uid: your uid}; NAME must be a uid the
    dashboards use (``known``). Raises ValueError saying what to write instead."""
    known = sorted(set(known))
    out: dict[str, str] = {}
    for item in items:
        name, sep, uid = (part.strip() for part in item.partition("="))
        if not sep or not name or not uid:
            raise ValueError(f"--datasource {item!r}: write NAME=UID, e.g. "
                             "--datasource prometheus=P1809F7CD0C75ACF3")
        if name not in known:
            raise ValueError(f"--datasource {item!r}: the dashboards refer to data sources "
                             f"{', '.join(known)}; map one of those")
        if not UID.fullmatch(uid):
            raise ValueError(f"--datasource {item!r}: {uid!r} is not a Grafana uid (at most "
                             "40 letters, digits, '-', '_' or '.'; it is the last part of "
                             "the data source's URL in Connections > Data sources)")
        if name in out and out[name] != uid:
            raise ValueError(f"--datasource {name} is given twice ({out[name]}, {uid})")
        out[name] = uid
    return out
