"""The forward proxy's recording (:class:`~mcp_proxy.forward.tape.ForwardTape`) fed directly.

Heads, bodies and chunks go in as plain values, the way both engines hand them; what comes out
is what the recorder contract is given (sessions, exchange rows, frames, findings) — no proxy,
no socket, no mitmproxy. The end-to-end behaviour through both engines is in the other modules
of this directory.
"""

from __future__ import annotations

import gzip
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.forward.exchange import RequestHead, ResponseHead, TapeExchange
from mcp_proxy.forward.recognize import RequestView, endpoint_key, origin_of, url_parts
from mcp_proxy.forward.tape import ForwardTape, request_url
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.recorder.contract import (
    ExchangeStart,
    ExchangeUpdate,
    FindingItem,
    FrameItem,
    HttpExchange,
    Item,
    Producer,
    SessionStart,
    SessionUpdate,
)
from mcp_proxy.relay.http import kept

URL = "https://mcp.test/mcp"
INIT = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"unit","version":"1"}}}'
)
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
JSON = [(b"Content-Type", b"application/json")]
SSE = [(b"Content-Type", b"text/event-stream")]


class Items(Producer):
    """The recorder contract, keeping every item it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[Item] = []

    def submit(self, item: Item) -> None:
        self.items.append(item)

    def of(self, kind: type) -> list[Any]:
        return [i for i in self.items if isinstance(i, kind)]

    def frames(self) -> list[Frame]:
        """Every frame handed over, in the order the recorder gets them."""
        out: list[Frame] = []
        for item in self.items:
            if isinstance(item, FrameItem):
                out.append(item.frame)
            elif isinstance(item, HttpExchange):
                out.extend(item.frames)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """Each exchange's columns, its updates applied."""
        rows: dict[int, dict[str, Any]] = {}
        for item in self.items:
            if isinstance(item, ExchangeStart | HttpExchange):
                rows[item.local_id] = dict(item.fields)
            elif isinstance(item, ExchangeUpdate):
                rows[item.local_id].update(item.fields)
        return list(rows.values())


def tape_of(**kw: Any) -> tuple[ForwardTape, Items]:
    items = Items()
    return ForwardTape(items, **kw), items


def request(
    tape: ForwardTape,
    body: bytes = b"",
    *,
    method: str = "POST",
    url: str = URL,
    headers: list[tuple[bytes, bytes]] | None = None,
    size: int | None = None,
) -> TapeExchange | None:
    raw = list(JSON if headers is None else headers)
    head = RequestHead(method, url, raw, "HTTP/1.1", 1000.0, "127.0.0.1:5555")
    return tape.request(head, body, size)


def respond(
    ex: TapeExchange, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
) -> bool:
    return ex.response_head(
        ResponseHead(status, "OK", list(JSON if headers is None else headers), 1000.5)
    )


def test_request_url_as_mitmproxy_writes_it() -> None:
    assert request_url("https", "a.test", 443, "/mcp") == "https://a.test/mcp"
    assert request_url("http", "a.test", 8080, "/m?x=1") == "http://a.test:8080/m?x=1"
    assert request_url("https", "::1", 8443, "/") == "https://[::1]:8443/"
    assert request_url("https", "[::1]", 443, "/") == "https://[::1]/"


def test_url_parts_from_one_parse() -> None:
    assert url_parts("https://a.test/mcp?x=1") == (
        "https://a.test:443",
        "https://a.test:443/mcp",
        "x=1",
    )
    assert url_parts("http://a.test:8080") == ("http://a.test:8080", "http://a.test:8080/", "")
    assert url_parts("https://[::1]:8443/m") == ("https://[::1]:8443", "https://[::1]:8443/m", "")
    # mitmproxy writes an IPv6 host without brackets: keyed by its whole location.
    assert origin_of("http://::1:8080/mcp") == "http://::1:8080"
    assert endpoint_key("http://::1:8080/mcp") == "http://::1:8080/mcp"
    view = RequestView(
        "GET",
        "https://a.test/p?q",
        [("Accept", "x"), ("MCP-Protocol-Version", "1"), ("accept", "y")],
        b"",
    )
    assert view.header("ACCEPT") == "x" and view.has_mcp_header and view.url_parts()[2] == "q"
    assert not RequestView("GET", "https://a.test/", [("X-Mcp", "1")], b"").has_mcp_header


