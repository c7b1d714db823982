"""The little of Prometheus' and Alertmanager's HTTP APIs the server reads: active targets
and their health, and the alerts pending or firing."""

from __future__ import annotations

from typing import Any

import requests


class ApiUnavailable(RuntimeError):
    """The service did not answer, or answered something else than its API; the message
    says which."""


def get_json(base_url: str, path: str, params: dict | None = None,
             timeout: float = 3.0, auth: tuple[str, str] | None = None) -> Any:
    """GET ``base_url + path`` and return the decoded JSON; raise ApiUnavailable.
    ``auth``: the service's basic auth (server/doors.py), when it listens beyond
    loopback."""
    url = base_url.rstrip("/") + path
    try:
        r = requests.get(url, params=params, timeout=timeout, auth=auth)
        r.raise_for_status()
        return r.json()
    except requests.HTTPError as exc:
        raise ApiUnavailable(f"{url} answered HTTP {exc.response.status_code}") from None
    except requests.RequestException as exc:
        raise ApiUnavailable(f"no answer from {url} ({exc.__class__.__name__})") from None
    except ValueError:
        raise ApiUnavailable(f"{url} did not answer JSON") from None


def instant(prom_url: str, expr: str, timeout: float = 10.0,
            auth: tuple[str, str] | None = None) -> tuple[int, dict]:
    """``GET /api/v1/query``: Prometheus' status and its JSON answer as it gave them (a
    query it cannot parse is a 400 with its reason); raises ApiUnavailable when nothing
    or something else than JSON answers."""
    url = prom_url.rstrip("/") + "/api/v1/query"
    try:
        r = requests.get(url, params={"query": expr}, timeout=timeout, auth=auth)
        return r.status_code, r.json()
    except requests.RequestException as exc:
        raise ApiUnavailable(f"no answer from {url} ({exc.__class__.__name__})") from None
    except ValueError:
        raise ApiUnavailable(f"{url} did not answer JSON") from None


def target_health(prom_url: str, timeout: float = 3.0, auth: tuple[str, str] | None = None
                  ) -> dict[tuple[str, str], dict] | None:
    """(job, instance) -> {health, last_error, last_scrape, scrape_url, scrape_interval};
    None when Prometheus does not answer."""
    try:
        data = get_json(prom_url, "/api/v1/targets", {"state": "active"},
                        timeout, auth)["data"]["activeTargets"]
    except (ApiUnavailable, KeyError, TypeError):
        return None
    out = {}
    for t in data:
        labels = t.get("labels", {})
        out[(labels.get("job", ""), labels.get("instance", ""))] = {
            "health": t.get("health", "unknown"),
            "last_error": t.get("lastError", ""),
            "last_scrape": t.get("lastScrape", ""),
            "scrape_url": t.get("scrapeUrl", ""),
            "scrape_interval": t.get("scrapeInterval", ""),
        }
    return out


def alerts(prom_url: str, timeout: float = 3.0, auth: tuple[str, str] | None = None
           ) -> list[dict]:
    """Prometheus' pending and firing alerts (``GET /api/v1/alerts``), as it gives them:
    labels, annotations, state, activeAt, value. Raises ApiUnavailable."""
    try:
        return list(get_json(prom_url, "/api/v1/alerts", timeout=timeout, auth=auth
                             )["data"]["alerts"])
    except (KeyError, TypeError):
        raise ApiUnavailable(f"{prom_url}/api/v1/alerts did not answer Prometheus' "
                             "alerts") from None


def alertmanager_alerts(am_url: str, timeout: float = 3.0,
                        auth: tuple[str, str] | None = None) -> list[dict]:
    """The alerts Alertmanager holds (``GET /api/v2/alerts``): labels, status.state
    (active, suppressed, unprocessed), receivers. Raises ApiUnavailable."""
    data = get_json(am_url, "/api/v2/alerts", timeout=timeout, auth=auth)
    if not isinstance(data, list):
        raise ApiUnavailable(f"{am_url}/api/v2/alerts did not answer a list of alerts")
    return data


def query_range(prom_url: str, expr: str, start: float, end: float, step: float,
                timeout: float = 10.0, auth: tuple[str, str] | None = None) -> list[dict]:
    """``GET /api/v1/query_range``: each series' labels and its [time, "value"] points.
    Raises ApiUnavailable (Prometheus' own error message included)."""
    return _result(prom_url, "/api/v1/query_range",
                   {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                    "step": f"{max(step, 0.001):.3f}"}, timeout, auth)


def samples(prom_url: str, expr: str, start: float, end: float, timeout: float = 10.0,
            auth: tuple[str, str] | None = None) -> list[dict]:
    """Every raw sample of the series ``expr`` selects between ``start`` and ``end``
    (an instant query of the range ``expr[end - start]`` at ``end``)."""
    window = max(1, int(end - start) + 1)
    return _result(prom_url, "/api/v1/query", {"query": f"{expr}[{window}s]",
                                               "time": f"{end:.3f}"}, timeout, auth)


def _result(prom_url: str, path: str, params: dict, timeout: float,
            auth: tuple[str, str] | None) -> list[dict]:
    """A query's ``data.result``; raises ApiUnavailable when the answer has none."""
    data = get_json(prom_url, path, params, timeout, auth)
    try:
        return list(data["data"]["result"])
    except (KeyError, TypeError):
        raise ApiUnavailable(f"{prom_url}{path} did not answer a result: "
                             f"{str(data)[:200]}") from None
