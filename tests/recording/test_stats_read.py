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
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import CASES
from tests.conftest import catalogue_sample

pytestmark = pytest.mark.both_dialects


def busy(modern: bool, *, status: str = "ended", exit_code: int | None = 0) -> Wire:
    """Errors, tool errors, cancellations, progress, logs, stderr and unanswered requests."""
    w = Wire.modern() if modern else Wire()
    if not modern:
        w.handshake()
    for i in range(2, 40):
        meta = envelope(log_level="info") if modern else {}
        meta["progressToken"] = i
        w.request("tools/call", i, {"name": f"tool{i % 3}", "arguments": {"q": i}, "_meta": meta})
        w.progress(i, 1, 2, direction="s2c")
        w.log(f"working on {i}", level="info")
        if i % 7 == 0:
            w.error(i, -32602, "Unknown tool")
        elif i % 13 == 0:
            w.notify("notifications/cancelled", {"requestId": i, "reason": "user"})
        elif i % 17 == 0:
            pass  # never answered
        else:
            w.result(i, {"content": [{"type": "text", "text": "ok"}], "isError": i % 5 == 0})
        if i % 3 == 0:
            w.stderr(f"line {i}")
    w.request("ping", 999, {})
    return w.end(status, exit_code=exit_code)


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


@pytest.mark.corpus  # every catalogue trigger under --full and --only-full; every second by default
def test_stats_of_the_lean_read_are_those_of_the_full_read(db_url: str) -> None:
    wires: list[Any] = [busy(False), busy(True, status="crashed", exit_code=1)]
    wires += [CASES[code][0]() for code in catalogue_sample(sorted(CASES), every=2)]
    sids = [w.record(db_url, name=f"s{i}") for i, w in enumerate(wires)]
    counted = 0
    for sid in sids:
        for by_name in (False, True):
            full = _stats(db_url, sid, SHAPED_FRAME_COLUMNS, by_name=by_name)
            assert _stats(db_url, sid, STATS_COLUMNS, by_name=by_name) == full, sid
        counted += len(json.loads(full))
    assert counted > len(sids)  # the sessions have exchanges to count


def test_the_lean_read_leaves_the_bodies_of_counted_frames_on_disk(db_url: str) -> None:
    w = busy(True)
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
