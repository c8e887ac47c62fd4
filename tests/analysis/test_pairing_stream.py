"""The pairing gives the same exchanges and findings however its messages arrive.

:class:`mcp_proxy.analysis.exchanges.Pairing` handles a message once everything its look-ahead
may reach (the reorder window) is in. Whether the session is handed over at once, in slices, or
one message at a time (a stream from the store) must not change a single pairing decision, on
any session — including clocks that run backwards across directions by up to past the window, and
a look-ahead small enough to be reached.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_proxy.analysis import exchanges, reorder
from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.facts import decode, session_facts
from mcp_proxy.analysis.model import FindingSink
from mcp_proxy.testing.factories import Wire

OPS = st.lists(
    st.tuples(
        st.sampled_from(["call", "answer", "error", "progress", "cancel", "log", "late", "tool"]),
        st.integers(0, 6),  # which id / token
        st.integers(-150, 150),  # clock jitter in ms, around the 100 ms window
    ),
    min_size=1,
    max_size=60,
)


def _session(ops: list[tuple[str, int, int]], modern: bool) -> Wire:
    w = Wire.modern() if modern else Wire()
    if not modern:
        w.handshake()
    start = len(w.frames)
    for op, k, _ in ops:
        i = 100 + k
        if op == "call":
            w.request("tools/call", i, {"name": f"t{k}", "_meta": {"progressToken": k}})
        elif op == "answer":
            w.result(i, {"content": []})
        elif op == "tool":
            w.result(i, {"content": [], "isError": True})
        elif op == "error":
            w.error(i, -32602, "no")
        elif op == "progress":
            w.progress(k, 1)
        elif op == "cancel":
            w.notify("notifications/cancelled", {"requestId": i})
        elif op == "log":
            w.log("x")
        else:
            w.request("ping", 500 + k, {}, direction="s2c")
    for row, (_, _, jitter) in zip(w.frames[start:], ops, strict=True):
        row["mono_ns"] += jitter * 1_000_000
    return w.end()


def _view(w: Wire, how: str) -> Any:
    msgs = decode(w.frames)
    facts = session_facts(msgs, w.session)
    sink = FindingSink()
    p = Pairing(facts, {}, sink)
    if how == "whole":
        p.feed_many(msgs)
    elif how == "one":
        for m in msgs:
            p.feed(m)
    else:
        rng = random.Random(len(msgs))
        i = 0
        while i < len(msgs):
            n = rng.randint(1, 7)
            p.feed_many(msgs[i : i + n])
            i += n
    paired = p.finish()
    return (
        [
            (
                e.index,
                e.method,
                e.msg_id,
                e.request_seq,
                e.response_seq,
                str(e.outcome),
                e.progress_seqs,
                e.log_seqs,
                e.other_seqs,
                e.cancel_seq,
                e.chain,
                e.parent,
            )
            for e in paired.exchanges
        ],
        [(f.code, f.title, f.frame_seqs) for f in sink.result()],
        [m.seq for m in paired.orphan_errors],
        paired.unattached_logs,
    )


@pytest.mark.parametrize("lookahead", [3, reorder.REORDER_LOOKAHEAD])
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, modern=st.booleans())
def test_the_same_pairing_whole_sliced_or_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch, lookahead: int, ops: list[tuple[str, int, int]], modern: bool
) -> None:
    monkeypatch.setattr(reorder, "REORDER_LOOKAHEAD", lookahead)
    monkeypatch.setattr(exchanges, "REORDER_LOOKAHEAD", lookahead)
    w = _session(ops, modern)
    whole = _view(w, "whole")
    assert _view(w, "one") == whole
    assert _view(w, "sliced") == whole
