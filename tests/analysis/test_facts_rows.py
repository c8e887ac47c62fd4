"""The handshake pass fetches only the frames it reads (``store.stream.FACTS_ROWS``).

``check --recompute`` (and ``show -x``, the dashboard's stale findings, the recorder's settle)
streams a session twice; the first pass reads the handshake facts, which depend on requests,
their answers, notifications/initialized and HTTP/SSE frames only. Issue 24: that pass fetched
every frame of the session (half of a busy session's frames are notifications it never reads);
it now fetches the frames it reads plus the session's first and last frame (their ``ts`` is the
session's span), on both dialects.
"""

from __future__ import annotations

import pytest

from mcp_proxy.store.stream import FACTS_COLUMNS, FACTS_ROWS, shaped_pages
from mcp_proxy.testing.factories import Wire

pytestmark = pytest.mark.both_dialects


def test_the_facts_pass_reads_only_its_frames_and_the_session_span(db_url: str) -> None:
    w = Wire()
    w.stderr("starting")  # the first frame: read for its time only
    w.request("initialize", 1, {"protocolVersion": "2025-11-25", "capabilities": {}})
    w.result(1, {"protocolVersion": "2025-11-25", "capabilities": {"logging": {}}})
    w.notify("notifications/initialized")
    for i in range(2, 40):
        w.request("tools/call", i, {"name": "t", "arguments": {}})
        w.notify("notifications/message", {"level": "info", "data": i}, direction="s2c")
        w.notify("notifications/progress", {"progressToken": i, "progress": 1}, direction="s2c")
        w.result(i, {"content": []})
    w.stderr("bye")  # the last frame
    sid = w.record(db_url)

    _shapes, every = shaped_pages(db_url, sid, FACTS_COLUMNS, batch=7)
    all_rows = [r for rows in every for r in rows]
    shapes, pages = shaped_pages(db_url, sid, FACTS_COLUMNS, batch=7, rows=FACTS_ROWS)
    read = [r for rows in pages for r in rows]

    kinds = {r[0]: shapes(r[3])[2] for r in read}
    methods = [shapes(r[3])[3] for r in read]
    assert len(all_rows) == 4 + 38 * 4 + 1
    # requests, answers, notifications/initialized, and the first and last frames
    assert len(read) == 2 + 1 + 38 * 2 + 2
    assert read[0] == all_rows[0] and read[-1] == all_rows[-1]
    assert "notifications/message" not in methods and "notifications/progress" not in methods
    assert "notifications/initialized" in methods
    assert [r[0] for r in read] == sorted(kinds)
    assert read == [r for r in all_rows if r[0] in kinds]  # the same tuples, in seq order
