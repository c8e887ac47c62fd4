"""The pairing's bounded tables forget their oldest entry in constant time.

Issue 24: ``check --recompute`` on a long session spent seconds in the pairing's "remember the
last N" tables (request ids, answered requests, tokens, POSTs): a plain ``dict`` whose first
entry was deleted with ``del table[next(iter(table))]`` leaves dummy slots that every later
``next(iter(...))`` walks past, so a full table of 50,000 request ids cost O(50,000) per new
request. Here: an insert into a full table of 50,000 costs about what one into a full table of
500 does (the plain dict took ~8× as long for 20,000 inserts), and the oldest entry is the one forgotten.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.model import SessionFacts
from mcp_proxy.bounded import remember

EVICTIONS = 20_000


def _evict_cost(table: Any, limit: int) -> float:
    """CPU seconds for EVICTIONS inserts into ``table`` once it holds ``limit`` entries."""
    for i in range(limit):
        remember(table, ("c2s", str(i)), None, limit)
    start = time.process_time()
    for i in range(limit, limit + EVICTIONS):
        remember(table, ("c2s", str(i)), None, limit)
    return time.process_time() - start


def test_pairing_tables_forget_the_oldest_in_constant_time() -> None:
    p = Pairing(SessionFacts())
    for table in (p.ever, p.done, p.done_tokens, p.by_http):
        big = min(_evict_cost(type(table)(), 50_000) for _ in range(2))
        small = min(_evict_cost(type(table)(), 500) for _ in range(2))
        assert big < 4 * small + 0.01, (type(table), big, small)


def test_remember_forgets_the_oldest_entry() -> None:
    table: OrderedDict[str, int] = OrderedDict()
    for i in range(5):
        remember(table, str(i), i, 3)
    assert list(table) == ["2", "3", "4"]
    remember(table, "2", 20, 3)  # a known key keeps its place and takes the new value
    assert list(table.items()) == [("2", 20), ("3", 3), ("4", 4)]
    remember(table, "5", 5, 3)
    assert list(table) == ["3", "4", "5"]


def test_request_ids_are_kept_only_where_a_finding_reads_them() -> None:
    """``exchange.id_reused`` is an initialize-era rule: a 2026-07-28 session's pairing keeps
    no table of every request id (50,000 of them cost ``check --recompute`` ~1 µs a request
    and 30 MB on a million frames); an initialize-era one still finds the reuse."""
    from mcp_proxy.analysis.facts import decode, session_facts
    from mcp_proxy.analysis.model import FindingSink
    from mcp_proxy.testing.factories import Wire, envelope

    modern = Wire.modern()
    old = Wire.initialized()
    for w in (modern, old):
        for i in range(10, 20):
            w.request("tools/call", i, {"name": "t", "_meta": envelope()})
            w.result(i, {"content": [], "resultType": "complete"})
        w.request("tools/call", 10, {"name": "t", "_meta": envelope()})  # an id used before
        w.result(10, {"content": [], "resultType": "complete"})
    found = {}
    for label, w in (("modern", modern), ("initialize", old)):
        msgs = decode(w.frames)
        sink = FindingSink()
        p = Pairing(session_facts(msgs, w.session), sink=sink, keep=False, light=False)
        p.feed_many(msgs)
        p.finish()
        found[label] = (len(p.ever), [f.code for f in sink.result()].count("exchange.id_reused"))
    assert found["modern"] == (0, 0)
    assert found["initialize"][0] > 10 and found["initialize"][1] == 1
