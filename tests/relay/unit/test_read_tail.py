"""``read_tail``: the rest of a response whose host left with its answer, read for the
recording by the reverse relay and the lean forward engine alike — the connection back to its
pool when the body ended in time, closed when it did not (timed out, broke, cancelled)."""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.relay.http import stream
from mcp_proxy.relay.http.stream import read_tail
from tests.relay.unit.fakes import FakeReply, Script

pytestmark = pytest.mark.timeout(20)


def _run(reply: FakeReply) -> tuple[bool, list[bytes]]:
    got: list[bytes] = []

    async def main() -> bool:
        return await read_tail(reply, got.append)  # type: ignore[arg-type]

    return asyncio.run(main()), got


def test_a_tail_that_ends_in_time_is_read_and_its_connection_released() -> None:
    reply = FakeReply(Script(body=[b"a", 0.01, b"b"]))
    assert _run(reply) == (True, [b"a", b"b"])
    assert reply.released and not reply.closed


def test_a_tail_that_breaks_closes_its_connection() -> None:
    reply = FakeReply(Script(body=[b"a", ConnectionResetError("reset")]))
    assert _run(reply) == (False, [b"a"])
    assert reply.closed and not reply.released


def test_a_tail_past_its_time_closes_its_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "TAIL_READ", 0.05)
    reply = FakeReply(Script(body=[b"a", 5.0, b"never"]))
    assert _run(reply) == (False, [b"a"])
    assert reply.closed and not reply.released


def test_a_cancelled_tail_closes_its_connection() -> None:
    reply = FakeReply(Script(body=[b"a", 5.0, b"never"]))
    got: list[bytes] = []

    async def main() -> None:
        first = asyncio.Event()

        def record(chunk: bytes) -> None:
            got.append(chunk)
            first.set()

        task = asyncio.create_task(read_tail(reply, record))  # type: ignore[arg-type]
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert got == [b"a"] and reply.closed and not reply.released
