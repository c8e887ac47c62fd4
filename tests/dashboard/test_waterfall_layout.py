"""The waterfall's geometry (pure): bars on one axis, whatever the timings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dashboard.views.waterfall import MIN_BAR, WIDTH, Bar, lay_out


def bar(seq: int, sent: float, first: float | None, end: float | None, ticks=()) -> Bar:
    return Bar(
        seq=seq,
        method="tools/call",
        name=None,
        direction="c2s",
        outcome="ok" if end is not None else "pending",
        outcome_label="ok",
        style="ok",
        sent=sent,
        first=first,
        end=end,
        latency_ms=(end - sent) * 1000 if end is not None else None,
        wait_ms=(first - sent) * 1000 if first is not None else None,
        response_seq=None,
        chain=None,
        round=0,
        ticks=[{"seq": 100 + i, "ts": t} for i, t in enumerate(ticks)],
    )


def test_bars_share_one_axis():
    a = bar(1, 10.0, 10.5, 11.0)
    b = bar(3, 11.0, 11.2, 14.0, ticks=[11.2, 12.0])
    axis = lay_out([a, b])
    assert axis["start"] == 10.0 and axis["end"] == 14.0 and axis["span_ms"] == 4000
    assert (a.x, a.w, a.wait_w) == (0, 250, 125)
    assert (b.x, b.w) == (250, 750) and b.wait_w == 50
    assert [t["x"] for t in b.ticks] == [300, 500]
    assert "answered after 3000 ms" in b.title and "2 notifications" in b.title
    assert [t["label"] for t in axis["ticks"]][-1] == "4000 ms"


def test_an_unanswered_request_runs_to_the_sessions_end():
    a = bar(1, 10.0, 10.1, 10.2)
    b = bar(3, 10.2, None, None)
    lay_out([a, b], until=12.0)
    assert b.x + b.w == WIDTH and b.wait_w == b.w and "no answer" in b.title


@given(
    st.lists(
        st.tuples(
            st.floats(0, 1e6, allow_nan=False),
            st.floats(0, 1e4, allow_nan=False),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_every_bar_is_on_the_axis_and_visible(spec):
    bars = [
        bar(i, sent, sent + d / 2 if answered else None, sent + d if answered else None)
        for i, (sent, d, answered) in enumerate(spec)
    ]
    lay_out(bars, until=max(s for s, _d, _a in spec) + 1)
    for b in bars:
        assert 0 <= b.x <= WIDTH - MIN_BAR
        assert b.w >= MIN_BAR and b.x + b.w <= WIDTH + MIN_BAR
        assert 0 <= b.wait_w <= b.w


def test_the_axis_is_the_sessions_span_whatever_the_page():
    # two pages of one session (10 s to 20 s): each bar lands at the same place on both
    page1 = [bar(1, 11.0, 11.5, 12.0)]
    page2 = [bar(3, 15.0, 15.5, 16.0)]
    for page in (page1, page2):
        axis = lay_out(page, since=10.0, until=20.0)
        assert (axis["start"], axis["end"], axis["span_ms"]) == (10.0, 20.0, 10000)
    assert (page1[0].x, page1[0].w) == (100, 100)
    assert (page2[0].x, page2[0].w) == (500, 100) and "sent at +5000 ms" in page2[0].title
    # a bar outside the recorded span (clock skew) widens the axis rather than leaving it
    late = [bar(5, 19.0, None, 21.0)]
    assert lay_out(late, since=10.0, until=20.0)["end"] == 21.0 and late[0].x + late[0].w == WIDTH


def test_mrtr_rounds_are_joined():
    first = bar(1, 10.0, 10.1, 10.2)
    other = bar(3, 10.3, 10.35, 10.4)
    second = bar(5, 10.6, 10.7, 11.0)
    first.chain = second.chain = 0
    lay_out([first, other, second])
    assert first.join_x is None and other.join_x is None
    assert second.join_x == first.x + first.w and second.join_x <= second.x
