"""The FAKE engines answer /metrics through the library path the real ones use: SGLang
through prometheus_client's negotiating app (so a Prometheus asking for OpenMetrics gets
`sglang_*` names from prometheus_client >= 0.23, as from the real engine), vLLM in the
text format whatever is asked."""

from __future__ import annotations

import sys
import time

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


def test_vllm_omni_labels_by_stage_and_its_own_replica():
    """vLLM-Omni's engine metrics carry stage and the engine's replica instead of engine
    (OmniPrometheusStatLogger), beside its own vllm_omni:* families, in the text format."""
    omni = fake_engines.FakeEngine("vllm_omni")
    try:
        omni.submit(4)
        text = ""
        for _ in range(100):  # the requests finish within a few 50 ms ticks
            text = scrape(omni.port, PROMETHEUS_ACCEPT)
            if 'stage_type="diffusion"' in text:
                break
            time.sleep(0.1)
        engine = [x for x in text.splitlines() if x.startswith("vllm:")]
        assert engine and all('stage="0"' in x and 'replica="0"' in x for x in engine)
        assert not any("engine=" in x for x in engine)
        assert 'vllm_omni:stage_gen_time_s_count{model_name="' in text
        assert 'stage_type="diffusion"' in text and 'from_stage="0"' in text
        assert "# EOF" not in text
    finally:
        omni.server.shutdown()


def test_the_scale_benchs_engines_are_the_fake_vllm_driven_on_simulated_time():
    """bench/scale_engines.py serves 1,000 replicas' /metrics from one exposition of the
    FAKE vLLM, built without its server and clock thread (it once built the engine by
    hand and broke when the engine grew an attribute: make bench-tier stopped at start)."""
    from prometheus_client.parser import text_string_to_metric_families

    from bench import scale_engines

    assert scale_engines.fake_vllm(0).server is None
    finished: dict[str, float] = {}
    for fam in text_string_to_metric_families(scale_engines.exposition(2)):
        if fam.name == "vllm:request_success":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    finished[s.labels["engine"]] = finished.get(s.labels["engine"], 0) + s.value
    assert finished == {"0": 40, "1": 40}, finished
