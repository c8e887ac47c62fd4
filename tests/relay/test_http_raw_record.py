"""A quick exchange goes to the recorder raw and is described there; other routes in the relay.

The relay hands a finished exchange's heads to the recorder process as the bytes that crossed
the wire (``mcp_proxy.recorder.httpraw``, the ``T_HTTP`` record); header decoding, redaction,
``Mcp-*`` header decoding and URL redaction happen in the recorder. An exchange that goes to the
recorder while it runs, or a sink that takes no raw records, is described by the relay with the
same function. These tests hold the two routes to one row, and the host's response head (written
from the upstream's pairs as bytes) to what the upstream sent. The whole path through a real
recorder process and database is covered by ``test_http_redaction.py`` (secrets never reach the
file) and ``test_http_sdk.py`` (MCP headers in the exchange's meta).
"""

from __future__ import annotations

import asyncio
import copy
import http.client
from enum import IntEnum, StrEnum
from typing import Any

import pytest

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.recorder.httpraw import describe, pack, unpack
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.common import RelayConfig
from mcp_proxy.relay.http.server import HTTPRelay
from tests.helpers.watch import until
from tests.relay.fake_pool import FakeUpstreamPool
from tests.relay.test_http_units import JSON_REPLY, RESULT
from tests.relay.unit.fakes import Recorder

pytestmark = pytest.mark.timeout(30)

REQ_PAIRS = [
    (b"Host", b"127.0.0.1:8765"),
    (b"Authorization", b"Bearer s3cret-token"),
    (b"Mcp-Method", b"tools/call"),
    (b"Mcp-Name", b"=?base64?ZWNobw==?="),
    (b"X-Latin", b"caf\xe9"),  # not UTF-8: escaped in the recording
    (b"X-Custom", b"hide-me"),
]
RESP_PAIRS = ((b"Content-Type", b"application/json"), (b"Set-Cookie", b"sid=abc"))


def _raw() -> Any:
    return (
        "http://up.example",
        "http://127.0.0.1:8765",
        "/mcp?access_token=tok123&x=1",
        REQ_PAIRS,
        True,
        RESP_PAIRS,
    )


def test_raw_record_is_described_as_the_relay_describes_it() -> None:
    red = Redactor.from_options(headers=["X-Custom"])
    fields: dict[str, Any] = {"method": "POST", "started_at": 1.0, "status": 200}
    meta: dict[str, Any] = {"http_version": "1.1"}
    frames = [
        Frame(Direction.C2S, Channel.HTTP, b"{}", 5, 2.0, True, extra={"content_type": "j"}),
        Frame(Direction.S2C, Channel.SSE, b"[1]", 6, 3.0, False, None, "7", "message", {}),
    ]
    # The relay's route (a live exchange, or a sink without raw hand-over).
    f_here, m_here = copy.deepcopy(fields), copy.deepcopy(meta)
    describe(_raw(), f_here, m_here, red)
    # The recorder process's route.
    item = unpack(pack("sid", 9, copy.deepcopy(fields), copy.deepcopy(meta), _raw(), frames), red)
    assert item.session_id == "sid" and item.local_id == 9
    assert item.fields == {**f_here, "meta": m_here}
    headers = dict(item.fields["request_headers"])
    assert headers["Authorization"] == "Bearer [REDACTED]"
    assert headers["X-Custom"] == "[REDACTED]"
    assert headers["X-Latin"] == "caf\\xe9"
    assert dict(item.fields["response_headers"])["Set-Cookie"] == "sid=[REDACTED]"
    assert item.fields["url"] == "http://up.example/mcp?access_token=[REDACTED]&x=1"
    assert m_here["local_url"] == "http://127.0.0.1:8765/mcp?access_token=[REDACTED]&x=1"
    assert m_here["mcp_headers"]["Mcp-Method"] == "tools/call"
    assert m_here["mcp_headers"]["Mcp-Name"] == {"raw": "=?base64?ZWNobw==?=", "decoded": "echo"}
    got = [(f.direction, f.channel, f.raw, f.mono_ns, f.wall, f.complete) for f in item.frames]
    assert got == [
        (Direction.C2S, Channel.HTTP, b"{}", 5, 2.0, True),
        (Direction.S2C, Channel.SSE, b"[1]", 6, 3.0, False),
    ]
    assert [f.http_exchange for f in item.frames] == [9, 9]
    assert (item.frames[1].sse_id, item.frames[1].sse_event) == ("7", "message")
    assert item.frames[0].extra == {"content_type": "j"} and item.frames[1].extra == {}


