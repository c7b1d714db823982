"""The rollout poller: the engines this process registered (``update_prometheus_config``)
scraped every ``push.rollout.interval_seconds`` on a thread of its own, each scrape
translated by the rules (rules.py) and handed to the rollout stream's sinks. Upstream's
(verl-project/rl-insight ``rl_insight/client/push/poller.py`` at 9844c33a): the targets
keyed by address with their labels (a later registration replaces an address's labels),
a target's labels under the rule's and the sample's, ``host:port`` or a URL (``/metrics``
added), no proxy (engines sit on the cluster's own network); a target that cannot be
scraped is said for its first three failures, one that answers with nothing the rules
know once. And ``start``, which builds the push backend from its configuration."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rl_insight.client.push import rules as rules_mod
from rl_insight.client.push.drivers import build
from rl_insight.client.push.fanout import Fanout
from rl_insight.client.push.shape import PushConfig
from rl_insight.collector.connection import Connection, HttpError
from rl_insight.wire import paths

log = logging.getLogger(__name__)

Emit = Callable[[str, str, float, Mapping[str, str], str], None]
SCRAPE_TIMEOUT_S = 5.0
WARN_FAILURES = 3


def metrics_url(address: str) -> str:
    """``host:port`` or a URL, as the engine's /metrics URL."""
    url = address.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    return url if url.endswith(paths.METRICS) else url + paths.METRICS


class Poller:
    """Scrapes the registered targets; ``poll_once`` is one round (the thread's, or a
    caller's)."""

    def __init__(self, rules: list[dict[str, Any]], interval_s: float, emit: Emit) -> None:
        self.rules = rules
        self.interval_s = interval_s
        self.emit = emit
        self.targets: dict[str, dict[str, str]] = {}
        self._conns: dict[str, Connection] = {}
        self._states: dict[str, rules_mod.ScrapeState] = {}
        self._failures: dict[str, int] = {}
        self._told_empty: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, addresses: Sequence[str], labels: Any) -> None:
        """Targets with their labels: one mapping for all, or a list with one per
        address (None for none)."""
        per = list(labels) if isinstance(labels, (list, tuple)) else [labels] * len(addresses)
        with self._lock:
            for address, lab in zip(addresses, per, strict=False):
                self.targets[str(address)] = {str(k): str(v) for k, v in (lab or {}).items()}

    def start(self) -> None:
        """The polling thread; none when the interval is 0 or less (``poll_once`` by
        hand, as upstream's tests do)."""
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="rl-insight-push-poller",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for conn in self._conns.values():
            conn.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception:  # never the thread's end
                log.warning("rl-insight: push: a rollout poll failed", exc_info=True)

    def _fetch(self, address: str) -> str:
        url = metrics_url(address)
        conn = self._conns.get(url)
        if conn is None:
            conn = self._conns[url] = Connection(url, SCRAPE_TIMEOUT_S, {}, proxy="")
        # a connection a scrape: an engine's exporter may not keep one alive (a
        # prometheus_client WSGI server read no second request on it)
        r = conn.request("GET", url, headers={"Connection": "close"})
        if r.status_code != 200:
            raise OSError(f"HTTP {r.status_code} from {url}")
        return r.text

    def poll_once(self) -> int:
        """Scrape every target once; the operations handed over."""
        with self._lock:
            targets = list(self.targets.items())
        sent = 0
        for address, labels in targets:
            try:
                text = self._fetch(address)
            except HttpError as exc:
                n = self._failures[address] = self._failures.get(address, 0) + 1
                if n <= WARN_FAILURES:
                    log.warning("rl-insight: push: scraping %s failed (%d): %s; is the "
                                "engine up and its metrics on (disable_log_stats=False)?",
                                metrics_url(address), n, exc)
                continue
            self._failures.pop(address, None)
            try:
                ops = self._states.setdefault(address, rules_mod.ScrapeState()).translate(
                    text, self.rules)
            except Exception as exc:
                log.warning("rl-insight: push: %s's metrics could not be read: %s",
                            address, exc)
                continue
            if not ops and address not in self._told_empty:
                self._told_empty.add(address)
                log.warning("rl-insight: push: %s answered, but no rollout rule matched its "
                            "metrics (a counter or histogram rule waits for a second "
                            "scrape); check the rules' source names against its /metrics",
                            metrics_url(address))
            for op in ops:
                self.emit(op.name, op.op, op.value, {**labels, **op.tags}, op.group)
                sent += 1
        return sent


def start(config: PushConfig) -> Fanout | None:
    """The push backend: its sinks built (each broken one said and left out) and, when
    rules and a sink of the rollout stream exist, the poller started; None when no sink
    could be built. Never raises."""
    bound = [b for b in (build(spec) for spec in config.sinks) if b is not None]
    if not bound:
        log.warning("rl-insight: push: none of push.sinks could be built (%s): the push "
                    "backend is off in this process; the warnings above say why",
                    ", ".join(s.name for s in config.sinks))
        return None
    fanout = Fanout(config, bound)
    if "rollout" in fanout.streams():
        rules = rules_mod.rollout_rules(config.packs, config.rules)
        if rules:
            fanout.poller = Poller(rules, config.interval_s, fanout.rollout)
            fanout.poller.start()
        else:
            log.warning("rl-insight: push: a sink takes the rollout stream but there are "
                        "no rollout rules; add push.rollout.packs: [vllm] or "
                        "push.rollout.metrics")
    return fanout
