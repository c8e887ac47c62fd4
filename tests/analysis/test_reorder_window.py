"""The order repair finds a later request by index, not by scanning the window per message.

A server that reports progress on tokens no request offered (or answers ids nobody sent) made
pairing scan ~100 frames and parse their ``_meta`` per notification: half of ``check``'s time
on such a session. These tests pin both the answer (the repair still works, and still stops at
the window) and the work (each request's ``_meta`` is read a bounded number of times).
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_proxy.analysis.model import Msg
from mcp_proxy.testing.factories import Wire


def _codes(w: Wire) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in w.analyze().findings:
        out[f.code] = out.get(f.code, 0) + 1
    return out


def test_answer_and_progress_recorded_before_their_request_still_pair() -> None:
    w = Wire()
    w.handshake()
    w.result(7, {"content": []})  # stamped a little before the request it answers
    w.progress(7, 1, 2, direction="s2c")
    w.request("tools/call", 7, {"name": "t", "_meta": {"progressToken": 7}})
    w.end()
    a = w.analyze()
    call = next(e for e in a.exchanges if e.method == "tools/call")
    assert call.outcome == "ok"
    assert list(call.progress_seqs) == [call.request_seq - 1]
    codes = {f.code for f in a.findings}
    assert "exchange.unknown_response" not in codes
    assert "notification.progress_unknown" not in codes


def test_a_request_beyond_the_window_is_not_used() -> None:
    w = Wire()
    w.handshake()
    w.result(7, {"content": []})
    w.wait(200)  # past the 100 ms window: the answer came first, really
    w.request("tools/call", 7, {"name": "t"})
    w.end()
    assert "exchange.unknown_response" in _codes(w)


def test_unknown_progress_costs_one_meta_read_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    w = Wire(step_ms=0.5)
    w.handshake()
    n = 3000
    for i in range(2, n):
        w.request("tools/call", i, {"name": "t"})  # offers no progress token
        w.progress(i, 1, direction="s2c")  # … but the server reports progress on one
        w.result(i, {"content": []})
    w.end()
    reads = 0
    meta = Msg.meta

    def counted(self: Msg) -> Any:
        nonlocal reads
        reads += 1
        return meta.__get__(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(Msg, "meta", property(counted))
    codes = _codes(w)
    assert codes.get("notification.progress_unknown")
    # Before: every notification re-read the _meta of the ~65 requests in its window.
    assert reads < 4 * n, reads
