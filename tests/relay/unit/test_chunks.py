"""The one body-as-it-arrives class (``relay/http/chunks.py``) of the host's requests and the
upstream's responses: back-pressure at its mark and half of it, its end, what broke it."""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.relay.http.chunks import Chunks


class Conn:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_body(self) -> None:
        self.calls.append("pause")

    def resume_body(self) -> None:
        self.calls.append("resume")


async def test_reading_pauses_above_the_mark_once_and_resumes_at_half() -> None:
    conn = Conn()
    body = Chunks(conn, 10)
    for _ in range(4):
        body.feed(b"xxxx")  # 4, 8, 12 (pause), 16 (already paused)
    assert conn.calls == ["pause"] and body.total_bytes == 16
    assert await body.readany() == b"xxxx"  # 12 left: still above half
    assert await body.readany() == b"xxxx"  # 8
    assert await body.readany() == b"xxxx"  # 4 ≤ 5: resume
    assert conn.calls == ["pause", "resume"]
    body.feed_eof()
    assert body.complete and body.is_eof() and not body.at_eof()
    assert await body.read() == b"xxxx" and body.at_eof()


async def test_a_reader_waits_for_the_next_chunk_and_the_end() -> None:
    body = Chunks(Conn(), 1 << 20)
    loop = asyncio.get_running_loop()
    for step in (lambda: body.feed(b"a"), lambda: body.feed(b"b"), body.feed_eof):
        loop.call_soon(step)  # each after the reader found nothing and waits
    assert await body.read() == b"ab"


async def test_what_broke_the_body_is_raised_after_the_bytes_before_it() -> None:
    body = Chunks(Conn(), 1 << 20)
    body.feed(b"part")
    body.set_exception(ConnectionResetError("cut"))
    assert body.exception() is not None
    assert await body.readany() == b"part"
    with pytest.raises(ConnectionResetError):
        await body.readany()


async def test_an_ended_body_ignores_a_later_error_and_discard_drops_the_rest() -> None:
    conn = Conn()
    body = Chunks(conn, 4)
    body.feed(b"12345")  # paused
    body.feed_eof()
    body.set_exception(ConnectionResetError("late"))
    assert body.exception() is None
    assert body.read_nowait() == b"12345" and conn.calls == ["pause", "resume"]
    other = Chunks(conn, 4)
    other.feed(b"123456")
    other.discard()  # the response is out: nothing is kept, the peer reads on
    other.feed(b"more")
    assert conn.calls[-1] == "resume" and other.total_bytes == 6
