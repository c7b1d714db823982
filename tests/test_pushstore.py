"""Pushed groups: grouping keys, Pushgateway semantics, validation, limits, persistence."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_insight.config import PushSettings
from rl_insight.server.ingest.grouping import PushError, parse_grouping_key
from rl_insight.server.ingest.pushexposition import render, render_blocks, split_blocks
from rl_insight.server.ingest.pushfamilies import LABELS
from rl_insight.server.ingest.pushshape import Shape
from rl_insight.server.ingest.pushstore import PushStore
from rl_insight.server.ingest.pushtext import parse_body
from rl_insight.server.ingest.store import Store
from tests.conftest import examples
from tests.test_textformat import NAMES, VALUES, bodies


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
    ("# TYPE kept counter\nkept 1\n", 409, "one name, one type"),  # conflicts with stored
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


@settings(max_examples=examples(250), deadline=None)
@given(bodies())
def test_a_groups_blocks_are_what_generate_latest_writes(text):
    """The exposition a group caches (render_blocks) is prometheus_client's, line for
    line, for every body a push accepts."""
    try:  # a body arrives as bytes the route decodes as strict UTF-8 (server/httpio.py):
        text.encode()  # a lone surrogate never reaches parse_body
    except UnicodeEncodeError:
        return
    try:
        families = parse_body(text, {"job": "j", "project": "p"})
    except PushError:
        return
    assert render_blocks(families.values()) == split_blocks(render(families.values())
                                                            .decode())


def _revalued(text: str, values: list[str]) -> str:
    """The body with each sample line's last token replaced, in order (cycling)."""
    out, i = [], 0
    for line in text.split("\n"):
        body = line.strip()
        if body and body[0] != "#" and " " in body:
            line = body[:body.rfind(" ") + 1] + values[i % len(values)]
            i += 1
        out.append(line)
    return "\n".join(out)


NUMBERS = st.one_of(st.integers(-10**6, 10**6).map(str), st.floats(width=32).map(repr),
                    st.sampled_from(["NaN", "+Inf", "-Inf", "1e3", "0.5", "0"]))


@st.composite
def typed_bodies(draw) -> str:
    """Bodies as collectors write them (typed families, plain label values, one space
    before each value): the bodies whose shape is kept."""
    lines, used = [], set()
    for _ in range(draw(st.integers(1, 5))):
        name = draw(NAMES.filter(lambda n: n not in used))
        used.add(name)
        typ = draw(st.sampled_from(["counter", "gauge", "histogram", "summary"]))
        shown = name + "_total" if typ == "counter" else name
        lines += [f"# HELP {shown} {draw(st.text('ab c', max_size=6))}", f"# TYPE {shown} {typ}"]
        suffixes = {"counter": [""], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"],
                    "summary": ["_sum", "_count"]}[typ]
        for i in range(draw(st.integers(1, 4))):
            sample = shown + draw(st.sampled_from(suffixes))
            label = f'{{n="{i}",v="{draw(st.text("ab x-", max_size=4))}"}}' \
                if draw(st.booleans()) or i else ""
            lines.append(f"{sample}{label} {draw(NUMBERS)}")
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(bodies(), typed_bodies()), st.lists(VALUES, min_size=2, max_size=5),
       st.booleans())
