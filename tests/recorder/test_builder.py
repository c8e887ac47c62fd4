"""The batch builder, pure: items in, rows out — no sockets, no database, no threads."""

from __future__ import annotations

import json

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.recorder.builder import BatchBuilder
from mcp_proxy.recorder.contract import (
    Chunk,
    EndOfStream,
    ExchangeUpdate,
    FindingItem,
    FrameItem,
    HttpExchange,
    SessionStart,
    SessionUpdate,
)
from mcp_proxy.redact import Redactor

C2S, S2C, STDIO = Direction.C2S, Direction.S2C, Channel.STDIO
SID = "a" * 32


def _builder(**kw: object) -> BatchBuilder:
    b = BatchBuilder(clock=lambda: 1000.0, **kw)  # type: ignore[arg-type]
    b.feed(SessionStart({"id": SID, "transport": "stdio", "started_at": 0.5}))
    return b


def test_chunks_become_numbered_line_frames_in_read_order() -> None:
    b = _builder()
    b.feed(Chunk(SID, S2C, STDIO, b'{"jsonrpc":"2.0","id":1,"result":{}}\n', 200, 2.0))
    b.feed(Chunk(SID, C2S, STDIO, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n{"jsonr', 100, 1.0))
    b.feed(Chunk(SID, C2S, STDIO, b'pc":"2.0","method":"n"}\ntail', 300, 3.0))
    b.feed(EndOfStream(SID, C2S, STDIO, 400, 4.0))
    batch = b.take()
    got = [(r.seq, r.direction, r.kind, r.msg_id, r.ts, r.complete) for r in batch.frames]
    assert got == [
        (1, "c2s", "request", "1", 1.0, True),
        (2, "s2c", "response", "1", 2.0, True),
        (3, "c2s", "notification", None, 3.0, True),
        (4, "c2s", "noise", None, 4.0, False),
    ]
    assert batch.sessions[0]["id"] == SID
    assert batch.session_counts[SID] == (4, 4.0)
    assert b.take().empty()


def test_an_undecodable_frame_keeps_its_bytes_and_leaves_one_finding() -> None:
    b = _builder()
    deep = b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"\n"
    b.feed(Chunk(SID, C2S, STDIO, deep + deep, 1, 1.0))
    batch = b.take()
    assert [r.kind for r in batch.frames] == ["undecodable", "undecodable"]
    assert [r.raw for r in batch.frames] == [deep, deep]
    (finding,) = batch.findings
    assert finding["code"] == "recorder.undecodable" and finding["frame_seqs"] == [1, 2]


def test_a_deep_http_body_is_recorded_too() -> None:
    """The HTTP relay's half of defect 1: a deep response body through record_exchange."""
    b = _builder()
    body = b"[" * 3000 + b"]" * 3000
    frame = Frame(S2C, Channel.HTTP, body, 5, 5.0)
    b.feed(HttpExchange(SID, 1, {"method": "POST", "url": "/mcp", "started_at": 5.0}, [frame]))
    b.feed(ExchangeUpdate(1, {"status": 200}))
    batch = b.take()
    assert [(r.kind, r.http_exchange_id) for r in batch.frames] == [("undecodable", 1)]
    assert batch.exchanges[0][0] == 1 and batch.exchange_updates == [(1, {"status": 200})]


def test_values_no_column_holds_are_escaped_or_cleared_with_a_finding() -> None:
    b = _builder()
    b.feed(
        FrameItem(
            SID,
            Frame(C2S, STDIO, b'{"jsonrpc":"2.0","id":"\\ud800","method":"m\\udc00"}\n', 1, 1.0),
        )
    )
    b.feed(
        FrameItem(
            SID,
            Frame(
                S2C,
                STDIO,
                b'{"jsonrpc":"2.0","id":1,"error":{"code":%d,"message":""}}\n' % 2**80,
                2,
                2.0,
            ),
        )
    )
    batch = b.take()
    first, second = batch.frames
    assert first.msg_id == '"\\ud800"' and first.method == "m\\udc00"
    first.method.encode()  # storable
    assert (second.kind, second.error_code) == ("error", None)
    (finding,) = batch.findings
    assert finding["code"] == "recorder.value_escaped" and finding["frame_seqs"] == [1, 2]
    assert "error_code cleared" in finding["detail"] and "method escaped" in finding["detail"]


def test_a_long_id_is_one_valid_json_stand_in() -> None:
    b = _builder()
    long_id = "é" * 500
    for d in (C2S, S2C):
        msg = {"jsonrpc": "2.0", "id": long_id}
        msg.update({"method": "x"} if d is C2S else {"result": {}})
        b.feed(FrameItem(SID, Frame(d, STDIO, json.dumps(msg).encode() + b"\n", 1, 1.0)))
    req, resp = b.take().frames
    assert req.msg_id == resp.msg_id and req.msg_id is not None
    assert len(req.msg_id) <= 300 and json.loads(req.msg_id).startswith("é" * 50)


def test_refused_batches_become_gaps_and_keep_their_sessions_and_ends() -> None:
    b = _builder()
    b.feed(Chunk(SID, C2S, STDIO, b"{}\n{}\n", 1, 1.0))
    b.feed(SessionUpdate(SID, {"status": "ended"}))
    batch = b.take()
    b.refused(batch, "disk full")
    retry = b.take()
    assert retry.frames == [] and retry.sessions == batch.sessions
    assert retry.session_updates[SID]["status"] == "ended"
    assert retry.gaps[SID].lost == 2 and retry.gaps[SID].seqs == [1, 2]
    assert retry.gaps[SID].reason == "disk full"
    b.refused(retry, "still full")  # refused again: the same gap, not a second one
    again = b.take()
    assert again.gaps[SID].lost == 2 and b.frames_lost == 2
    b.feed(Chunk(SID, C2S, STDIO, b"{}\n", 3, 3.0))
    assert [r.seq for r in b.take().frames] == [3]  # numbering goes on past the gap


def test_a_resumed_session_numbers_on_and_counts_what_was_lost() -> None:
    b = BatchBuilder()
    b.adopt(SID, last_seq=40, frame_count=38)
    b.count_gap(SID, 5, "the recorder process died")
    b.feed(Chunk(SID, C2S, STDIO, b"{}\n", 1, 1.0))
    batch = b.take()
    assert [r.seq for r in batch.frames] == [41]
    assert batch.session_counts[SID][0] == 39 and batch.gaps[SID].lost == 5


def test_redaction_marks_the_rows_it_changed() -> None:
    b = _builder(redact=Redactor().frame)
    b.feed(Chunk(SID, C2S, STDIO, b'{"password":"hunter2"}\n{"x":1}\n', 1, 1.0))
    rows = b.take().frames
    assert [r.redacted for r in rows] == [True, None]
    assert b"hunter2" not in rows[0].raw and rows[0].raw.endswith(b"\n")


def test_nothing_an_item_does_can_raise() -> None:
    warnings: list[str] = []
    b = BatchBuilder(warn=warnings.append)
    b.feed("not an item")  # type: ignore[arg-type]
    b.feed(FindingItem(SID, {"code": "x", "title": "\ud800"}))
    bad = Frame(C2S, STDIO, b"{}\n", 1, 1.0)
    bad.direction = None  # type: ignore[assignment]  # a producer bug
    b.feed(FrameItem(SID, bad))
    b.feed(Chunk(SID, C2S, STDIO, b"{}\n", 2, 2.0))
    batch = b.take()
    assert [r.seq for r in batch.frames] == [2]  # the item after the bad one still goes in
    assert batch.findings[0]["title"] == "\\ud800"
    assert b.internal_errors == 2 and len(warnings) == 1
    assert batch.gaps[SID].lost == 1  # the broken frame is counted, not silently dropped


# --------------------------------------------------------------------------------------------
# The read-at-a-time path (a Redactor lets the builder skip clean reads) must give the rows of
# the frame-at-a-time path (a bare callable: every line redacted and classified on its own).
MIXED = [
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"clientInfo":{"name":"c","version":"1"},"capabilities":{}}}\n',
    b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","serverInfo":'
    b'{"name":"s","version":"2"},"capabilities":{}}}\n',
    b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}\n',
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"password":"pw1"}}}\n',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":3}}}\n',
    b'{"jsonrpc":"2.0","id":4,"error":{"code":%d,"message":"big"}}\n' % (2**70),
    b'{"jsonrpc":"2.0","id":5,"method":"tools/\\udfff"}\n',
    b'{"jsonrpc":"2.0","id":"\\ud800","result":{}}\n',
    b'{"jsonrpc":"2.0","id":6,"method":"x","params":{"\\u0070assword":"pw2"}}\n',
    b'{"jsonrpc":"2.0","id":7,"result":{"api_key":"k-1"}}\n',
    b'{"jsonrpc":"2.0","id":%s,"method":"ping"}\n' % json.dumps("i" * 400).encode(),
    b'{"jsonrpc":"2.0","method":"%s"}\n' % (b"m" * 300),
    b"plain noise with token=abc\n",
    b"\xff\xfe not utf-8\n",
    b"\n",
    b"[" * 3000 + b"]" * 3000 + b"\n",
    b'{"jsonrpc":"2.0","id":8,"result":{"text":"%s"}}\n' % (b"x" * 5000),
]


