"""``FrontServer.close`` waits for every handler — also one whose host already left.

A host closing its connection cancels the handler, which then still records the exchange's
end (the forward proxy's ``host_aborted``). Stopping the server at that moment must wait for
that last work, or the recorder is closed first and the end is lost (a "recording gap" on
Ctrl-C just after a client quit; ``tests/forward/test_lean.py`` saw it 1 run in 15 under load).
"""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.relay.http.front import FrontRequest, FrontServer, RelayResponse, ignore
from tests.relay.unit.fakes import until

pytestmark = pytest.mark.timeout(20)


def test_close_waits_for_the_handler_of_a_lost_connection() -> None:
    async def main() -> list[str]:
        started = asyncio.Event()
        release = asyncio.Event()
        log: list[str] = []

        async def handler(req: FrontRequest) -> RelayResponse:
            started.set()
            try:
                await asyncio.Event().wait()  # an upstream that never answers
            except asyncio.CancelledError:
                await release.wait()  # the handler's last work, still running
                log.append("recorded")
                raise
            raise AssertionError("unreachable")

        server = FrontServer(handler, ignore)
        port = await server.listen("127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        await started.wait()
        writer.close()  # the host leaves: the handler is cancelled
        await until(lambda: not server.connections)
        closing = asyncio.create_task(server.close(grace=5))
        for _ in range(50):  # plenty of loop turns for a close() that does not wait
            await asyncio.sleep(0)
        assert not closing.done(), "close() returned while a handler was still recording"
        release.set()
        await closing
        return log

    assert asyncio.run(main()) == ["recorded"]
