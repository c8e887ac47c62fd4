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
