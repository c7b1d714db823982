"""Span text (prompts, completions, reasoning) is kept only as traces.text_policy says,
at the server, whatever a caller sends: off by default (removed), redacted (a length and
a hash), full (up to traces.text_max_bytes, marked when cut). Spans of the RFC's shape
(docs/monitor/inference_trace_rfc.md: a sentence span's ``text``) and Uni-Agent's
``gateway_generation`` (uni_agent/rl_insight/adapter.py: ``content``, ``reasoning``,
``tool_args``) through the real OTLP path: encoded by the OpenTelemetry exporter's own
encoder, posted to the server, read back as Tempo receives them."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rl_insight import config
from rl_insight.server.app import create_app
from rl_insight.server.ingest import otlp
from rl_insight.server.services.supervisor import Supervisor
from rl_insight.server.state import ServerState

PROMPT = "Solve: what is 17 * 23? Think step by step. " * 40  # 1,800 bytes
REASONING = "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51 = 391. ü"


def spans() -> bytes:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("gateway_generation") as s:  # Uni-Agent's
        s.set_attribute("project", "p")
        s.set_attribute("experiment_name", "e")
        s.set_attribute("reasoning", REASONING)
        s.set_attribute("content", PROMPT)
        s.set_attribute("tool_args", '["x"]')
        s.set_attribute("prompt_tokens", 280)
        s.set_attribute("finish_reason", "stop")
        s.add_event("gen_ai.content.prompt", {"gen_ai.prompt": PROMPT})
    with tracer.start_as_current_span("inference_sentence") as s:  # the RFC's
        s.set_attribute("sentence_type", "answer")
        s.set_attribute("text", "391")
        s.set_attribute("content", "")  # empty: nothing to keep or remove
    return encode_spans(exported.get_finished_spans()).SerializeToString()


def relayed(tmp_path, *overrides: str) -> list[dict]:
    """What the server keeps for Tempo: the spans its spool holds, decoded."""
    s = config.load(environ={"RL_INSIGHT_HOME": str(tmp_path)}, overrides=overrides)
    state = ServerState(s, Supervisor(s.supervisor, s.logs_dir))
    state.open()
    try:
        with TestClient(create_app(state)) as c:
            r = c.post("/v1/traces", content=spans(),
                       headers={"Content-Type": "application/x-protobuf"})
            assert r.status_code == 200, r.text
            metrics = c.get("/metrics").text
        out = []
        for _, _, payload in state.spool.peek_many(1 << 30):
            req = ExportTraceServiceRequest()
            req.ParseFromString(payload)
            for attrs, span in otlp.iter_spans(req):
                events = [{kv.key: otlp.value_of(kv.value) for kv in e.attributes}
                          for e in span.events]
                out.append({"name": span.name, **attrs, "events": events,
                            "metrics": metrics})
        return out
    finally:
        state.close()


def test_off_by_default_removes_every_text_and_keeps_the_rest(tmp_path):
    gen, sentence = relayed(tmp_path)
    assert not {"reasoning", "content", "tool_args"} & set(gen)
    assert gen["prompt_tokens"] == 280 and gen["finish_reason"] == "stop"
    assert gen["events"] == [{}]
    assert "text" not in sentence and sentence["content"] == ""
    assert sentence["sentence_type"] == "answer"
    assert 'rl_insight_span_texts_total{policy="off"} 5.0' in gen["metrics"]


def test_redacted_keeps_a_length_and_a_hash(tmp_path):
    gen, sentence = relayed(tmp_path, "traces.text_policy=redacted")
    assert gen["content"].startswith(f"[redacted {len(PROMPT.encode())} bytes sha256:")
    assert REASONING not in str(gen) and PROMPT[:20] not in str(gen)
    assert gen["events"][0]["gen_ai.prompt"] == gen["content"]  # the same text, same hash
    assert sentence["text"].startswith("[redacted 3 bytes")


def test_full_keeps_text_up_to_the_limit_and_says_where_it_cut(tmp_path):
    gen, sentence = relayed(tmp_path, "traces.text_policy=full", "traces.text_max_bytes=50")
    assert gen["reasoning"] == REASONING[:47]  # 50 bytes, "ü" not split
    assert len(gen["content"].encode()) == 50 and gen["text_truncated"] is True
    assert sentence["text"] == "391" and "text_truncated" not in sentence


def test_a_policy_that_is_no_policy_is_refused():
    with pytest.raises(config.ConfigError, match="one of off, redacted, full"):
        config.load(environ={}, overrides=["traces.text_policy=some"])