def _rows_of(chunks: list[bytes], redact: object) -> tuple[list[object], object, object]:
    b = _builder(redact=redact)
    for i, data in enumerate(chunks):
        direction = C2S if i % 3 == 0 else S2C
        b.feed(Chunk(SID, direction, STDIO, data, 100 + i, 1.0 + i))
    b.feed(EndOfStream(SID, C2S, STDIO, 10_000, 99.0))
    b.feed(EndOfStream(SID, S2C, STDIO, 10_001, 99.5))
    batch = b.take()
    return list(batch.frames), batch.session_updates, batch.findings


def _chop(data: bytes, seed: int) -> list[bytes]:
    import random

    rnd = random.Random(seed)
    out, i = [], 0
    while i < len(data):
        n = rnd.choice([1, 7, 40, 300, 4096, 70_000])
        out.append(data[i : i + n])
        i += n
    return out


def test_reads_skipped_by_the_prefilter_give_the_rows_of_frame_by_frame_redaction() -> None:
    policy = Redactor()
    data = b"".join(MIXED * 40)
    for seed in range(4):
        chunks = _chop(data, seed)
        fast = _rows_of(chunks, policy)
        slow = _rows_of(chunks, policy.frame)
        assert fast == slow
        assert b"pw1" not in b"".join(bytes(r.raw) for r in fast[0])  # type: ignore[attr-defined]
    off = Redactor(enabled=False)
    chunks = _chop(data, 9)
    assert _rows_of(chunks, off) == _rows_of(chunks, None)