def test_json_exchange_opens_its_session_and_records_both_frames() -> None:
    tape, items = tape_of(name="unit")
    ex = request(tape, INIT)
    assert ex is not None and ex.kind == "mcp"
    assert respond(ex, headers=[*JSON, (b"Mcp-Session-Id", b"abc")]) is False  # small: whole
    ex.done(RESULT, None, 1001.0)
    [start] = items.of(SessionStart)
    assert start.row["name"] == "unit"
    assert json.loads(json.dumps(start.row["meta"]))["grouping"]["rule"] == "mcp-session-id"
    [row] = items.rows()
    assert row["method"] == "POST" and row["status"] == 200 and row["outcome"] == "complete"
    assert row["url"] == URL and row["ended_at"] == 1001.0 and row["first_byte_at"] == 1000.5
    assert row["request_size"] == len(INIT) and row["response_size"] == len(RESULT)
    frames = items.frames()
    assert [(f.direction, f.channel, bytes(f.raw)) for f in frames] == [
        (Direction.C2S, Channel.HTTP, INIT),
        (Direction.S2C, Channel.HTTP, RESULT),
    ]
    assert all(f.complete for f in frames)
    # The next request of that session joins it at once.
    nxt = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"abc")])
    assert nxt is not None and nxt.entry is not None and nxt.entry is ex.entry
    assert tape.stats_exchanges == 1


def test_other_traffic_is_not_recorded_unless_asked() -> None:
    tape, items = tape_of()
    assert request(tape, b"", method="GET", url="https://www.test/", headers=[]) is None
    tape_all, items_all = tape_of(record_all=True)
    ex = request(tape_all, b"", method="GET", url="https://www.test/", headers=[])
    assert ex is not None and ex.kind == "other"
    respond(ex, headers=[(b"Content-Type", b"text/plain")])
    ex.done(b"hello", None, 1001.0)
    [row] = items_all.rows()
    assert row["status"] == 200 and not items_all.frames()
    assert not items.items


def test_sse_stream_is_split_into_events_as_copies_arrive() -> None:
    tape, items = tape_of()
    ex = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"s1")])
    assert ex is not None
    assert respond(ex, headers=SSE) is True  # an event stream: copied chunk by chunk
    # The row goes out with the head, before any event (a stream may run for hours): one item,
    # the row with the request's frame.
    [start] = items.of(HttpExchange)
    assert start.fields["status"] == 200 and start.fields["method"] == "POST"
    assert [f.direction for f in start.frames] == [Direction.C2S]
    assert not items.of(ExchangeStart) and not items.of(FrameItem)
    stream = b"id: 1\nevent: message\ndata: " + NOTE + b"\n\n: keep-alive\n\nid: 2\ndata: " + RESULT
    for i in range(0, len(stream), 7):  # cut anywhere, even inside a line
        ex.chunk(stream[i : i + 7])
    assert not ex.responded  # the result's event has no end yet
    ex.chunk(b'\n\ndata: {"partial')
    assert ex.responded
    ex.done(None, None, 1002.0)
    sse = [f for f in items.frames() if f.channel == Channel.SSE]
    assert [(bytes(f.raw), f.sse_id, f.complete) for f in sse] == [
        (NOTE, "1", True),
        (RESULT, "2", True),
        (b'{"partial', None, False),  # cut off by the stream's end
    ]
    assert sse[0].sse_event == "message"
    assert all(f.http_exchange == start.local_id for f in sse)
    [row] = items.rows()
    assert row["outcome"] == "complete" and row["response_size"] == len(stream) + 17
    update = items.of(ExchangeUpdate)[-1]
    assert update.fields["meta"]["sse_comments"] == 1


