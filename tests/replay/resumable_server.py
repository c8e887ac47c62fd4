"""A Streamable HTTP test server with an event store, whose tool closes its own SSE stream.

``interrupted`` reports progress, closes the POST's SSE stream mid-call (``ctx.close_sse_stream``,
the 2025-11-25 polling pattern), then finishes; the SDK client resumes with ``GET`` +
``Last-Event-ID`` and the event store replays what it missed. That is a real reconnect for the
relay to record and for replay to reproduce. Run: ``python -m tests.replay.resumable_server``;
it announces its URL like the other test servers.
"""

from __future__ import annotations

import itertools
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

from mcp_proxy.testing.server import _serve_http


class MemoryEventStore(EventStore):
    """Every event of every stream, in memory (a test server lives for one test)."""

    def __init__(self) -> None:
        self.events: list[tuple[StreamId, EventId, object]] = []
        self.ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: object) -> EventId:
        event_id = str(next(self.ids))
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = [i for i, (_, eid, _) in enumerate(self.events) if eid == last_event_id]
        if not found:
            return None
        stream = self.events[found[0]][0]
        for sid, eid, message in self.events[found[0] + 1 :]:
            if sid == stream and message is not None:
                await send_callback(EventMessage(message, eid))  # type: ignore[arg-type]
        return stream


def build() -> MCPServer:
    server = MCPServer(name="mcptape-resume", version="1.0.0")

    @server.tool(description="Report progress, drop the stream, finish after the reconnect.")
    async def interrupted(ctx: Context, steps: int = 2) -> str:
        await ctx.report_progress(1, steps, "before the break")
        await ctx.close_sse_stream()
        await anyio.sleep(0.3)  # scenario: the rest comes after the reconnect (or is replayed)
        for step in range(2, steps + 1):
            await ctx.report_progress(step, steps, "after the break")
        return f"finished {steps} steps across a reconnect"

    return server


def main() -> None:
    app = build().streamable_http_app(event_store=MemoryEventStore(), retry_interval=100)
    anyio.run(_serve_http, app, "127.0.0.1", 0, "/mcp")


if __name__ == "__main__":
    sys.exit(main())
