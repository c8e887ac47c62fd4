"""The check families' bounded tables forget their oldest entry in constant time.

Issue 24: the pairing's "remember the last N" tables moved to ``OrderedDict`` and
:func:`mcp_proxy.bounded.remember`; the check families (lists and cursors, HTTP headers' tool
schemas, skills, tasks) still evicted with ``del table[next(iter(table))]`` on a plain ``dict``,
which leaves dummy slots every later ``next(iter(...))`` walks past (O(limit) per insert into a
full table). Here: each family's table is an ordered table that ``remember`` keeps in constant
time (a plain ``dict`` fails: it has no ``popitem(last=False)``), and the families forget the
oldest entry first, as before.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from mcp_proxy.analysis.checks import HttpHeaders, Lists
from mcp_proxy.analysis.model import FindingSink, SessionFacts
from mcp_proxy.analysis.skills import Skills
from mcp_proxy.analysis.tasks import Tasks
from mcp_proxy.bounded import remember
from mcp_proxy.limits import SKILL_FILES_KEPT

EVICTIONS = 20_000


def _evict_cost(table: Any, limit: int) -> float:
    """CPU seconds for EVICTIONS inserts into ``table`` once it holds ``limit`` entries."""
    for i in range(limit):
        remember(table, ("k", str(i)), None, limit)
    start = time.process_time()
    for i in range(limit, limit + EVICTIONS):
        remember(table, ("k", str(i)), None, limit)
    return time.process_time() - start


def _tables() -> list[tuple[str, Any]]:
    facts, sink = SessionFacts(), FindingSink()
    lists = Lists(facts, sink)
    headers = HttpHeaders(facts, {1: {"id": 1}}, sink)
    skills = Skills(sink)
    tasks = Tasks(facts, sink)
    return [
        ("Lists.walk_of", lists.walk_of),
        ("Lists.seen", lists.seen),
        ("Lists.reported_dup", lists.reported_dup),
        ("Lists.reported_schema", lists.reported_schema),
        ("HttpHeaders.schemas", headers.schemas),
        ("Skills.listed", skills.listed),
        ("Skills.reported", skills.reported),
        ("Tasks.by_id", tasks.by_id),
        ("Tasks.listed", tasks.listed),
    ]


def test_family_tables_forget_the_oldest_in_constant_time() -> None:
    for name, table in _tables():
        assert isinstance(table, OrderedDict), name
        big = min(_evict_cost(type(table)(), 50_000) for _ in range(2))
        small = min(_evict_cost(type(table)(), 500) for _ in range(2))
        assert big < 4 * small + 0.01, (name, big, small)


def _skill_file(i: int) -> dict[str, Any]:
    return {"uri": f"skill://s/{i}", "digest": "sha256:" + "0" * 64, "size": i}


def test_skills_forget_the_oldest_listed_file_first() -> None:
    skills = Skills(FindingSink())
    for i in range(SKILL_FILES_KEPT + 3):
        skills.remember(_skill_file(i), i)
    assert len(skills.listed) == SKILL_FILES_KEPT
    assert next(iter(skills.listed)) == "skill://s/3"
    skills.remember(_skill_file(3), 99)  # listed again: now the newest, kept past the next
    skills.remember(_skill_file(SKILL_FILES_KEPT + 3), 100)
    assert "skill://s/3" in skills.listed and "skill://s/4" not in skills.listed
