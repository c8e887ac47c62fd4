"""The lean read of a frame's body (``store/stream.py`` ``RAW_READ``, what the handshake pass
reads): a body is fetched only for the kinds an outcome depends on (request, response, error,
batch, the ``inject`` channel, notifications/cancelled, a task's status notifications); the
bodies of the notifications that are only counted stay on disk.
"""

from __future__ import annotations

import pytest

from mcp_proxy.store.stream import RAW_READ, shaped_pages
from mcp_proxy.testing.factories import Wire, envelope

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