def test_a_secret_split_across_two_reads_is_redacted() -> None:
    """The second read alone holds no prefilter word; the line it completes does."""
    b = _builder(redact=Redactor())
    b.feed(Chunk(SID, C2S, STDIO, b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"pass', 1, 1.0))
    b.feed(
        Chunk(
            SID, C2S, STDIO, b'word":"hunter2"}}\n{"jsonrpc":"2.0","id":2,"method":"y"}\n', 2, 2.0
        )
    )
    rows = b.take().frames
    assert [r.seq for r in rows] == [1, 2]
    assert b"hunter2" not in rows[0].raw and rows[0].redacted is True
    assert rows[1].raw == b'{"jsonrpc":"2.0","id":2,"method":"y"}\n' and rows[1].redacted is None


def test_an_integer_past_64_bits_split_across_reads_stays_exact() -> None:
    """A digit run cut by a read boundary is checked on the whole line (orjson would float it)."""
    b = _builder()
    b.feed(Chunk(SID, S2C, STDIO, b'{"jsonrpc":"2.0","id":1,"error":{"code":1180591620', 1, 1.0))
    b.feed(
        Chunk(
            SID,
            S2C,
            STDIO,
            b'717411303424,"message":"m"}}\n{"jsonrpc":"2.0","id":2,"result":{}}\n',
            2,
            2.0,
        )
    )
    rows = b.take().frames
    assert [(r.kind, r.error_code) for r in rows] == [("error", None), ("response", None)]


# Lines the read-at-a-time path classifies inline (orjson, notifications without a Classified)
# next to every shape that must leave it: each must give the row classify() gives.
HOSTILE = [
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n',
    b'{"jsonrpc":"2.0","method":"a","method":"b"}\n',  # duplicate key: the last one wins
    b'{"jsonrpc":"2.0","method":"n","id":null}\n',  # a null id is no notification
    b'{"jsonrpc":"2.0","method":"n","id":true}\n',
    b'{"jsonrpc":"2.0","method":"n","id":1.5}\n',
    b'{"jsonrpc":"2.0","method":"n","id":[1]}\n',
    b'{"jsonrpc":"2.0","method":7}\n',
    b'{"jsonrpc":"1.0","method":"n"}\n',
    b'{"method":"n"}\n',
    b'{"jsonrpc":"2.0","method":"caf\\u00e9"}\n',  # not ASCII: the column rules apply
    b'{"jsonrpc":"2.0","method":"\\ud800"}\n',  # a lone surrogate: orjson refuses, json reads
    b'{"jsonrpc":"2.0","method":"' + b"m" * 250 + b'"}\n',  # longer than the column
    b'{"jsonrpc":"2.0","method":"n","params":{"x":NaN}}\n',
    b'{"jsonrpc":"2.0","method":"n","params":{"x":"\xff"}}\n',  # invalid UTF-8 in a string
    b'{"jsonrpc":"2.0","method":"n"} trailing\n',
    b'{"jsonrpc":"2.0","method":"n"}\r\n',
    b'\xef\xbb\xbf{"jsonrpc":"2.0","method":"n"}\n',  # a BOM
    b'{\x00"jsonrpc":"2.0"}\n',
    b'{"a":' * 1100 + b"1" + b"}" * 1100 + b"\n",  # deeper than orjson parses
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"\n",  # deeper than json parses
    b'{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"nope"}}\n',
    b'{"jsonrpc":"2.0","id":"x","result":{"v":%d}}\n' % (2**70),  # past 64 bits: json only
    b'[{"jsonrpc":"2.0","method":"n"}]\n',
    b'{"jsonrpc":"2.0","id":10,"result":{"content":[]}}\n',
    b'{"jsonrpc":"2.0","id":-3,"result":null}\n',
    b'{"jsonrpc":"2.0","id":11,"method":null,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":12,"result":{},"error":null}\n',
    b'{"jsonrpc":"2.0","id":true,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":null,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":13.0,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":14,"result":{},"id":"s"}\n',
    b'{"jsonrpc":"2.0","result":{}}\n',
    b"{}\n",
    b"{\n",
    b"  \n",
]


def test_the_inline_classification_gives_the_rows_of_classify() -> None:
    """Read-at-a-time (no redaction) against frame-at-a-time (an identity redactor)."""
    for line in HOSTILE:  # each in reads of its own: a NUL or a long digit run elsewhere in
        # a read sends all of that read's lines to classify(), so mixed reads alone miss some
        chunks = [line * 2, line + line[:5], line[5:]]
        assert _rows_of(chunks, None) == _rows_of(chunks, lambda frame: frame), line[:60]
    data = b"".join(HOSTILE * 3)
    for seed in range(3):
        chunks = _chop(data, seed)
        assert _rows_of(chunks, None) == _rows_of(chunks, lambda frame: frame)
    for channel in (STDIO, Channel.STDERR):
        rows = []
        for redact in (None, lambda frame: frame):
            b = _builder(redact=redact)
            b.feed(Chunk(SID, S2C, channel, data, 1, 1.0))
            rows.append(b.take().frames)
        assert rows[0] == rows[1] and len(rows[0]) == 3 * len(HOSTILE)
    kinds = {r.kind for r in _rows_of([data], None)[0]}  # type: ignore[attr-defined]
    assert {"notification", "invalid", "noise", "undecodable", "error", "batch"} <= kinds


def test_the_inline_responses_keep_the_handshake_facts() -> None:
    """Responses skip the tracker only when it could learn nothing from them."""
    lines = [
        (C2S, b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
         b'"2025-06-18","clientInfo":{"name":"c","version":"1"},"capabilities":{}}}\n'),
        (S2C, b'{"jsonrpc":"2.0","id":5,"result":{"_meta":{"x":1}}}\n'),
        (S2C, b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18",'
         b'"serverInfo":{"name":"s","version":"2"},"capabilities":{}}}\n'),
        (C2S, b'{"jsonrpc":"2.0","id":2,"method":"server/discover"}\n'),
        (S2C, b'{"jsonrpc":"2.0","id":2,"result":{"supportedVersions":["2026-07-28"]}}\n'),
        (S2C, b'{"jsonrpc":"2.0","id":3,"result":{"_meta":{"io.modelcontextprotocol/'
         b'serverInfo":{"name":"late","version":"3"}}}}\n'),
    ]  # fmt: skip
    for start in (0, 2):  # with and without the initialize exchange (server name from _meta)
        out = []
        for redact in (None, lambda frame: frame):
            b = _builder(redact=redact)
            for i, (direction, line) in enumerate(lines[start:]):
                b.feed(Chunk(SID, direction, STDIO, line, 10 + i, 2.0 + i))
            batch = b.take()
            out.append((batch.frames, batch.session_updates))
        assert out[0] == out[1]
        assert out[0][1][SID]["server_name"] == ("s" if start == 0 else "late")
        # The same messages as HTTP bodies (one frame each: the per-frame path) tell the same.
        b = _builder()
        for i, (direction, line) in enumerate(lines[start:]):
            b.feed(FrameItem(SID, Frame(direction, Channel.HTTP, line.rstrip(), 10 + i, 2.0 + i)))
        assert b.take().session_updates == out[0][1]


def test_requests_skip_the_handshake_tracker_only_when_it_could_learn_nothing() -> None:
    """Plain requests (and a ``_meta`` without the envelope) go by; the envelope and the
    handshake requests after them still reach the tracker, on both paths (stream and HTTP)."""
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}',
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":2}}}',
        b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{'
        b'"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        b'"io.modelcontextprotocol/clientInfo":{"name":"env","version":"9"}}}}',
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{'
        b'"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}',
        b'{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":'
        b'"2025-06-18","clientInfo":{"name":"c","version":"1"},"capabilities":{}}}',
    ]
    updates = []
    for http in (False, True):
        b = _builder()
        for i, line in enumerate(lines):
            if http:
                b.feed(FrameItem(SID, Frame(C2S, Channel.HTTP, line, 10 + i, 2.0 + i)))
            else:
                b.feed(Chunk(SID, C2S, STDIO, line + b"\n", 10 + i, 2.0 + i))
        updates.append(b.take().session_updates[SID])
    assert updates[0] == updates[1]
    got = updates[0]
    assert got["protocol_version"] == "2026-07-28"  # the first envelope, not the later one
    assert got["client_name"] == "c" and got["client_version"] == "1"
    assert "envelope" in got["meta"] and "initialize_request" in got["meta"]
