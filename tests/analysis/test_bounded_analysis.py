"""The analysis of a stored session in bounded memory (issue 24): ``check --recompute`` and the
recorder's end-of-session analysis stream the session twice (handshake facts, then one pass of
the pairing feeding every check family) and keep no exchange; what they find is what the full
analysis (``show``, the dashboard) finds."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest

from mcp_proxy.analysis import exchanges as exchanges_mod
from mcp_proxy.analysis import service
from mcp_proxy.analysis.checks import Lists
from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.facts import decode, session_facts
from mcp_proxy.analysis.model import Exchange, FindingSink, SessionFacts
from mcp_proxy.limits import LIST_WALKS_KEPT
from mcp_proxy.store.queries import Store
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import CASES
from tests.conftest import catalogue_sample


async def _both(db_url: str, ref: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    store = await Store.open(db_url)
    try:
        s = await store.resolve_session(ref)
        full = await service.session_analysis(store, s)
        http = await store.http_exchanges(s["id"])
        view = service.session_view(s)
        view["fault_end"] = service.fault_end(await store.recorded_findings(s["id"]))
        bounded = await asyncio.to_thread(service.stream_analysis, db_url, view, http)
        pair = (full, bounded)
        return [f.as_dict() for f in full.findings], [f.as_dict() for f in bounded.findings], pair
    finally:
        await store.close()


@pytest.mark.corpus  # every case under --full and --only-full; every fourth by default
def test_bounded_analysis_finds_what_the_full_one_does_on_every_catalogue_case(
    db_url: str,
) -> None:
    refs = []
    for code, (trigger, near_miss) in catalogue_sample(sorted(CASES.items())):
        for i, build in enumerate((trigger, near_miss)):
            name = f"{code}-{i}"
            build().record(db_url, name=name)
            refs.append((code, name))
    for code, name in refs:
        full, bounded, (a, b) = asyncio.run(_both(db_url, name))
        assert bounded == full, code
        assert b.facts == a.facts, code  # (the handshake pass reads a few frames of them)
        assert b.exchanges == [] and b.exchange_count == len(a.exchanges), code
        assert (b.frame_count, b.last_seq) == (a.frame_count, a.last_seq), code


def _long_session(calls: int) -> Wire:
    w = Wire.modern()
    for i in range(2, calls + 2):
        meta = envelope(log_level="info")
        meta["progressToken"] = i
        w.request("tools/call", i, {"name": "s", "arguments": {"q": i}, "_meta": meta})
        w.progress(i, 1, 2, direction="s2c")
        w.log(f"working on {i}", level="info")
        if i % 7 == 0:
            w.error(i, -32602, "Unknown tool: s")
        else:
            w.result(i, {"content": [], "isError": i % 5 == 0, "resultType": "complete"})
        if i % 3 == 0:
            w.stderr(f"line {i}")
    return w.end()


def _peak(db_url: str, name: str) -> int:
    """Peak traced memory of recomputing a stored session's findings (``check --recompute``)."""

    async def run() -> int:
        store = await Store.open(db_url)
        try:
            s = await store.resolve_session(name)
            tracemalloc.start()
            try:
                await asyncio.to_thread(service.current_findings, db_url, s, recompute=True)
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        finally:
            await store.close()

    return asyncio.run(run())


def test_bounded_analysis_memory_does_not_grow_with_the_session(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of 500 rows, the last 100 answered requests and request ids remembered: both
    # sessions are far past these bounds, so what grows is what is kept.
    monkeypatch.setattr(service, "LOAD_BATCH", 500)
    monkeypatch.setattr(exchanges_mod, "ANSWERED_KEPT", 100)
    monkeypatch.setattr(exchanges_mod, "REQUEST_IDS_KEPT", 100)
    _long_session(1_000).record(db_url, name="short")
    _long_session(6_000).record(db_url, name="long")
    short, long = _peak(db_url, "short"), _peak(db_url, "long")
    # Six times the frames (~5,000 and ~30,000): the exchanges and messages do not stay.
    assert long < 1.5 * short, (short, long)


def test_the_pairing_forgets_answered_requests_past_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(exchanges_mod, "ANSWERED_KEPT", 10)
    w = _long_session(40)
    w.progress(3, 2, 2, direction="s2c")  # long after its answer: beyond the last 10 answered
    w.progress(40, 2, 2, direction="s2c")  # among the last 10 answered
    msgs = decode(w.frames)
    facts = session_facts(msgs, w.session)
    sink = FindingSink()
    p = Pairing(facts, sink=sink, keep=False, light=False)
    p.feed_many(msgs)
    p.finish()
    assert len(p.done) <= 10 and len(p.done_tokens) <= 10
    codes = [f.code for f in sink.result()]
    assert codes.count("notification.progress_after_response") == 1
    assert codes.count("notification.progress_unknown") == 1


def test_lists_keep_a_bounded_number_of_walks() -> None:
    sink = FindingSink()
    lists = Lists(SessionFacts(), sink)
    w = Wire.modern()
    for i in range(2, 200):
        w.request("tools/list", i, {})
        w.result(i, {"tools": [{"name": f"t{i}", "inputSchema": {"type": "object"}}]})
    msgs = decode(w.end().frames)
    by_id: dict[str, Exchange] = {}
    for m in msgs:
        if m.kind == "request" and m.msg_id is not None:
            by_id[m.msg_id] = ex = Exchange(0, m.direction, m.method or "", m.msg_id, m.seq, 0, 0)
            ex.request = m
        elif m.kind == "response" and m.msg_id in by_id:
            ex = by_id[m.msg_id]
            ex.response = m
            lists.exchange(ex)
    assert 0 < len(lists.seen) <= LIST_WALKS_KEPT