EVENT_DATA = st.lists(
    st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(datas=EVENT_DATA, cuts=st.lists(st.integers(0, 400), max_size=12), crlf=st.booleans())
def test_any_chunking_of_a_stream_records_the_same_events(
    datas: list[bytes], cuts: list[int], crlf: bool
) -> None:
    """However the upstream's writes (and the host's reads) cut the stream, the recording is
    the same events, in order, each whole, and the copies add up to the bytes that went."""
    nl = b"\r\n" if crlf else b"\n"
    stream = b"".join(b"id: %d%sdata: %s%s%s" % (i, nl, d, nl, nl) for i, d in enumerate(datas))
    tape, items = tape_of()
    ex = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"h")])
    assert ex is not None and respond(ex, headers=SSE)
    bounds = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    for a, b in itertools.pairwise(bounds):
        ex.chunk(stream[a:b])
    ex.done(None, None, 1001.0)
    sse = [f for f in items.frames() if f.channel == Channel.SSE]
    assert [(bytes(f.raw), f.sse_id) for f in sse] == [(d, str(i)) for i, d in enumerate(datas)]
    assert all(f.complete for f in sse)
    assert items.rows()[0]["response_size"] == len(stream)


def test_legacy_sse_groups_the_stream_and_its_message_posts() -> None:
    tape, items = tape_of()
    get = request(
        tape, method="GET", url="https://old.test/sse", headers=[(b"Accept", b"text/event-stream")]
    )
    assert get is not None and get.kind == "maybe-sse"
    assert respond(get, headers=SSE) is True
    get.chunk(b"event: endpoint\ndata: /messages?session_id=L1\n\n")
    assert get.kind == "mcp" and get.transport == "sse" and get.entry is not None
    post = request(tape, CALL, url="https://old.test/messages?session_id=L1")
    assert post is not None and post.entry is get.entry
    respond(post, 202, headers=[])
    post.done(b"", None, 1001.0)
    get.chunk(b"event: message\ndata: " + RESULT + b"\n\n")
    get.done(None, None, 1003.0)
    [start] = items.of(SessionStart)
    assert start.row["meta"]["grouping"]["rule"] == "legacy-sse-session-id"
    ended = [u for u in items.of(SessionUpdate) if u.fields.get("status") == "ended"]
    assert ended, "the legacy stream's end ends its session"
    sse = [bytes(f.raw) for f in items.frames() if f.channel == Channel.SSE]
    assert sse == [b"/messages?session_id=L1", RESULT]


def test_an_event_stream_that_is_not_mcp_is_dropped() -> None:
    tape, items = tape_of()
    ex = request(
        tape,
        method="GET",
        url="https://news.test/feed",
        headers=[(b"Accept", b"text/event-stream")],
    )
    assert ex is not None
    assert respond(ex, headers=SSE) is True
    ex.chunk(b"data: hello\n\n")
    ex.chunk(b"data: " + RESULT + b"\n\n")
    ex.done(None, None, 1001.0)
    assert ex.kind == "dropped" and not items.items
    # Not an event stream at all: dropped at its head.
    ex2 = request(
        tape, method="GET", url="https://news.test/x", headers=[(b"Accept", b"text/event-stream")]
    )
    assert ex2 is not None and respond(ex2, headers=[(b"Content-Type", b"text/html")]) is False
    ex2.done(b"<html>", None, 1001.0)
    assert not items.items


def test_secrets_never_reach_the_recorder() -> None:
    tape, items = tape_of()
    ex = request(
        tape,
        CALL,
        url=URL + "?access_token=SECRET-Q",
        headers=[*JSON, (b"Authorization", b"Bearer SECRET-H"), (b"Mcp-Session-Id", b"s")],
    )
    assert ex is not None
    respond(
        ex, headers=[*JSON, (b"Set-Cookie", b"sid=SECRET-C"), (b"Location", b"/cb?code=SECRET-L")]
    )
    ex.done(RESULT, None, 1001.0)
    token = request(
        tape,
        b"grant_type=authorization_code&code=SECRET-B",
        url="https://auth.test/token",
        headers=[(b"Content-Type", b"application/x-www-form-urlencoded")],
    )
    assert token is not None and token.kind == "oauth"
    respond(token)
    token.done(b'{"access_token":"SECRET-T","token_type":"bearer"}', None, 1002.0)
    tape.close()  # the held dance is written into its origin's fallback session
    dump = repr(items.items)
    assert "SECRET" not in dump, dump
    [row, tok] = items.rows()
    assert ["Authorization", "Bearer [REDACTED]"] in row["request_headers"]
    assert tok["method"] == "POST"
    # A disabled redactor says so in the session's meta.
    clear, clear_items = tape_of(redactor=type(tape.redactor)(enabled=False))
    ex = request(clear, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"s")])
    assert ex is not None
    [start] = clear_items.of(SessionStart)
    assert "clear" in start.row["meta"]["redaction"]


