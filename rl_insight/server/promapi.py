"""The little of Prometheus' HTTP API the server reads: active targets and their health."""

from __future__ import annotations

import requests


def target_health(prom_url: str, timeout: float = 3.0) -> dict[tuple[str, str], dict] | None:
    """(job, instance) -> {health, last_error, last_scrape}; None when Prometheus does
    not answer."""
    try:
        r = requests.get(prom_url.rstrip("/") + "/api/v1/targets",
                         params={"state": "active"}, timeout=timeout)
        data = r.json()["data"]["activeTargets"]
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None
    out = {}
    for t in data:
        labels = t.get("labels", {})
        out[(labels.get("job", ""), labels.get("instance", ""))] = {
            "health": t.get("health", "unknown"),
            "last_error": t.get("lastError", ""),
            "last_scrape": t.get("lastScrape", ""),
            "scrape_url": t.get("scrapeUrl", ""),
        }
    return out
