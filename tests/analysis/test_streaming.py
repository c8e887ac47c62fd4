"""The analysis streams: rows fed batch by batch give the same answer as all at once, and no
parsed body outlives the step that needed it (performance issue, viewers on 1M frames)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.core import analyze
from mcp_proxy.analysis.exchanges import pair
from mcp_proxy.analysis.facts import Decoder, decode, session_facts
from mcp_proxy.analysis.model import UNPARSED
from mcp_proxy.store.queries import Store
from mcp_proxy.testing.factories import Wire, envelope


def _session() -> Wire:
    w = Wire.modern()
    for i in range(2, 40):
        meta = envelope(log_level="info")
        meta["progressToken"] = i
        w.request("tools/call", i, {"name": "s", "arguments": {"q": i}, "_meta": meta})
        w.progress(i, 1, 2, direction="s2c")
        w.log(f"working on {i}", level="info")
        if i % 7 == 0:
            w.error(i, -32602, "Unknown tool: s")
        elif i % 11:
            w.result(i, {"content": [], "isError": i % 5 == 0, "resultType": "complete"})
        if i % 3 == 0:
            w.stderr(f"line {i}")
    return w.end()


def _summary(a: object) -> object:
    d = a.as_dict()  # type: ignore[attr-defined]
    return d["exchanges"], d["chains"], d["findings"], d["counts"], d["frames"]


def test_batches_give_the_same_analysis_as_one_list() -> None:
    w = _session()
    whole = analyze(w.frames, session=w.session)
    decoder = Decoder()
    for k in range(0, len(w.frames), 7):
        decoder.feed_frames(w.frames[k : k + 7])
    streamed = analyze(decoder, session=w.session)
    assert _summary(streamed) == _summary(whole)
    assert streamed.frame_count == len(w.frames)
    assert {f.code for f in whole.findings} >= {"exchange.no_response", "jsonrpc.unknown_tool"}


def test_pairing_keeps_no_parsed_body() -> None:
    w = _session()
    msgs = decode(w.frames)
    facts = session_facts(msgs, w.session)
    pair(msgs, facts)
    kept = [m.seq for m in msgs if m.raw is not None and m._body is not UNPARSED]
    assert kept == []


def test_decoder_shares_repeated_strings() -> None:
    rows = [dict(r) for r in _session().frames]
    for r in rows:  # a database driver hands out a new string for every value
        r["direction"] = "".join(r["direction"])
        r["kind"] = "".join(r["kind"])
    msgs = decode(rows)
    assert len({id(m.direction) for m in msgs}) == 2
    assert len({id(m.kind) for m in msgs}) <= 5


@pytest.mark.parametrize("batch", [3, 50_000])
async def test_service_streams_the_store_in_batches(
    batch: int, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    w = _session()
    sid = w.record(db_url)
    monkeypatch.setattr(service, "LOAD_BATCH", batch)
    store = await Store.open(db_url)
    try:
        session = await store.get_session(sid)
        assert session is not None
        decoder = service.load_sync(store.url, sid)
        assert decoder.frames == len(w.frames)
        streamed = await service.session_analysis(store, session)
        whole = analyze(decoder, session=service.session_view(session))
        assert _summary(streamed) == _summary(whole)
    finally:
        await store.close()


#: A few of the stored columns (what a reader that needs less than the whole row asks for).
SOME_COLUMNS = ("mono_ns", "shape", "msg_id", "raw")


def test_shaped_pages_reads_the_columns_asked_for(db_url: str) -> None:
    """A reader asking for a few columns gets the same values as in the full rows; a name that
    is no stored column (nor a spec) is refused before any SQL is written."""
    from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, shaped_pages

    sid = _session().record(db_url)
    full = [r for rows in shaped_pages(db_url, sid, SHAPED_FRAME_COLUMNS, batch=4)[1] for r in rows]
    some = [r for rows in shaped_pages(db_url, sid, SOME_COLUMNS, batch=4)[1] for r in rows]
    picks = [SHAPED_FRAME_COLUMNS.index(c) for c in SOME_COLUMNS]
    assert some == [tuple(r[i] for i in picks) for r in full]
    assert len(full) > 100
    with pytest.raises(ValueError, match="not stored frame columns"):
        shaped_pages(db_url, sid, ("seq", "raw; DROP TABLE frames"))
