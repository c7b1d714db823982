"""Profiler files read a piece at a time (rl_insight/profiler/jsonstream.py): a Chrome
trace's array element by element across the reader's chunks, an object's members with its
big array streamed, gzip read through, a damaged file said where it broke."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from rl_insight.profiler import jsonstream


def parts(text: str, chunk: int = 7) -> list:
    """Every part, read with a tiny window so values straddle the chunks' seams."""
    old = jsonstream.CHUNK
    jsonstream.CHUNK = chunk
    try:
        return list(jsonstream.items(io.StringIO(text)))
    finally:
        jsonstream.CHUNK = old


def test_an_array_s_elements_come_whole_across_the_chunks_seams():
    events = [{"ph": "X", "name": "a" * 30, "ts": "1773285904640626.314", "dur": 12.5},
              12345678901234, -0.5, "x,]}", None, True, [1, [2, {"k": "v"}]]]
    text = json.dumps(events, indent=2)
    assert [v for _, v in parts(text)] == events  # a number cut by a seam is not cut short
    assert parts("[]") == [] and parts(" [ ] \n") == []


def test_an_object_s_members_come_in_order_with_its_array_streamed():
    doc = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": i} for i in range(5)],
           "distributedInfo": {"rank": 3, "world_size": 4}}
    got = parts(json.dumps(doc))
    assert got[0] == ("schemaVersion", 1)
    assert [v["ts"] for k, v in got if k == "traceEvents"] == list(range(5))
    assert got[-1] == ("distributedInfo", {"rank": 3, "world_size": 4})
    assert parts('{"traceEvents": []}') == []
    assert parts('{"traceEvents": 5}') == [("traceEvents", 5)]  # no array: as it is


@pytest.mark.parametrize("text, where", [
    ('[{"ph": "X"}, {"ph": ', "no JSON value"),  # cut short mid-element
    ('[{"ph": "X"} {"ph": "X"}]', "expected one of"),  # a comma lost
    ('{"a": 1} trailing', "more after"),
    ("", "expected one of"),
    ('{"traceEvents": [1, 2', "expected one of"),
])
def test_a_damaged_document_says_where_it_broke(text, where):
    with pytest.raises(jsonstream.BadJson, match=where):
        parts(text)


def test_gzip_is_read_through_whatever_the_name_and_a_cut_gzip_is_an_error(tmp_path):
    lines = [json.dumps({"table": "StringIds", "id": i, "value": f"s{i}"}) for i in range(50)]
    plain, packed, cut = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl.gz"
    plain.write_text("\n".join(lines) + "\n\n")
    packed.write_bytes(gzip.compress("\n".join(lines).encode()))
    cut.write_bytes(gzip.compress("\n".join(lines).encode())[:-30])
    assert [n for n, _ in jsonstream.lines(plain)] == list(range(1, 51))
    assert [json.loads(x)["id"] for _, x in jsonstream.lines(packed)] == list(range(50))
    with pytest.raises(jsonstream.BadJson, match="cannot be read to its end"):
        list(jsonstream.lines(cut))
    with jsonstream.open_text(packed) as f:
        assert f.readline().startswith('{"table"')