def test_a_repeated_shape_reads_as_a_full_parse(tmp_path_factory, text, values, replace):
    """A second push of the same shape (only its values read, pushshape) leaves the
    group, its exposition and its stored text as a store that parsed it in full."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return
    again = _revalued(text, values)
    grouping = {"job": "j", "instance": "i"}
    path = tmp_path_factory.mktemp("shape")
    warm, cold = PushStore(PushSettings(), Store(path / "w")), \
        PushStore(PushSettings(), Store(path / "c"))
    cold._shapes = _Forgetful()  # parses every body in full
    try:
        warm.push(grouping, text, replace=True)
    except PushError:
        return
    outcomes = []
    for st_ in (warm, cold):
        try:
            if st_ is cold:
                st_.push(grouping, text, replace=True)
            st_.push(grouping, again, replace=replace)
            outcomes.append(None)
        except PushError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    w, c = warm.groups[(("instance", "i"), ("job", "j"))], \
        cold.groups[(("instance", "i"), ("job", "j"))]
    assert w.blocks() == c.blocks() == render_blocks(c.families.values())
    assert w.text() == c.text()
    assert series(warm) == series(cold) or _nan_equal(series(warm), series(cold))
    assert {k: (f.type, f.documentation) for k, f in w.families.items()} == \
        {k: (f.type, f.documentation) for k, f in c.families.items()}


def test_a_repeated_shape_is_read_by_its_values(tmp_path, monkeypatch):
    """The second push of a shape takes the values path (it fails without it), and a
    new shape is parsed in full again."""
    st_ = PushStore(PushSettings(), Store(tmp_path))
    body = "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"2\"} 2\n# TYPE c_total counter\nc_total 3\n"
    st_.push({"job": "j"}, body, replace=True)
    assert st_._shapes, "a plain body's shape is kept"
    key = (("job", "j"),)
    calls = []
    fill = Shape.fill
    monkeypatch.setattr(Shape, "fill", lambda *a: calls.append(1) or fill(*a))
    st_.push({"job": "j"}, body.replace(" 2\n", " 5\n"), replace=True)
    assert calls == [1]
    assert series(st_)[("a", (("instance", ""), ("job", "j"), ("x", "2")))] == 5.0
    st_.push({"job": "j"}, "# TYPE b gauge\nb 1\n", replace=False)  # a POST, a new shape
    assert calls == [1] and st_._shapes[key].text == "# TYPE b gauge\nb"
    text = st_.groups[key].text()
    assert 'b{instance="",job="j"} 1.0\n' in text and 'a{instance="",job="j",x="2"} 5.0' in text
    st_.delete({"job": "j"})
    assert key not in st_._shapes


class _Forgetful(dict):
    def __setitem__(self, key, value) -> None:
        pass


def _nan_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(x == y or (x != x and y != y)
                                        for x, y in zip(a.values(), b.values(), strict=True))


LANE = {"job": "rl_insight_lanes", "project": "p", "experiment_name": "e",
        "lane_actor": "rl_insight_lane_node_1"}


def lane_states(text: bytes) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(x.labels["state_lane_id"], x.labels["state_name"]): x.value
            for fam in text_string_to_metric_families(text.decode())
            if fam.name == "rl_insight_monitor_lane_state" for x in fam.samples}


def state_push(**states: float) -> str:
    """A lane actor's push: ``rank_0__update=1.0`` is rank_0 in ``update``."""
    lines = ["# TYPE rl_insight_monitor_lane_state gauge"]
    for key, value in states.items():
        lane, state = key.split("__")
        lines.append(f'rl_insight_monitor_lane_state{{state_lane_id="{lane}",'
                     f'state_name="{state}"}} {value}')
    return "\n".join(lines) + "\n"


def test_lane_states_are_served_as_pushed_one_per_lane(tmp_path):
    """A lane actor pushes the state each lane holds (its seconds per state carry the
    short ones): the server serves each push as it came, so no scrape sees a lane in two
    states at once (it once held an ended state's 1 for the next scrape, beside the next)."""
    st = PushStore(PushSettings(), Store(tmp_path))
    st.push(LANE, state_push(rank_0__update=1, rank_1__update=1), replace=False)
    assert lane_states(st.exposition([])) == {("rank_0", "update"): 1,
                                              ("rank_1", "update"): 1}
    st.push(LANE, state_push(rank_0__update=0, rank_0__gen=1, rank_1__update=1),
            replace=False)
    st.push(LANE, state_push(rank_0__update=0, rank_0__gen=0, rank_0__sync=1,
                             rank_1__update=0), replace=False)
    assert lane_states(st.exposition([])) == {("rank_0", "update"): 0, ("rank_0", "gen"): 0,
                                              ("rank_0", "sync"): 1, ("rank_1", "update"): 0}
    st.delete(LANE)
    assert lane_states(st.exposition([])) == {}


