"""The handshake pass fetches only the frames it reads (``store.stream.FACTS_ROWS``).

``check --recompute`` (and ``show -x``, the dashboard's stale findings, the recorder's settle)
streams a session twice; the first pass reads the handshake facts, which depend on the
``initialize`` and ``server/discover`` requests and their answers, notifications/initialized,
batches, HTTP/SSE frames, and the first host request that carries the 2026-07-28 envelope.
Issue 24: that pass fetched every request and answer of the session (half a busy session's
frames, each with its body); it now fetches the handshake's frames plus the session's first and
last frame (their ``ts`` is the session's span), then the host's requests in order only until
the first envelope is settled (``REQUEST_ROWS``), on both dialects. The facts it gives are the
full analysis's, whatever the order of the frames it needs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.facts import FactsBuilder
from mcp_proxy.analysis.model import SessionFacts
from mcp_proxy.store.queries import Store
from mcp_proxy.store.stream import FACTS_COLUMNS, FACTS_ROWS, REQUEST_ROWS, shaped_pages
from mcp_proxy.testing.factories import Wire, envelope

pytestmark = pytest.mark.both_dialects


def _initialize_era(calls: int) -> Wire:
    w = Wire()
    w.stderr("starting")  # the first frame: read for its time only
    w.request("initialize", 1, {"protocolVersion": "2025-11-25", "capabilities": {}})
    w.result(1, {"protocolVersion": "2025-11-25", "capabilities": {"logging": {}}})
    w.notify("notifications/initialized")
    for i in range(2, calls + 2):
        w.request("tools/call", i, {"name": "t", "arguments": {}})
        w.notify("notifications/message", {"level": "info", "data": i}, direction="s2c")
        w.notify("notifications/progress", {"progressToken": i, "progress": 1}, direction="s2c")
        w.result(i, {"content": []})
    w.stderr("bye")  # the last frame
    return w


def test_the_facts_pass_reads_only_the_handshake_and_the_session_span(db_url: str) -> None:
    sid = _initialize_era(38).record(db_url)

    _shapes, every = shaped_pages(db_url, sid, FACTS_COLUMNS, batch=7)
    all_rows = [r for rows in every for r in rows]
    shapes, pages = shaped_pages(db_url, sid, FACTS_COLUMNS, batch=7, rows=FACTS_ROWS)
    read = [r for rows in pages for r in rows]

    methods = [shapes(r[3])[3] for r in read]
    assert len(all_rows) == 4 + 38 * 4 + 1
    # the first frame, initialize, its answer, notifications/initialized, the last frame
    assert [r[0] for r in read] == [1, 2, 3, 4, len(all_rows)]
    assert methods[1:4] == ["initialize", None, "notifications/initialized"]
    assert read == [r for r in all_rows if r[0] in {r[0] for r in read}]  # the same tuples

    _shapes, requests = shaped_pages(db_url, sid, FACTS_COLUMNS, batch=7, rows=REQUEST_ROWS)
    host_requests = [r for rows in requests for r in rows]
    assert [shapes(r[3])[2] for r in host_requests] == ["request"] * 39
    assert {shapes(r[3])[0] for r in host_requests} == {"c2s"}


async def _facts(db_url: str, ref: str) -> tuple[SessionFacts, SessionFacts]:
    """(the full analysis's facts, the handshake pass's) of a stored session."""
    store = await Store.open(db_url)
    try:
        s = await store.resolve_session(ref)
        full = await service.session_analysis(store, s)
        http = await store.http_exchanges(s["id"])
        view = service.session_view(s)
        view["fault_end"] = service.fault_end(await store.recorded_findings(s["id"]))
        bounded = await asyncio.to_thread(service.stream_analysis, db_url, view, http)
        return full.facts, bounded.facts
    finally:
        await store.close()


def _probe_first(w: Wire) -> Wire:
    """Requests without the envelope, then ones with it: the first with it is a late frame,
    and a server/discover after it (also enveloped, among the handshake's frames) must not
    take its place."""
    for i in range(1, 30):
        w.request("tools/call", i, {"name": "t", "arguments": {"protocolVersion": "x"}})
        w.result(i, {"content": []})
    w.request("tools/call", 100, {"name": "t", "_meta": envelope()})
    w.result(100, {"content": [], "resultType": "complete"})
    w.request("server/discover", 101, {"_meta": envelope(version="2099-01-01")})
    w.result(101, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}})
    return w


def _batched_initialize(w: Wire) -> Wire:
    """``initialize`` inside a batch, answered by a plain frame: its answer bears an id no
    stored request row has (the batch's row has none)."""
    w.frame(
        "c2s",
        [
            {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"capabilities": {}}},
            {"jsonrpc": "2.0", "id": 8, "method": "ping"},
        ],
    )
    w.result(8, {})
    w.result(7, {"protocolVersion": "2025-03-26", "capabilities": {"prompts": {}}})
    w.notify("notifications/initialized")
    w.request("prompts/list", 9)
    w.result(9, {"prompts": []})
    return w


def _discover_then_later_answer(w: Wire) -> Wire:
    """An answer bearing server/discover's id that comes before the request (not its answer),
    then the real answer; and a second discover whose answer is the last one."""
    w.result(5, {"capabilities": {"resources": {}}})
    w.request("server/discover", 5, {"_meta": envelope()})
    w.result(5, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}})
    for i in range(10, 20):
        w.request("tools/call", i, {"name": "t", "_meta": envelope()})
        w.result(i, {"content": [], "resultType": "complete"})
    w.request("server/discover", 6, {"_meta": envelope()})
    w.result(6, {"supportedVersions": ["2026-07-28"], "capabilities": {"prompts": {}}})
    return w


@pytest.mark.parametrize(
    "build",
    [
        lambda: _initialize_era(5),
        lambda: _probe_first(Wire()),
        lambda: _batched_initialize(Wire()),
        lambda: _discover_then_later_answer(Wire()),
    ],
    ids=["initialize-era", "envelope-late", "batched-initialize", "discover-answers"],
)
def test_the_handshake_pass_gives_the_full_analysis_facts(db_url: str, build: Any) -> None:
    build().record(db_url, name="facts")
    full, bounded = asyncio.run(_facts(db_url, "facts"))
    assert bounded == full
    assert full.first_envelope_seq is not None or full.initialize_seq is not None


def test_the_first_envelope_is_the_smallest_seq_whatever_the_feeding_order() -> None:
    w = _probe_first(Wire())
    requests = [r for r in w.frames if r["kind"] == "request"]
    from mcp_proxy.analysis.facts import decode

    msgs = decode(requests)
    b = FactsBuilder()
    for m in reversed(msgs):  # the handshake's discover first, then the earlier requests
        b.envelope(m)
    assert b.facts.first_envelope_seq == requests[-2]["seq"]
    assert b.envelope_version == "2026-07-28"
