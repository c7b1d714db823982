"""Platform mode (no RL-Insight server): the lane actors' series reach the platform's
Prometheus through the hub, served beside the trainer metrics on its one /metrics.

A lane actor hands the hub what it would push to the server (a group: a job, grouping
labels and a text exposition); the hub keeps the newest text of each group with its
grouping labels written onto every series, so two node lane actors' pooled rank
durations stay apart by ``lane_actor`` exactly as the server keeps them. Bounded: a
group goes when its run is forgotten or when it has not been refreshed for
``idle_s`` (a lane actor refreshes every group it holds well within that).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from rl_insight.collector.exposition import escape_label
from rl_insight.collector.runs import merge_expositions
from rl_insight.wire.events import Identity

IDLE_S = 3600.0
MAX_GROUPS = 20_000  # 628 lane actors of a 1,000-GPU run hold about 2 groups each

Group = tuple[str, Mapping[str, str], str, bool]  # job, grouping, text, replace


def with_labels(text: str, labels: Mapping[str, str]) -> str:
    """``text`` (this package's own exposition) with ``labels`` on every sample."""
    if not labels:
        return text
    extra = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            out.append(line)
            continue
        brace, space = line.find("{"), line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            rest = line[brace + 1:]
            out.append(f"{line[:brace]}{{{extra}{'' if rest.startswith('}') else ','}{rest}")
        else:
            out.append(f"{line[:space]}{{{extra}}}{line[space:]}")
    return "\n".join(out) + "\n"


class ServedGroups:
    """The newest exposition of every pushed group, for the hub's /metrics."""

    def __init__(self, idle_s: float = IDLE_S, max_groups: int = MAX_GROUPS) -> None:
        self.idle_s = idle_s
        self.max_groups = max_groups
        # (job, grouping items) -> (labelled text, when it came, its run or None)
        self._groups: dict[tuple, tuple[str, float, Identity | None]] = {}
        self.refused = 0
        self._lock = threading.Lock()

    def put(self, groups: Sequence[Group], now: float | None = None) -> list[bool]:
        """Keep each group's text (a push replaces the group's previous text)."""
        now = time.monotonic() if now is None else now
        out = []
        with self._lock:
            for job, grouping, text, _replace in groups:
                key = (job, tuple(sorted(grouping.items())))
                if key not in self._groups and len(self._groups) >= self.max_groups:
                    self.refused += 1
                    out.append(False)
                    continue
                run = Identity(grouping["project"], grouping.get("experiment_name", "")) \
                    if grouping.get("project") else None
                # no `job` label: the platform's scrape job names the hub's target
                labelled = with_labels(text, grouping)
                self._groups[key] = (labelled, now, run)
                out.append(True)
        return out

    def forget(self, runs: Iterable[Identity] = (), now: float | None = None) -> int:
        """Drop the groups of these runs, and every group not refreshed for idle_s."""
        now = time.monotonic() if now is None else now
        gone_runs = set(runs)
        with self._lock:
            gone = [k for k, (_, seen, run) in self._groups.items()
                    if run in gone_runs or now - seen > self.idle_s]
            for k in gone:
                del self._groups[k]
        return len(gone)

    def render(self) -> str:
        with self._lock:
            texts = [text for text, _, _ in self._groups.values()]
        return merge_expositions(texts)

    def __len__(self) -> int:
        with self._lock:
            return len(self._groups)