def test_bounded_bodies_are_cut_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "MAX_RECORDED_BODY", 1000)
    tape, items = tape_of()
    # A request body that streamed: the engine kept its first bytes of the whole size.
    big = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"blob":"' + b"x" * 900
    ex = request(tape, big, headers=[*JSON, (b"Mcp-Session-Id", b"b")], size=5_000_000)
    assert ex is not None and ex.request_size == 5_000_000
    # An unsized JSON response is held whole by the engine; a large one is copied.
    assert respond(ex, headers=[*JSON, (b"Content-Length", b"3000000")]) is True
    piece = b"y" * 65536
    for _ in range(40):  # 2.6 MB through, 1000 bytes kept
        ex.chunk(piece)
    ex.done(None, None, 1001.0)
    c2s, s2c = items.frames()
    assert c2s.direction == Direction.C2S and bytes(c2s.raw) == big and not c2s.complete
    assert len(s2c.raw) == 1000 and not s2c.complete
    [row] = items.rows()
    assert row["request_size"] == 5_000_000 and row["response_size"] == 40 * 65536
    meta = items.of(ExchangeUpdate)[-1].fields["meta"]
    assert meta["request_body_recorded"] == len(big) and meta["request_body_streamed"]
    assert meta["response_body_recorded"] == 1000


def test_a_compressed_body_is_recorded_decoded() -> None:
    tape, items = tape_of()
    ex = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"g")])
    assert ex is not None
    respond(ex, headers=[*JSON, (b"Content-Encoding", b"gzip")])
    ex.done(gzip.compress(RESULT), None, 1001.0)
    assert bytes(items.frames()[-1].raw) == RESULT
    assert not items.of(FindingItem)


def test_errors_say_who_answered_and_why() -> None:
    tape, items = tape_of()
    ex = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"e")])
    assert ex is not None
    ex.error("TLS handshake failed: certificate verify failed", "mcptape")
    [row] = items.rows()
    assert row["outcome"] == "upstream_error" and row["status"] == 502
    [finding] = items.of(FindingItem)
    assert finding.fields["code"] == "forward.upstream_tls"
    assert "mcp.test" in finding.fields["detail"]
    meta = items.of(HttpExchange)[0].fields["meta"]
    assert meta["synthesized"] == {"by": "mcptape", "status": 502, "kind": "upstream-error"}
    # The host left: after its response (an SDK closing the stream) it is complete.
    ex2 = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"e")])
    assert ex2 is not None and respond(ex2, headers=SSE)
    ex2.chunk(b"data: " + RESULT + b"\n\n")
    ex2.error("Client disconnected.")
    ex2.done(None, None, 1005.0)  # a late end changes nothing
    rows = items.rows()
    assert rows[-1]["outcome"] == "complete"
    ex3 = request(tape, CALL, headers=[*JSON, (b"Mcp-Session-Id", b"e")])
    assert ex3 is not None
    ex3.error("Client disconnected.")
    assert items.rows()[-1]["outcome"] == "host_aborted"


def test_delete_ends_its_session() -> None:
    tape, items = tape_of()
    ex = request(tape, b"", method="DELETE", headers=[(b"Mcp-Session-Id", b"d")])
    assert ex is not None
    respond(ex, headers=[])
    ex.done(b"", None, 1001.0)
    ended = [u for u in items.of(SessionUpdate) if u.fields.get("status") == "ended"]
    assert len(ended) == 1
