"""The FAKE engines answer /metrics through the library path the real ones use: SGLang
through prometheus_client's negotiating app (so a Prometheus asking for OpenMetrics gets
`sglang_*` names from prometheus_client >= 0.23, as from the real engine), vLLM in the
text format whatever is asked."""

from __future__ import annotations

import sys

import requests

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "examples"))
import fake_engines  # noqa: E402

# the Accept header Prometheus 2.x sends (scrape/scrape.go acceptHeader, OpenMetrics first)
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def scrape(port: int, accept: str | None) -> str:
    headers = {"Accept": accept} if accept else {}
    return requests.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=5).text


def test_sglang_negotiates_and_vllm_answers_text():
    from importlib.metadata import version as installed

    sglang = fake_engines.FakeEngine("sglang")
    vllm = fake_engines.FakeEngine("vllm")
    try:
        plain = scrape(sglang.port, None)
        assert "sglang:num_running_reqs{" in plain
        assert 'engine_type="unified"' in plain and 'tp_rank="0"' in plain
        negotiated = scrape(sglang.port, PROMETHEUS_ACCEPT)
        assert negotiated.rstrip().endswith("# EOF")  # OpenMetrics
        version = tuple(int(x) for x in installed("prometheus-client").split(".")[:2])
        if version >= (0, 23):
            assert "sglang_num_running_reqs{" in negotiated
            assert "sglang:num_running_reqs{" not in negotiated
        text = scrape(vllm.port, PROMETHEUS_ACCEPT)
        assert "vllm:num_requests_running{" in text and "# EOF" not in text
    finally:
        for e in (sglang, vllm):
            e.server.shutdown()
