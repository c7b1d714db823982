"""Pushed groups: grouping keys, Pushgateway semantics, validation, limits, persistence."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings

from rl_insight.config import PushSettings
from rl_insight.server.pushstore import (
    PushError,
    PushStore,
    parse_body,
    parse_grouping_key,
    render,
    render_blocks,
    split_blocks,
)
from rl_insight.server.store import Store
from tests.test_textformat import bodies


def b64(s: str) -> str:
    return base64.urlsafe_b64encode(s.encode()).decode()


def series(store: PushStore) -> dict[tuple, float]:
    out = {}
    for fam in store.families():
        for s in fam.samples:
            if not s.name.startswith("push_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_grouping_keys():
    assert parse_grouping_key("job/j1/inst/i1") == {"job": "j1", "inst": "i1"}
    assert parse_grouping_key(f"job@base64/{b64('a/b')}/path@base64/{b64('/x/y')}") == {
        "job": "a/b", "path": "/x/y"}
    assert parse_grouping_key("job/j/empty@base64/=") == {"job": "j", "empty": ""}
    for bad, msg in [("job/j/lonely", "odd number"), ("job/j/bad-label/x", "improper label"),
                     ("job/j/__x/1", "improper label"), ("nojob/x", "must be /metrics/job"),
                     ("job/j/a/1/a/2", "appears twice"), ("job/j/job/x", "cannot repeat"),
                     ("job/j/v@base64/!!!", "invalid base64")]:
        with pytest.raises(PushError, match=msg):
            parse_grouping_key(bad)


def test_put_replaces_post_merges_grouping_labels_win(tmp_path):
    st = PushStore(PushSettings(), Store(tmp_path))
    key = {"job": "j", "inst": "i1"}
    st.push(key, 'a{x="1",inst="other"} 1\nb 2\n', replace=True)
    assert series(st) == {("a", (("inst", "i1"), ("instance", ""), ("job", "j"), ("x", "1"))): 1,
                          ("b", (("inst", "i1"), ("instance", ""), ("job", "j"))): 2}
    st.push(key, "b 3\nc 4\n", replace=False)  # POST: b replaced, a kept, c added
    assert {k[0]: v for k, v in series(st).items()} == {"a": 1, "b": 3, "c": 4}
    st.push(key, "c 5\n", replace=True)  # PUT: only c remains
    assert {k[0]: v for k, v in series(st).items()} == {"c": 5}
    st.push({"job": "j2"}, 'm{instance="a"} 1\n', replace=True)  # pushed instance is kept
    assert ("m", (("instance", "a"), ("job", "j2"))) in series(st)
    assert st.delete(key) and not st.delete(key)
    assert {k[0] for k in series(st)} == {"m"}


@pytest.mark.parametrize("body, status, msg", [
    ("this is not valid\n", 400, "parsing error"),
    ("val-aux/x 1\n", 400, "invalid metric name"),
    ("e 3 1700000000000\n", 400, "timestamp"),
    ("f 1\nf 2\n", 400, "appears twice"),
    ('g{__bad="1"} 1\n', 400, "(?i)invalid label"),
    ("# TYPE kept counter\nkept 1\n", 400, "one name, one type"),
])
def test_bad_pushes_change_nothing(tmp_path, body, status, msg):
    st = PushStore(PushSettings(), Store(tmp_path))
    st.push({"job": "j"}, "# TYPE kept gauge\nkept 7\n", replace=True)
    before = render(st.families())
    version = st.version
    with pytest.raises(PushError, match=msg) as err:
        st.push({"job": "other"}, body, replace=True)
    assert err.value.status == status
    assert st.version == version and len(st.groups) == 1
    assert render(st.families()) == before


def test_series_limits(tmp_path):
    st = PushStore(PushSettings(max_series_per_group=3, max_series_total=5),
                   Store(tmp_path))
    st.push({"job": "a"}, "x 1\ny 1\nz 1\n", replace=True)
    with pytest.raises(PushError, match="max_series_per_group") as e:
        st.push({"job": "a"}, "w 1\n", replace=False)  # POST would make 4
    assert e.value.status == 400
    st.push({"job": "b"}, "x 1\ny 1\n", replace=True)
    with pytest.raises(PushError, match="max_series_total") as e:
        st.push({"job": "c"}, "x 1\n", replace=True)
    assert e.value.status == 429
    st.push({"job": "a"}, "x 2\n", replace=True)  # replacing frees room
    st.push({"job": "c"}, "x 1\n", replace=True)
    assert st.total_series() == 4


def test_reserved_types_and_archived_refusal(tmp_path):
    st = PushStore(PushSettings(), Store(tmp_path),
                   refuse=lambda labels: "archived" if labels.get("project") == "old" else None,
                   reserved=lambda: {"process_cpu_seconds": "counter"})
    with pytest.raises(PushError, match="server exposes it as counter"):
        st.push({"job": "j"}, "process_cpu_seconds 1\n", replace=True)
    with pytest.raises(PushError, match="archived") as e:
        st.push({"job": "j", "project": "old", "experiment_name": "e"}, "x 1\n", replace=True)
    assert e.value.status == 409


def test_persist_and_load_roundtrip(tmp_path):
    st = PushStore(PushSettings(), Store(tmp_path))
    st.push({"job": "j", "project": "p", "experiment_name": "e"},
            '# HELP h help\n# TYPE h histogram\nh_bucket{le="1"} 1\nh_bucket{le="+Inf"} 2\n'
            'h_sum 3\nh_count 2\n', replace=True)
    st.push({"job": "k"}, "g 1\n", replace=True)
    st.persist()
    st.delete({"job": "k"})
    st.persist()
    again = PushStore(PushSettings(), Store(tmp_path))
    assert again.load() == 1
    assert series(again) == series(st)
    assert again.groups[next(iter(again.groups))].push_time == \
        st.groups[next(iter(st.groups))].push_time


def test_expiry_of_finished_and_idle_groups(tmp_path):
    st = PushStore(PushSettings(finished_ttl_s=10, idle_ttl_s=100), Store(tmp_path))
    st.push({"job": "j", "project": "p", "experiment_name": "done"}, "x 1\n", replace=True)
    st.push({"job": "j", "project": "p", "experiment_name": "live"}, "x 1\n", replace=True)
    st.push({"job": "old"}, "x 1\n", replace=True)
    t0 = max(g.push_time for g in st.groups.values())

    def finished(labels):
        return t0 if labels.get("experiment_name") == "done" else None

    assert st.expire(t0 + 5, finished) == 0
    assert st.expire(t0 + 11, finished) == 1
    assert st.expire(t0 + 101, finished) == 2
    assert not st.groups


def test_untyped_series_of_one_name_form_one_family(tmp_path):
    st = PushStore(PushSettings(), Store(tmp_path))
    st.push({"job": "j"}, "".join(f'u{{i="{i}"}} {i}\n' for i in range(5)), replace=True)
    assert len([k for k in series(st) if k[0] == "u"]) == 5
    with pytest.raises(PushError, match="appears twice"):
        st.push({"job": "j"}, 'u{i="1"} 1\nu{i="1"} 2\n', replace=True)


def test_total_series_follows_every_change(tmp_path):
    """The total is kept as groups change (it is read on every push), never recounted."""
    st = PushStore(PushSettings(idle_ttl_s=100), Store(tmp_path))

    def recount(s: PushStore) -> int:
        return sum(g.series for g in s.groups.values())

    st.push({"job": "a"}, "x 1\ny 1\n", replace=True)
    st.push({"job": "a"}, "z 1\n", replace=False)  # POST merges: 3
    st.push({"job": "b"}, "x 1\n", replace=True)
    assert st.total_series() == recount(st) == 4
    st.push({"job": "a"}, "x 2\n", replace=True)
    st.delete({"job": "b"})
    assert st.total_series() == recount(st) == 1
    st.persist()
    again = PushStore(PushSettings(), Store(tmp_path))
    again.load()
    assert again.total_series() == 1
    assert st.expire(max(g.push_time for g in st.groups.values()) + 101, lambda _: None) == 1
    assert st.total_series() == 0


@settings(max_examples=250, deadline=None)  # the fast tier stays under 60 s
@given(bodies())
def test_a_groups_blocks_are_what_generate_latest_writes(text):
    """The exposition a group caches (render_blocks) is prometheus_client's, line for
    line, for every body a push accepts."""
    try:  # a body arrives as bytes the route decodes as strict UTF-8 (routes/common.py):
        text.encode()  # a lone surrogate never reaches parse_body
    except UnicodeEncodeError:
        return
    try:
        families = parse_body(text, {"job": "j", "project": "p"})
    except PushError:
        return
    assert render_blocks(families.values()) == split_blocks(render(families.values())
                                                            .decode())
