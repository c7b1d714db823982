"""The streaming reader (rl_insight/profiler/jsonstream.py) against ``json.loads`` on the
same bytes: any document a Chrome trace can be (an object whose ``traceEvents`` array is
streamed, members before and after it, or a bare array), any spacing, any text, gzip or
not, read through windows of a few characters so every value straddles the seams, gives
the same values in the same order; every document cut short is refused, never read as a
shorter one."""

from __future__ import annotations

import gzip
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_insight.profiler import jsonstream
from tests.conftest import examples
from tests.test_profiler_jsonstream import parts  # items() through a window of `chunk`

LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=12)
KEYS = st.text(max_size=6).filter(lambda k: k != "traceEvents")


@st.composite
def documents(draw) -> tuple[object, list]:
    """(the document, the parts items() must give)."""
    events = draw(st.lists(VALUES, max_size=8))
    if draw(st.booleans()):
        return events, [(None, e) for e in events]
    before = draw(st.dictionaries(KEYS, VALUES, max_size=3))
    after = draw(st.dictionaries(KEYS, VALUES, max_size=3).filter(
        lambda d: not set(d) & set(before)))
    doc = {**before, "traceEvents": events, **after}
    return doc, [*before.items(), *(("traceEvents", e) for e in events), *after.items()]


def dumps(doc: object, indent: int | None, ascii_only: bool) -> str:
    return json.dumps(doc, indent=indent, ensure_ascii=ascii_only)


@settings(max_examples=examples(300), deadline=None)
@given(doc=documents(), chunk=st.integers(1, 64), indent=st.sampled_from([None, 0, 2]),
       ascii_only=st.booleans())
def test_the_stream_reads_what_json_loads_reads(doc, chunk, indent, ascii_only):
    value, want = doc
    text = dumps(value, indent, ascii_only)
    assert json.loads(text) == value  # the reference reads it so
    assert parts(text, chunk) == want


@settings(max_examples=examples(150), deadline=None)
@given(doc=documents(), chunk=st.integers(1, 64), cut=st.floats(0, 1, exclude_max=True))
def test_a_document_cut_short_is_refused(doc, chunk, cut):
    text = dumps(doc[0], None, True)
    short = text[:int(len(text) * cut)]
    try:
        parts(short, chunk)
    except jsonstream.BadJson:
        return
    raise AssertionError(f"{short!r} was read as a whole document")


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents(), packed=st.booleans())
def test_gzip_or_not_by_the_bytes_as_json_loads_reads_them(tmp_path, doc, packed):
    value, want = doc
    raw = json.dumps(value, ensure_ascii=False).encode()
    path = tmp_path / "trace.json"  # the name says nothing of gzip
    path.write_bytes(gzip.compress(raw) if packed else raw)
    old = jsonstream.CHUNK
    jsonstream.CHUNK = 5
    try:
        with jsonstream.open_text(path) as f:
            assert list(jsonstream.items(f)) == want
    finally:
        jsonstream.CHUNK = old