def test_held_groups_leave_the_garbage_collector_little_to_walk(tmp_path):
    """The server holds every group's samples until the next push replaces them, and a
    full collection walks every object the collector tracks: held as Metric and Sample
    objects, each sample was two (about 90,000 for 800 lane groups, 30-90 ms of every
    request waiting every 10 s, bench/registrations.py). Held as tuples (pushfamilies),
    a group is a few objects whatever its size, pushed in full or by its shape."""
    import gc

    st_ = PushStore(PushSettings(), Store(tmp_path))
    body = "".join(f"# TYPE m{f} gauge\n" + "".join(f'm{f}{{lane="{k}"}} {k}\n'
                                                  for k in range(10))
                   for f in range(5))  # 50 samples

    def tracked() -> int:
        gc.collect()
        return len(gc.get_objects())

    for i in range(5):  # warm: what the first group of a kind brings along
        st_.push({"job": "w", "instance": str(i)}, body, replace=True)
    before = tracked()
    for i in range(200):
        st_.push({"job": "j", "instance": str(i)}, body, replace=True)  # in full
        st_.push({"job": "j", "instance": str(i)}, body.replace(" 1\n", " 2\n"),
                 replace=True)  # by its shape
    per_group = (tracked() - before) / 200
    assert per_group < 25, per_group  # 50 samples: over 100 as Metric and Sample objects
    assert st_.total_series() == 205 * 50
    # a label pair the samples of many groups have is held once (pushfamilies.label_pairs)
    a, b = (st_.groups[(("instance", i), ("job", "j"))].packed["m0"][LABELS][3]
            for i in ("1", "2"))
    assert a[:2] == b[:2] and a[0] is b[0] and a[1] is b[1], (a, b)
    assert series(st_)[("m4", (("instance", "7"), ("job", "j"), ("lane", "1")))] == 2.0


def test_the_servers_own_families_are_exposed_as_generate_latest_writes_them(tmp_path):
    """/metrics writes the server's own families as a push's (render_blocks), not by
    generate_latest: the same samples, each name once, for every kind the server holds
    (the registry's counters and histograms with ``_created``, its collectors' families,
    one name from two collectors, labels in any order, values that need escaping)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    Counter("own_requests", "Requests.", ["route", "code"], registry=registry) \
        .labels("/x", "200").inc(3)
    Histogram("own_seconds", "Seconds.", registry=registry).observe(0.3)
    Gauge("own_up", "Up.", registry=registry).set(1)

    class Lanes:
        def __init__(self, run: str) -> None:
            self.run = run

        def collect(self):
            g = GaugeMetricFamily("own_lane_state", 'A "state"\nper lane.',
                                  labels=["state_lane_id", "experiment_name", "key"])
            g.add_metric(["rank_0", self.run, 'a"b\\c\nd'], 1.0)
            h = HistogramMetricFamily("own_state_seconds", "Durations.",
                                      labels=["state_name", "experiment_name"])
            h.add_metric(["gen", self.run], [("0.5", 1.0), ("+Inf", 2.0)], sum_value=1.5)
            yield g
            yield h

    registry.register(Lanes("e1"))
    registry.register(Lanes("e2"))

    def samples(text: str) -> set:
        return {(s.name, frozenset(s.labels.items()), s.value)
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    store = PushStore(PushSettings(), Store(tmp_path))
    got = store.exposition(registry.collect()).decode()
    want = render(registry.collect()).decode()
    assert samples(got) == samples(want) and len(samples(got)) > 12
    # each name's HELP and TYPE once, the two collectors' samples joined under them
    assert got.count("# HELP own_lane_state ") == 1
    assert got.count("# TYPE own_state_seconds ") == 1
