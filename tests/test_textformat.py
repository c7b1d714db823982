"""The fast text-format reader against prometheus_client's parser: the same families
for every body, plain or not (hypothesis draws both kinds)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from rl_insight.server.ingest import textformat
from tests.conftest import examples

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
LABELS = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True)
VALUES = st.one_of(st.integers(-10**6, 10**6).map(str),
                   st.floats(allow_nan=False, width=32).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e3", "0.5", "1_0", "x"]))
LABEL_VALUES = st.one_of(st.text(st.characters(blacklist_characters='"\\\n'), max_size=8),
                         st.sampled_from(['a\\"b', "c\\\\d", "e\\nf"]))  # escapes: slow path


@st.composite
def bodies(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        name = draw(NAMES)
        typ = draw(st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped",
                                    None]))
        if draw(st.booleans()):
            lines.append(f"# HELP {name} {draw(st.text(max_size=10))}".replace("\n", " "))
        if typ:
            lines.append(f"# TYPE {name} {typ}")
        for _ in range(draw(st.integers(0, 4))):
            suffix = draw(st.sampled_from(["", "_total", "_bucket", "_sum", "_count", "_x"]))
            pairs = draw(st.dictionaries(LABELS, LABEL_VALUES, max_size=3))
            labels = ",".join(f'{k}="{v}"' for k, v in pairs.items())
            sep = draw(st.sampled_from([" ", "\t", "  "]))
            ts = draw(st.sampled_from(["", "", " 1700000000000"]))
            lines.append(f"{name}{suffix}{{{labels}}}{sep}{draw(VALUES)}{ts}"
                         if labels or draw(st.booleans()) else
                         f"{name}{suffix}{sep}{draw(VALUES)}{ts}")
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from(["", "# a comment", "#", "  "])))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


def outcome(fn, text):
    try:
        return [(m.name, m.type, m.documentation,
                 [(s.name, s.labels, repr(s.value), s.timestamp) for s in m.samples])
                for m in fn(text)]
    except Exception as exc:  # both must refuse the same bodies
        return ("error", type(exc).__name__)


@settings(max_examples=examples(300), deadline=None)
@given(bodies())
def test_the_fast_reader_equals_prometheus_clients_parser(text):
    library = outcome(lambda t: list(text_string_to_metric_families(t)), text)
    fast = outcome(textformat.parse, text)
    if isinstance(library, tuple):
        assert isinstance(fast, tuple), (text, fast)
    else:
        assert fast == library, text


def test_a_lane_push_takes_the_fast_path():
    """What lane actors and the hub push is plain: it never needs the library."""
    body = ('# HELP rl_insight_monitor_lane_state 1 while in the state\n'
            '# TYPE rl_insight_monitor_lane_state gauge\n'
            'rl_insight_monitor_lane_state{state_lane_id="rank_0",state_name="x"} 1.0\n'
            '# TYPE rl_insight_monitor_state_duration_seconds histogram\n'
            'rl_insight_monitor_state_duration_seconds_bucket{le="+Inf"} 3\n'
            'rl_insight_monitor_state_duration_seconds_count 3\n'
            'rl_insight_monitor_state_duration_seconds_sum 1.5\n')
    assert len(list(textformat._plain(body))) == 2
