"""Finds the metrics endpoints of TransferQueue's storage units.

verl registers only the controller's endpoint (``tq.get_metrics_endpoint()``), but each
SimpleStorage unit serves its own request histogram and counters on an endpoint of its
own. Facts from transferqueue 0.1.11: ``interface.py`` keeps the units this process
created in ``_TQ_STORAGE["SimpleStorage"]`` and stores the config in the controller actor
``TransferQueueController`` (namespace ``transfer_queue``);
``storage/bootstrap/simple_storage_bootstrap.py`` names the units
``TransferQueueStorageUnit#<rank>`` for rank < ``num_data_storage_units``;
``storage/simple_storage.py`` ``start_metrics()`` returns the running endpoint when the
unit already serves one (``init`` starts them all when metrics are enabled).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

CONTROLLER_ACTOR = ("TransferQueueController", "transfer_queue")
UNIT_ACTOR = "TransferQueueStorageUnit#{rank}"
STORAGE_JOB = "transfer_queue_storage"


def _local_units() -> list[Any]:
    """The storage-unit handles of the process that called ``tq.init`` first."""
    try:
        from transfer_queue import interface
    except Exception:
        return []
    storage = getattr(interface, "_TQ_STORAGE", None) or {}
    units = storage.get("SimpleStorage") or {}
    return list(units.values()) if isinstance(units, dict) else []


def _named_units(ray: Any, timeout: float) -> list[Any]:
    """The units by name, from any process of the job that created them."""
    name, namespace = CONTROLLER_ACTOR
    controller = ray.get_actor(name, namespace=namespace)
    conf = ray.get(controller.get_config.remote(), timeout=timeout)
    if conf is None or not conf.get("metrics", {}).get("enabled", False):
        return []
    simple = conf.get("backend", {}).get("SimpleStorage", {}) or {}
    handles = []
    for rank in range(int(simple.get("num_data_storage_units", 0) or 0)):
        try:
            handles.append(ray.get_actor(UNIT_ACTOR.format(rank=rank)))
        except ValueError:
            continue  # created in another namespace, or gone
    return handles


def storage_endpoints(timeout: float = 20.0) -> list[str]:
    """``host:port`` of every storage unit's /metrics; empty when there is no Ray, no
    TransferQueue or no SimpleStorage with metrics. Blocks up to about ``timeout``."""
    try:
        import ray

        if not ray.is_initialized():
            return []
        units = _local_units() or _named_units(ray, timeout)
        if not units:
            return []
        answers = ray.get([u.start_metrics.remote() for u in units], timeout=timeout)
        return [a for a in answers if isinstance(a, str) and a]
    except Exception as e:  # never into the caller: a missing unit is a missing panel
        log.info("rl-insight: TransferQueue storage units not found (%s); their request "
                 "metrics stay unscraped", e)
        return []


def register_storage_units_later(register: Any, timeout: float = 20.0) -> threading.Thread:
    """Find the units on a thread of their own and hand their endpoints to
    ``register(endpoints)``: the caller registering the controller never waits on Ray."""
    def run() -> None:
        endpoints = storage_endpoints(timeout)
        if endpoints:
            register(endpoints)

    t = threading.Thread(target=run, name="rl-insight-tq-storage", daemon=True)
    t.start()
    return t
