"""``stats``' lean read (``store/stream.py`` ``STATS_COLUMNS``) gives the numbers of the full one.

``stats`` leaves ``ts``, ``size``, ``complete`` and ``sse_id`` in the database and fetches a
frame's body only for the kinds an outcome depends on (request, response, error, batch, the
``inject`` channel, notifications/cancelled). Whatever it leaves out must change no number:
on busy sessions of both eras (errors, tool errors, cancellations, progress, logs, stderr,
unanswered requests) and on every session of the finding catalogue (MRTR chains, batches,
injected frames, HTTP, SSE), recorded into the store of each dialect.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_proxy.analysis.facts import SHAPED_FRAME_COLUMNS
from mcp_proxy.analysis.stats import StatsPass, sorted_stats
from mcp_proxy.store.stream import NULL, RAW_READ, STATS_COLUMNS, shaped_pages
from tests.analysis.cases import CASES
from tests.analysis.test_stats_stream import _busy

pytestmark = pytest.mark.both_dialects


def _stats(url: str, sid: str, columns: tuple[str, ...], *, by_name: bool) -> str:
    p = StatsPass({"id": sid, "status": "ended"}, [], by_name=by_name)
    shapes, pages = shaped_pages(url, sid, columns, batch=7)
    for rows in pages:
        p.feed_shaped(rows, shapes)
    return json.dumps([s.as_dict() for s in sorted_stats(p.finish())])


def test_the_lean_read_keeps_the_full_reads_positions() -> None:
    assert len(STATS_COLUMNS) == len(SHAPED_FRAME_COLUMNS)
    for lean, full in zip(STATS_COLUMNS, SHAPED_FRAME_COLUMNS, strict=True):
        assert lean in (full, NULL) or (lean, full) == (RAW_READ, "raw")


def test_stats_of_the_lean_read_are_those_of_the_full_read(db_url: str) -> None:
    wires: list[Any] = [_busy(False), _busy(True, status="crashed", exit_code=1)]
    wires += [CASES[code][0]() for code in sorted(CASES)]
    sids = [w.record(db_url, name=f"s{i}") for i, w in enumerate(wires)]
    counted = 0
    for sid in sids:
        for by_name in (False, True):
            full = _stats(db_url, sid, SHAPED_FRAME_COLUMNS, by_name=by_name)
            assert _stats(db_url, sid, STATS_COLUMNS, by_name=by_name) == full, sid
        counted += len(json.loads(full))
    assert counted > len(sids)  # the sessions have exchanges to count


def test_the_lean_read_leaves_the_bodies_of_counted_frames_on_disk(db_url: str) -> None:
    w = _busy(True)
    sid = w.record(db_url, name="busy")
    shapes, pages = shaped_pages(db_url, sid, ("shape", RAW_READ))
    fetched: dict[tuple[str, str | None], set[bool]] = {}
    for rows in pages:
        for shape, raw in rows:
            _d, _ch, kind, method = shapes(shape)
            fetched.setdefault((kind, method), set()).add(raw is not None)
    assert fetched[("request", "tools/call")] == {True}
    assert fetched[("response", None)] == fetched[("error", None)] == {True}
    assert fetched[("notification", "notifications/cancelled")] == {True}
    assert fetched[("notification", "notifications/progress")] == {False}
    assert fetched[("notification", "notifications/message")] == {False}
