"""Every outcome of an exchange through the relay, on a scripted upstream (no upstream socket).

ok (small, streamed, event stream), upstream error (refused, reset before the head, timed out,
reset mid-body), host gone, cancelled by stream close, refused ``Host``; and what each leaves
with the upstream reply (released for reuse, or closed) and in the recording.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from mcp_proxy.relay.http.upstream import UpstreamConnectError, UpstreamConnectTimeout
from tests.relay.unit.fakes import FakeUpstream, Recorder, Relay, Script, host_request, until

pytestmark = pytest.mark.timeout(20)

REQ = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
RESULT = b'{"jsonrpc":"2.0","id":1,"result":{}}'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
SSE = [("Content-Type", "text/event-stream")]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _one(script: Script, body: bytes = REQ, **kw: Any) -> tuple[Any, Recorder, FakeUpstream]:
    up = FakeUpstream(script)
    rec = Recorder()
    async with Relay(up, rec, **kw.pop("config", {})) as r:
        got = await host_request(r.port, body=body, **kw)
        await until(lambda: "outcome" in rec.exchange())
    return got, rec, up


def test_small_json_is_forwarded_whole_and_the_connection_reused() -> None:
    got, rec, up = run(_one(Script(body=[RESULT])))
    assert got.status == 200 and got.body == RESULT
    assert [k for k, _ in got.headers][:2] == ["Content-Type", "Content-Length"]
    head, sent = up.sent[0]
    assert head.startswith(b"POST /mcp HTTP/1.1\r\n") and b"Host: upstream.test\r\n" in head
    assert sent == REQ
    assert up.replies[0].released and not up.replies[0].closed
    row = rec.exchange()
    assert row["outcome"] == "complete" and row["status"] == 200
    assert [f.raw for f in rec.frames()] == [REQ, RESULT]


def test_streamed_body_goes_chunk_by_chunk() -> None:
    body: list[bytes | float | BaseException] = [b'{"jsonrpc":"2.0",', 0.01, b'"id":1,"result":{}}']
    got, rec, up = run(_one(Script(body=body, length=False)))
    assert got.status == 200 and got.body == RESULT
    assert ("Transfer-Encoding", "chunked") in got.headers
    assert up.replies[0].released
    assert rec.exchange()["outcome"] == "complete"
    assert [f.raw for f in rec.frames()] == [REQ, RESULT]


def test_event_stream_events_are_frames() -> None:
    events = [b"event: message\r\ndata: " + NOTE + b"\r\n\r\n", b": keep-alive\r\n\r\n"]
    events.append(b"event: message\r\ndata: " + RESULT + b"\r\n\r\n")
    got, rec, up = run(_one(Script(headers=SSE, body=list(events), length=False)))
    assert got.body == b"".join(events)
    assert [f.raw for f in rec.frames()] == [REQ, NOTE, RESULT]
    row = rec.exchange()
    assert row["outcome"] == "complete" and row["meta"]["sse_comments"] == 1
    assert up.replies[0].released


@pytest.mark.parametrize(
    ("error", "status", "kind", "outcome"),
    [
        (UpstreamConnectError("refused"), 502, "upstream-unreachable", "upstream_error"),
        (aiohttp.ServerDisconnectedError(), 502, "upstream-disconnected", "upstream_error"),
        (UpstreamConnectTimeout("slow"), 504, "upstream-timeout", "timeout"),
    ],
)
def test_upstream_failures_before_the_head_are_answered_by_the_relay(
    error: BaseException, status: int, kind: str, outcome: str
) -> None:
    got, rec, up = run(_one(Script(error=error)))
    assert got.status == status and ("X-Mcptape-Error", kind) in got.headers
    assert b'"id":null' in got.body
    assert len(up.sent) == 1  # sent once, never re-sent
    row = rec.exchange()
    assert row["outcome"] == outcome and row["status"] == status
    assert row["meta"]["synthesized"]["kind"] == kind
    assert [f.raw for f in rec.frames()] == [REQ]  # no frame invented for the server


def test_no_response_head_in_time_is_a_504() -> None:
    got, rec, _ = run(_one(Script(delay=5.0), config={"response_timeout": 0.05}))
    assert got.status == 504 and rec.exchange()["outcome"] == "timeout"


def test_reset_mid_small_body_is_a_502_and_the_connection_dropped() -> None:
    script = Script(
        headers=[("Content-Type", "application/json"), ("Content-Length", "100")],
        body=[b'{"jsonrpc"', aiohttp.ClientPayloadError("reset")],
    )
    got, rec, up = run(_one(script))
    assert got.status == 502 and ("X-Mcptape-Error", "upstream-reset") in got.headers
    assert rec.exchange()["outcome"] == "upstream_error"
    assert up.replies[0].closed


def test_reset_mid_stream_cuts_the_host_connection() -> None:
    script = Script(body=[b'{"jsonrpc"', aiohttp.ClientPayloadError("reset")], length=False)
    got, rec, up = run(_one(script))
    assert got.status == 200 and got.raw.endswith(b'{"jsonrpc"\r\n')  # no clean end
    row = rec.exchange()
    assert row["outcome"] == "upstream_error" and "mid-response" in row["error"]
    assert up.replies[0].closed


def test_host_closing_the_stream_cancels_the_exchange() -> None:
    """2026-07-28 era: closing the stream *is* the cancellation; the upstream reply is closed."""
    first = b"event: message\r\ndata: " + NOTE + b"\r\n\r\n"
    script = Script(headers=SSE, body=[first, 30.0, b"never"], length=False)
    got, rec, up = run(_one(script, read_until=lambda b: NOTE in b))
    assert NOTE in got.raw
    row = rec.exchange()
    assert row["outcome"] == "host_aborted"
    assert [f.raw for f in rec.frames()] == [REQ, NOTE]
    assert up.replies[0].closed


def test_host_leaving_after_its_response_completes_and_the_tail_is_read() -> None:
    answer = b"event: message\r\ndata: " + RESULT + b"\r\n\r\n"
    later = b"event: message\r\ndata: " + NOTE + b"\r\n\r\n"
    script = Script(headers=SSE, body=[answer, 0.05, later], length=False)

    async def go() -> tuple[Recorder, FakeUpstream]:
        up = FakeUpstream(script)
        rec = Recorder()
        async with Relay(up, rec) as r:
            await host_request(r.port, body=REQ, read_until=lambda b: RESULT in b)
            await until(lambda: up.replies[0].released)
        return rec, up

    rec, _ = run(go())
    row = rec.exchange()
    assert row["outcome"] == "complete" and row["meta"]["host_closed_after_response"]
    assert row["meta"]["events_after_host_closed"] == 1
    assert [f.raw for f in rec.frames()] == [REQ, RESULT, NOTE]


def test_a_foreign_host_is_refused_and_nothing_goes_upstream() -> None:
    got, rec, up = run(_one(Script(), headers={"Host": "evil.example"}))
    assert got.status == 421 and ("X-Mcptape-Error", "host-not-allowed") in got.headers
    assert up.sent == []
    row = rec.exchange()
    assert row["outcome"] == "refused" and row["meta"]["refused_host"] == "evil.example"


def test_legacy_endpoint_event_is_pointed_at_the_relay() -> None:
    ev = b"event: endpoint\r\ndata: http://upstream.test/messages?session_id=abc\r\n\r\n"

    async def go() -> tuple[Any, Recorder, int]:
        up = FakeUpstream(Script(headers=SSE, body=[ev, 30.0], length=False))
        rec = Recorder()
        async with Relay(up, rec) as r:
            got = await host_request(
                r.port,
                "GET",
                "/sse",
                headers={"Accept": "text/event-stream"},
                read_until=lambda b: b"session_id=abc" in b,
            )
            await until(lambda: "outcome" in rec.exchange())
            return got, rec, r.port

    got, rec, port = run(go())
    assert f"data: http://127.0.0.1:{port}/messages?session_id=abc".encode() in got.raw
    row = rec.exchange()
    assert row["meta"]["endpoint"]["rewritten"] is True
    assert rec.frames()[0].raw == b"http://upstream.test/messages?session_id=abc"
    new = [c for c in rec.calls if c[0] == "new_session"]
    assert new and new[0][1]["meta"]["grouping"]["sse_session_id"] == "abc"
