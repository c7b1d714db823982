"""Pushed metric groups, with the Prometheus Pushgateway's semantics.

A group is named by its grouping key (``job`` plus the label pairs of the push URL).
PUT replaces a group, POST replaces only the families it pushes, DELETE drops it. Every
sample carries the grouping labels (they override the pushed ones) and ``instance=""``
when it has none, exactly as the Pushgateway exposes them. A push that is invalid,
inconsistent with what is stored, or over a limit changes nothing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from rl_insight.common import files
from rl_insight.config import PushSettings
from rl_insight.server.ingest import pushfamilies, textformat
from rl_insight.server.ingest.grouping import GroupKey, PushError, group_key
from rl_insight.server.ingest.pushexposition import (
    plain_family,
    render,
    render_blocks,
    sample_prefix,
    split_blocks,
)
from rl_insight.server.ingest.pushfamilies import TYPE, Packed, pack
from rl_insight.server.ingest.pushshape import Block, Shape, split
from rl_insight.server.ingest.pushtext import check_families, parse_body, parse_text
from rl_insight.server.ingest.store import Store

log = logging.getLogger(__name__)




@dataclass
class Group:
    labels: dict[str, str]
    packed: Packed = field(default_factory=dict)  # its families as tuples (pushfamilies)
    push_time: float = 0.0
    _blocks: dict[str, Block] | None = field(default=None, repr=False)

    @property
    def series(self) -> int:
        return pushfamilies.series(self.packed)

    @property
    def families(self) -> dict[str, Metric]:
        """The families as Metric objects, made on each call: for readers off the push
        path."""
        return pushfamilies.unpack(self.packed)

    def family(self, name: str) -> Metric | None:
        fam = self.packed.get(name)
        return None if fam is None else pushfamilies.metric(name, fam)

    def blocks(self) -> dict[str, Block]:
        """This group's exposition by exposed name, rendered once per change: a scrape
        or a persist costs what changed since, not every group every time."""
        if self._blocks is None:
            self._blocks = render_blocks(self.families.values())
        return self._blocks

    def text(self) -> str:
        return "".join(h + t + body for h, t, body in self.blocks().values())


def _merged_blocks(old: Group, families: Packed,
                   blocks: dict[str, Block] | None) -> dict[str, Block] | None:
    """A POST's blocks on top of the group's (None: rendered when next read): only when
    every family it replaces keeps its type, so its exposed name stays the same."""
    if blocks is None or old._blocks is None or any(
            name in old.packed and old.packed[name][TYPE] != fam[TYPE]
            for name, fam in families.items()):
        return None
    return {**old._blocks, **blocks}


class PushStore:
    """All groups, thread-safe; every change is written to the server's database before
    it is acknowledged (a group's row holds its text exposition)."""

    def __init__(self, settings: PushSettings, store: Store,
                 refuse: Callable[[Mapping[str, str]], str | None] = lambda labels: None,
                 reserved: Callable[[], Mapping[str, str]] = dict,
                 legacy_dir: Path | None = None) -> None:
        self.settings = settings
        self.store = store
        self.legacy_dir = legacy_dir  # earlier versions' file per group, read in once
        self.refuse = refuse  # grouping labels -> reason to refuse (archived experiment)
        self.reserved = reserved  # family name -> type of the server's own metrics
        self.groups: dict[GroupKey, Group] = {}
        self._types: dict[str, dict[str, int]] = {}  # family -> type -> groups using it
        self._lock = threading.RLock()
        self._series = 0  # series in all groups, kept as groups change (read per push)
        self.pushes = 0
        self.version = 0  # bumped on every change (for caching the exposition)
        self._shapes: dict[GroupKey, Shape] = {}  # per group, the last body's shape

    # -- writes ------------------------------------------------------------------
    def push(self, grouping: Mapping[str, str], body: str, replace: bool) -> None:
        """PUT (replace=True) or POST semantics; raises PushError and changes nothing."""
        why = self.refuse(grouping)
        if why:
            raise PushError(409, why)
        key = group_key(grouping)
        families, blocks = self._parse(key, body, grouping)
        with self._changing():
            old = self.groups.get(key)
            if replace or old is None:
                merged = families
            else:
                merged = {**old.packed, **families}
                blocks = _merged_blocks(old, families, blocks)
            self._check_types(families, key)
            new_series = pushfamilies.series(merged)
            if new_series > self.settings.max_series_per_group:
                raise PushError(400, f"the group would hold {new_series} series; the limit "
                                     f"is {self.settings.max_series_per_group} "
                                     "(push.max_series_per_group)")
            total = self.total_series() - (old.series if old else 0) + new_series
            if total > self.settings.max_series_total:
                raise PushError(429, f"the server would hold {total} series; the limit is "
                                     f"{self.settings.max_series_total} "
                                     "(push.max_series_total); delete finished groups")
            group = Group(dict(grouping), merged, time.time(), blocks)
            self._write([group], [])  # committed before the push is acknowledged
            self._change(key, old, group)
            self.pushes += 1

    def _parse(self, key: GroupKey, body: str, grouping: Mapping[str, str]
               ) -> tuple[Packed, dict[str, Block] | None]:
        """The push's families, and its rendered blocks when its shape was read before
        for this group (pushshape: only the values are read then)."""
        shape = self._shapes.get(key)
        cut = split(body) if shape is not None else None
        if cut is not None and shape.text == cut[0] and shape.count == len(cut[1]):
            try:
                return shape.fill(cut[1], textformat.number)
            except textformat.NotPlain:
                pass
        plain = textformat.parse_plain(body)
        families = check_families(plain if plain is not None else
                                  parse_text(body, plain_tried=True), grouping)
        if plain is None or len(families) != len(plain) or \
                not all(plain_family(f) for f in families.values()):
            return pack(families), None  # never read by shape: parsed in full every time
        cut = cut or split(body)  # split only the bodies whose shape can be kept
        if cut is None:
            return pack(families), None
        blocks = render_blocks(families.values())
        self._shapes[key] = Shape.of(cut[0], list(families.values()), blocks, sample_prefix)
        return pack(families), blocks

    def delete(self, grouping: Mapping[str, str]) -> bool:
        key = group_key(grouping)
        with self._changing():
            old = self.groups.get(key)
            if old is None:
                return False
            self._write([], [key])
            self._change(key, old, None)
            return True

    @contextmanager
    def _changing(self):
        """The database's transaction, then this store's lock: the order every writer
        keeps (store.py), so the intake's batch and housekeeping never wait on each
        other. Commits when the block ends; a commit the disk refuses is a 503."""
        try:
            with self.store.transaction(), self._lock:
                yield
        except sqlite3.Error as exc:
            log.error("cannot store pushed groups in %s: %s", self.store.path, exc)
            raise PushError(503, f"the server cannot store the push ({exc}): check the "
                                 f"disk of {self.store.path}") from None

    def _write(self, groups: list[Group], gone: list[GroupKey]) -> None:
        """Write through to the database; a failure refuses the change (503)."""
        try:
            self.store.save_groups([(json.dumps(group_key(g.labels)), json.dumps(g.labels),
                                     g.push_time, g.text()) for g in groups],
                                   [json.dumps(k) for k in gone])
        except Exception as exc:
            log.error("cannot store pushed groups in %s: %s", self.store.path, exc)
            raise PushError(503, f"the server cannot store the push ({exc}); nothing "
                                 f"changed: check the disk of {self.store.path}") from None

    def _check_types(self, families: Packed, key: GroupKey) -> None:
        reserved = self.reserved()
        own = self.groups.get(key)
        for name, typ in pushfamilies.types(families):
            if name in reserved and reserved[name] != typ:
                raise PushError(409, f"metric {name!r} is pushed as {typ} but the server "
                                     f"exposes it as {reserved[name]}")
            types = dict(self._types.get(name, {}))
            if own is not None and name in own.packed:
                t = own.packed[name][TYPE]
                types[t] -= 1
                if not types[t]:
                    del types[t]
            other = [t for t in types if t != typ]
            if other:
                raise PushError(409, f"metric {name!r} is pushed as {typ} but another "
                                     f"group holds it as {other[0]}; one name, one type")

    def _change(self, key: GroupKey, old: Group | None, new: Group | None) -> None:
        """``_replace`` inside the write's transaction, undone with it: a group the
        database did not keep (its batch's COMMIT failed) is not served."""
        self._replace(key, old, new)

        def undo() -> None:
            with self._lock:
                self._replace(key, new, old)
                self._shapes.pop(key, None)
        self.store.on_rollback(undo)

    def _replace(self, key: GroupKey, old: Group | None, new: Group | None) -> None:
        for group, step in ((old, -1), (new, 1)):
            if group is None:
                continue
            self._series += step * group.series
            for name, typ in pushfamilies.types(group.packed):
                counts = self._types.setdefault(name, {})
                counts[typ] = counts.get(typ, 0) + step
                if counts[typ] <= 0:
                    del counts[typ]
                if not counts:
                    del self._types[name]
        if new is None:
            self.groups.pop(key, None)
            self._shapes.pop(key, None)
        else:
            self.groups[key] = new
        self.version += 1

    # -- reads -------------------------------------------------------------------
    def total_series(self) -> int:
        with self._lock:
            return self._series

    def families(self, visible: Callable[[Mapping[str, str]], bool] = lambda labels: True
                 ) -> list[Metric]:
        """Every family merged across groups, plus push_time_seconds and
        push_failure_time_seconds per group, as the Pushgateway exposes them."""
        merged: dict[str, Metric] = {}
        push_time = Metric("push_time_seconds",
                           "Last Unix time when changing this group in the Pushgateway "
                           "succeeded.", "gauge")
        failure = Metric("push_failure_time_seconds",
                         "Last Unix time when changing this group in the Pushgateway failed.",
                         "gauge")
        with self._lock:
            for group in self.groups.values():
                if not visible(group.labels):
                    continue
                for name, fam in group.families.items():
                    into = merged.get(name)
                    if into is None:
                        into = merged[name] = Metric(name, fam.documentation, fam.type,
                                                     fam.unit)
                    into.samples.extend(fam.samples)
                base = dict(group.labels)
                base.setdefault("instance", "")
                push_time.samples.append(Sample("push_time_seconds", base, group.push_time))
                failure.samples.append(Sample("push_failure_time_seconds", base, 0.0))
        if push_time.samples:
            merged.setdefault("push_time_seconds", push_time)
            merged.setdefault("push_failure_time_seconds", failure)
        return list(merged.values())

    def exposition(self, own: Iterable[Metric],
                   visible: Callable[[Mapping[str, str]], bool] = lambda labels: True
                   ) -> bytes:
        """The server's own families and every visible group, each name once (own HELP
        and TYPE first; pushed samples of that name join it, the same type as the push
        checks guarantee), with push_time_seconds and push_failure_time_seconds per group
        as the Pushgateway exposes them. Groups contribute their cached blocks."""
        # the server's own families written as a push's are (render_blocks): at twelve
        # thousand samples generate_latest took two-thirds of each scrape's time
        merged = render_blocks(own)
        parts: dict[str, list[str]] = {name: [h, t, body] for name, (h, t, body)
                                       in merged.items()}
        times, failures = [], []
        with self._lock:
            for group in [g for g in self.groups.values() if visible(g.labels)]:
                for name, (h, t, body) in group.blocks().items():
                    into = parts.get(name)
                    if into is None:
                        parts[name] = [h, t, body]
                    else:
                        into.append(body)
                base = dict(group.labels)
                base.setdefault("instance", "")
                times.append(Sample("push_time_seconds", base, group.push_time))
                failures.append(Sample("push_failure_time_seconds", base, 0.0))
        if times:
            push_time = Metric("push_time_seconds", "Last Unix time when changing this group "
                               "in the Pushgateway succeeded.", "gauge")
            failure = Metric("push_failure_time_seconds", "Last Unix time when changing "
                             "this group in the Pushgateway failed.", "gauge")
            push_time.samples, failure.samples = times, failures
            for name, block in split_blocks(render([push_time, failure]).decode()).items():
                parts.setdefault(name, list(block))
        return "".join("".join(p) for p in parts.values()).encode()

    def groups_of(self, match: Callable[[Mapping[str, str]], bool]) -> list[dict]:
        with self._lock:
            return [{"labels": g.labels, "series": g.series, "push_time": g.push_time}
                    for g in self.groups.values() if match(g.labels)]

    # -- expiry and persistence ---------------------------------------------------
    def expire(self, now: float, finished_at: Callable[[Mapping[str, str]], float | None]
               ) -> int:
        """Drop groups of runs finished more than finished_ttl_s ago, and idle groups."""
        s = self.settings

        def stale(labels: Mapping[str, str], push_time: float) -> bool:
            done = finished_at(labels)
            if done is not None and now - done > s.finished_ttl_s:
                return True
            return bool(s.idle_ttl_s) and now - push_time > s.idle_ttl_s

        with self._lock:  # a look first: most rounds expire nothing and write nothing
            if not any(stale(g.labels, g.push_time) for g in self.groups.values()):
                return 0
        with self._changing():
            keys = [k for k, g in self.groups.items() if stale(g.labels, g.push_time)]
            if keys:
                self._write([], keys)
            for k in keys:
                self._change(k, self.groups[k], None)
        if keys:
            log.info("expired %d pushed groups", len(keys))
        return len(keys)

    def persist(self) -> None:
        """Nothing to do: every change is written through as it is made."""

    def load(self) -> int:
        """Read the stored groups back (at start), and once an earlier version's files;
        unreadable ones are logged and skipped."""
        stored = [(json.loads(labels), push_time, text)
                  for labels, push_time, text in self.store.groups()]
        legacy = self._legacy()
        n = 0
        for labels, push_time, text in [*stored, *legacy]:
            try:
                families = parse_body(text, labels)
            except PushError as exc:
                log.warning("skipping an unreadable pushed group %s: %s", labels, exc)
                continue
            group = Group(labels, pack(families), push_time)
            with self._lock:
                self._replace(group_key(group.labels), self.groups.get(
                    group_key(group.labels)), group)
            n += 1
        if legacy:
            with self._changing():
                self._write(list(self.groups.values()), [])
            files.migrated(self.legacy_dir, len(legacy), self.store.path)
        return n

    def _legacy(self) -> list[tuple[dict, float, str]]:
        if self.legacy_dir is None or not self.legacy_dir.is_dir():
            return []
        out = []
        for path in sorted(self.legacy_dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                out.append((data["labels"], data["push_time"], data["text"]))
            except (ValueError, KeyError, OSError) as exc:
                log.warning("skipping unreadable pushed group %s: %s", path, exc)
        return out