def test_no_redact_keeps_headers_and_urls() -> None:
    fields: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    describe(_raw(), fields, meta, Redactor(enabled=False))
    assert ["Authorization", "Bearer s3cret-token"] in fields["request_headers"]
    assert fields["url"].endswith("access_token=tok123&x=1")


def _post(port: int, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/mcp?token=abc",
        body,
        {"Content-Type": "application/json", "Authorization": "Bearer xyz", "Mcp-Method": "ping"},
    )
    resp = conn.getresponse()
    out = resp.status, resp.getheaders(), resp.read()
    conn.close()
    return out


async def _relay(pool: FakeUpstreamPool) -> tuple[Any, Recorder]:
    rec = Recorder()
    relay = HTTPRelay(RelayConfig("http://upstream.test/mcp", port=0), rec, pool=pool)
    url = await relay.start()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        answer = await asyncio.to_thread(_post, port, b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    finally:
        await relay.close()
    return answer, rec


def _check_described(fields: dict[str, Any], meta: dict[str, Any]) -> None:
    headers = dict(fields["request_headers"])
    assert headers["Authorization"] == "Bearer [REDACTED]" and headers["Mcp-Method"] == "ping"
    assert fields["url"] == "http://upstream.test/mcp?token=[REDACTED]"
    assert meta["local_url"].endswith("/mcp?token=[REDACTED]")
    assert meta["mcp_headers"] == {"Mcp-Method": "ping"}
    assert meta["http_version"] == "1.1" and meta["peer"].startswith("127.0.0.1:")


def test_a_sink_without_raw_hand_over_gets_the_described_row() -> None:
    """A sink other than the recorder process (here a list) gets the row described by the relay."""
    (status, _h, body), rec = asyncio.run(_relay(FakeUpstreamPool(JSON_REPLY)))
    assert (status, body) == (200, RESULT)
    (frames, fields) = next(c[1] for c in rec.calls if c[0] == "record_exchange")
    _check_described(fields, fields["meta"])
    assert fields["response_headers"] == [
        ["content-type", "application/json"],
        ["X-Up", "1"],
        ["content-length", str(len(RESULT))],
    ]
    assert [f.raw for f in frames][1] == RESULT


def test_a_slow_call_registered_live_is_described_by_the_relay() -> None:
    """Still waiting after REGISTER_AFTER: the row goes live, headers described in the relay;
    the response headers come with the final update."""
    pool = FakeUpstreamPool(JSON_REPLY)
    pool.delay = 0.6
    (status, _h, body), rec = asyncio.run(_relay(pool))
    assert (status, body) == (200, RESULT)
    kinds = [c[0] for c in rec.calls]
    assert "record_exchange" not in kinds and "new_exchange" in kinds
    start = next(c[1] for c in rec.calls if c[0] == "new_exchange")
    _check_described(start, start["meta"])
    assert "response_headers" not in start
    final = [c[1] for c in rec.calls if c[0] == "update_exchange"][-1]
    assert final["outcome"] == "complete" and final["status"] == 200
    assert ["X-Up", "1"] in final["response_headers"]


HOP_REPLY = (
    b"HTTP/1.1 200 Fine\r\nContent-Type: application/json\r\nConnection: keep-alive, X-Hop\r\n"
    b"X-Hop: gone\r\nKeep-Alive: timeout=5\r\nX-Raw: caf\xc3\xa9 \xff\r\n"
    b"Content-Length: %d\r\n\r\n%b" % (len(RESULT), RESULT)
)


def test_response_head_goes_to_the_host_as_the_upstream_sent_it() -> None:
    """Names, casing, order and value bytes kept; hop-by-hop and Connection-named ones
    dropped; the upstream's reason phrase kept."""

    async def run() -> bytes:
        rec = Recorder()
        relay = HTTPRelay(
            RelayConfig("http://upstream.test/mcp", port=0), rec, pool=FakeUpstreamPool(HOP_REPLY)
        )
        url = await relay.start()
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        def raw_exchange() -> bytes:
            import socket

            body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(
                    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%b"
                    % (len(body), body)
                )
                got = b""
                while not got.endswith(RESULT):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                return got

        try:
            return await asyncio.to_thread(raw_exchange)
        finally:
            await relay.close()

    got = asyncio.run(run())
    assert got == (
        b"HTTP/1.1 200 Fine\r\nContent-Type: application/json\r\nX-Raw: caf\xc3\xa9 \xff\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(RESULT), RESULT)
    )


def test_raw_record_takes_subclasses_of_plain_types_as_those_types() -> None:
    """The record is marshalled, which takes exact built-in types only: a ``StrEnum`` or
    ``IntEnum`` member the relay put in a field arrives as its plain value, where it used to
    make ``pack`` raise on the relay's event loop."""

    class Tag(StrEnum):
        OK = "complete"

    class Code(IntEnum):
        TEAPOT = 418

    fields: dict[str, Any] = {"outcome": Tag.OK, "status": Code.TEAPOT}
    meta: dict[str, Any] = {"why": [Tag.OK, {"code": Code.TEAPOT}], "raw": bytearray(b"x")}
    frames = [Frame(Direction.C2S, Channel.HTTP, bytearray(b"{}"), 5, 2.0)]
    item = unpack(pack("sid", 1, fields, meta, _raw(), frames), Redactor.from_options())
    assert item.fields["outcome"] == "complete" and type(item.fields["outcome"]) is str
    assert item.fields["status"] == 418 and type(item.fields["status"]) is int
    why = item.fields["meta"]["why"]
    assert type(why[0]) is str and type(why[1]["code"]) is int
    assert item.frames[0].raw == b"{}"


class RawRecorder(Recorder):
    """A list recorder that takes exchanges raw, described as the recorder process does."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def record_http(
        self,
        session_id: str,
        *,
        frames: list[Frame],
        raw: Any,
        fields: dict[str, Any],
        meta: dict[str, Any],
    ) -> int:
        item = unpack(pack(session_id, 0, fields, meta, raw, frames), self.redactor)
        self.calls.append(("record_exchange", (item.frames, item.fields)))
        return len(self.calls)


def _sse(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


def test_events_after_the_host_left_keep_the_described_meta() -> None:
    """The host closes a POST's event stream once it has the answer; the upstream's later
    events are counted with an update of the exchange's meta, which must still hold what the
    recorder described (local URL, MCP headers) though the relay handed the heads over raw."""
    answer = b"event: message\r\ndata: " + RESULT + b"\r\n\r\n"
    later = b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/x"}\r\n\r\n'
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    pool = FakeUpstreamPool([(0.0, head + _sse(answer)), (0.3, _sse(later) + b"0\r\n\r\n")])

    async def run() -> RawRecorder:
        config = RelayConfig("http://upstream.test/mcp", port=0)
        rec = RawRecorder(config.redactor)
        relay = HTTPRelay(config, rec, pool=pool)
        url = await relay.start()
        port = int(url.rsplit(":", 1)[1].split("/")[0])

        def host() -> None:
            import socket

            body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}'
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(
                    b"POST /mcp?token=abc HTTP/1.1\r\nHost: 127.0.0.1\r\nMcp-Method: tools/call\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
                )
                got = b""
                while RESULT not in got:
                    got += s.recv(65536)
            # closed here, with the answer: the rest of the stream is read aside

        try:
            await asyncio.to_thread(host)
            # The rest of the stream (0.3 s later) is read aside and ends the exchange.
            assert await until(lambda: any(c[0] == "update_exchange" for c in rec.calls), 10)
        finally:
            await relay.close()
        return rec

    rec = asyncio.run(run())
    (_frames, fields) = next(c[1] for c in rec.calls if c[0] == "record_exchange")
    assert fields["meta"]["host_closed_after_response"] is True
    update = [c[1] for c in rec.calls if c[0] == "update_exchange"][-1]
    assert update["meta"]["events_after_host_closed"] == 1
    assert update["meta"]["local_url"].endswith("/mcp?token=[REDACTED]")
    assert update["meta"]["mcp_headers"] == {"Mcp-Method": "tools/call"}
