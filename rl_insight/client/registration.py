"""Registering scrape targets with the server from training code: rollout replicas'
engine endpoints, the TransferQueue controller, anything else; and a run's configuration
(rl_insight/client/runconfig.py). Each is handed to a background thread that
deduplicates and retries while the server is unreachable."""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rl_insight.collector.push import Sender
from rl_insight.wire import paths

log = logging.getLogger(__name__)

TQ_JOB = "transfer_queue"
ROLLOUT_JOBS = {"vllm": "vllm", "vllm_omni": "vllm", "vllm-omni": "vllm", "sglang": "sglang"}


class RolloutStatsDisabled(ValueError):
    """Rollout monitoring is on but the engine serves no statistics."""


def check_rollout_stats(disable_log_stats: bool, backend: str = "vllm") -> None:
    """Fail fast: with ``disable_log_stats=True`` the engine's /metrics has no engine
    statistics, and every rollout panel would stay empty."""
    if disable_log_stats:
        raise RolloutStatsDisabled(
            f"rollout monitoring is on but the {backend} engine runs with "
            "disable_log_stats=True, so it exports no engine metrics. Set "
            "actor_rollout_ref.rollout.disable_log_stats=False (verl), or turn rollout "
            "monitoring off.")


def normalise_address(address: str) -> str:
    """Accept ``http://host:port/metrics`` from callers; the server takes host:port."""
    a = str(address).strip()
    if "://" in a:
        a = a.split("://", 1)[1]
    return a.split("/", 1)[0]


def registration_body(server_addresses: Sequence[str] | str, job_name: str,
                      labels: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
                      project: str | None, experiment_name: str | None) -> dict:
    addresses = [server_addresses] if isinstance(server_addresses, str) \
        else list(server_addresses)
    body: dict[str, Any] = {"job_name": job_name,
                            "targets": [normalise_address(a) for a in addresses]}
    if labels is not None:
        body["labels"] = [dict(x) if x else None for x in labels] \
            if isinstance(labels, (list, tuple)) else dict(labels)
    if project and experiment_name:
        body["project"], body["experiment_name"] = project, experiment_name
    return body


def register_targets(c: Any, server_addresses: Sequence[str] | str, job_name: str | None,
                     labels: Any, project: str | None, experiment_name: str | None) -> None:
    """``update_prometheus_config`` for the running client ``c``: the body handed to its
    registrar, for the run it names unless told otherwise; TransferQueue's storage units
    found and registered after their controller. Platform mode registers nothing."""
    from rl_insight.client import transfer_queue as tq_units

    if _to_poller(c, server_addresses, labels) and not c.server_url:
        return  # the push backend scrapes them here; no server to tell
    if not c.server_url:  # platform mode: the platform scrapes by its own rule
        targets = [server_addresses] if isinstance(server_addresses, str) \
            else list(server_addresses)
        log.warning("rl-insight: platform mode (no RL-Insight server): %s targets %s "
                    "are not registered anywhere; the platform's Prometheus must "
                    "scrape them by its own rule (docs/platform.md has a static "
                    "config). verl skips this call when rl_insight.is_platform_mode() "
                    "is true.", job_name or "rollout", targets)
        return
    if not server_addresses:
        log.warning("rl-insight: update_prometheus_config(%r): no address to register",
                    job_name)
        return
    if project is None and experiment_name is None and c.identity is not None:
        project, experiment_name = c.identity
    body = registration_body(server_addresses, job_name or "rollout", labels, project,
                             experiment_name)
    body["owner"] = c.owner_key()
    registrar = c.registrar()
    if registrar.submit(body) and body["job_name"] == TQ_JOB:
        # verl names only the controller; each storage unit serves its own metrics
        def units(found: list[str], body: dict = body) -> None:
            labels = body.get("labels")
            unit = {k: v for k, v in body.items() if k != "labels"}
            if isinstance(labels, list) and len(labels) == 1:
                labels = labels[0]
            if isinstance(labels, dict):
                unit["labels"] = labels
            registrar.submit({**unit, "job_name": tq_units.STORAGE_JOB,
                              "targets": found})

        tq_units.register_storage_units_later(units)


