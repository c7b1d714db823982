"""The server's per-lane statistics: a span sent twice (a sender that timed out on a
request the server had taken, a lane actor's resend after a restart) counts once."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rl_insight.server.ingest import spanwalk
from rl_insight.server.ingest.lane_stats import LaneStats


def request(span_ids: list[bytes]) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    for sid in span_ids:
        s = spans.add(name="update_weights", trace_id=b"\x01" * 16, span_id=sid,
                      end_time_unix_nano=10)
        for k, v in (("project", "p"), ("experiment_name", "e"), ("state_lane_id", "rank_0")):
            a = s.attributes.add(key=k)
            a.value.string_value = v
    return req


def test_a_batch_received_twice_counts_once():
    stats = LaneStats(max_lanes=10)
    first = request([bytes([i]) * 8 for i in range(1, 4)])
    assert stats.observe(map(spanwalk.lane_at, spanwalk.walk(first).spans)) == \
        ({("p", "e")}, set())
    # the same request again: each of its spans a copy, by position, for the intake
    assert stats.observe(map(spanwalk.lane_at, spanwalk.walk(first).spans)) == \
        ({("p", "e")}, {0, 1, 2})
    again = request([b"\x09" * 8, b"\x02" * 8])  # a new span and a copy
    assert stats.observe(map(spanwalk.lane_at, spanwalk.walk(again).spans))[1] == {1}
    (row,) = stats.list("p", "e")
    assert row["states"] == {"update_weights": 4} and row["spans"] == 4