def _to_poller(c: Any, server_addresses: Sequence[str] | str, labels: Any) -> bool:
    """The push backend's rollout poller scrapes the targets too (upstream's push client
    registers them in-process: verl-project/rl-insight rl_insight/utils/prometheus_utils.py
    at a0c0a451); kept for a poller started later. Whether the push backend took them."""
    addresses = [server_addresses] if isinstance(server_addresses, str) \
        else [str(a) for a in server_addresses]
    # kept even before the push backend is named: verl registers its engines before its
    # init(config=...) may name it
    c.scrape_targets.append((addresses, labels))
    del c.scrape_targets[:-1000]  # a process registering per trajectory stays bounded
    if c.config.push is None:
        return False
    f = c.fanout
    if f is not None and f.poller is not None:
        f.poller.add(addresses, labels)
        return True
    if not c.server_url:
        log.warning("rl-insight: push backend: %s targets %s are scraped by nothing here: "
                    "no sink takes the rollout stream with rules (push.sinks[].streams: "
                    "[rollout], push.rollout.packs) and no server URL is set",
                    "update_prometheus_config", addresses)
    return not c.server_url


DONE_KEEP = 10_000


Body = dict | Callable[[], dict | None]  # a body, or what makes it on the thread


class Registrar:
    """Sends registrations, run bindings and run configurations in order from one
    thread; keeps retrying one the server could not take. ``wait`` lets finish() and
    exit deliver them."""

    def __init__(self, server_url: str, token: str, retry_max_s: float = 30.0) -> None:
        self.sender = Sender(server_url, token)
        self.retry_max_s = retry_max_s
        self.pending: deque[tuple[str, Body]] = deque(maxlen=10_000)
        # registrations delivered, to skip a repeat: the latest DONE_KEEP only (a process
        # registering per trajectory must not grow without bound)
        self.done: OrderedDict[str, None] = OrderedDict()
        self.queued: set[str] = set()
        self.in_flight = False
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="rl-insight-register",
                                        daemon=True)
        self._thread.start()

    def submit(self, body: Body, path: str = paths.TARGETS) -> bool:
        """Queue a registration (or a binding); False when the same one is already done
        or queued. A callable body is made on the thread, then skipped if the same was
        done or queued (a run's configuration, flattened off the caller's thread)."""
        if callable(body):
            with self._lock:
                self.pending.append((path, body))
            self._wake.set()
            return True
        key = path + json.dumps(body, sort_keys=True)
        with self._lock:
            if key in self.done or key in self.queued:
                return False
            self.queued.add(key)
            self.pending.append((path, body))
        self._wake.set()
        return True

    def _run(self) -> None:
        delay = 0.5
        while True:
            self._wake.wait(delay if self.pending else None)
            self._wake.clear()
            while self.pending:
                path, body = self.pending[0]
                self.in_flight = True
                if callable(body) and not self._made(path, body):
                    continue
                path, body = self.pending[0]
                if not self.sender.post_json(path, body):
                    self.in_flight = False
                    delay = min(delay * 2, self.retry_max_s)
                    break
                delay = 0.5
                key = path + json.dumps(body, sort_keys=True)
                with self._lock:
                    self.pending.popleft()
                    self.queued.discard(key)
                    self.done[key] = None
                    self.done.move_to_end(key)
                    while len(self.done) > DONE_KEEP:
                        self.done.popitem(last=False)
                self.in_flight = False
            with self._idle:
                self._idle.notify_all()

    def _made(self, path: str, make: Callable[[], dict | None]) -> bool:
        """Make the first pending body in its place; False when there is none to send
        (it made nothing, or the same is done or queued: it leaves the queue)."""
        try:
            body = make()
        except Exception:
            log.warning("rl-insight: a body for %s could not be made", path, exc_info=True)
            body = None
        key = path + json.dumps(body, sort_keys=True) if body is not None else ""
        with self._lock:
            self.pending.popleft()
            if body is None or key in self.done or key in self.queued:
                self.in_flight = False
                return False
            self.queued.add(key)
            self.pending.appendleft((path, body))
        return True

    def idle(self) -> bool:
        return not self.pending and not self.in_flight

    def wait(self, timeout: float) -> bool:
        """Block until everything queued was delivered (or refused) or ``timeout``
        passed; True when nothing is left. Retries are hurried along."""
        self._wake.set()
        with self._idle:
            return self._idle.wait_for(self.idle, timeout)
