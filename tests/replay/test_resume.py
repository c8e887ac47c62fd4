"""SSE stream resumption (issue 16): a recorded ``Last-Event-ID`` reconnect replays as one.

The server (:mod:`tests.replay.resumable_server`) closes a tool call's SSE stream mid-call; the
SDK client reconnects with ``GET`` + ``Last-Event-ID`` through the real relay, which records both
requests. ``mcptape replay`` against the same server must reconnect the same way (the replay's own
recording shows the GET with ``Last-Event-ID``) and find no difference.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.testing.client import ProgressRecorder, make_client, tool_text
from mcp_proxy.testing.process import READY_PREFIX
from tests.conftest import mcptape_cmd
from tests.travel.conftest import PY, run_cli

pytestmark = pytest.mark.timeout(180)


def _after(prefix: str):  # type: ignore[no-untyped-def]
    return lambda line: line[len(prefix) :].split()[0] if line.startswith(prefix) else None


def _resumed_gets(db: Path) -> dict[bool, int]:
    """GETs carrying Last-Event-ID, by whether their session is a replay."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT s.meta, e.request_headers FROM http_exchanges e"
            " JOIN sessions s ON s.id = e.session_id WHERE e.method = 'GET'"
        ).fetchall()
    finally:
        con.close()
    out = {True: 0, False: 0}
    for meta, headers in rows:
        names = {str(k).lower() for k, _ in json.loads(headers or "[]")}
        if "last-event-id" in names:
            out["replay_of" in json.loads(meta or "{}")] += 1
    return out


async def test_a_recorded_reconnect_replays_as_a_reconnect(tmp_path: Path) -> None:
    db = tmp_path / "resume.db"
    server = AnnouncedChild(
        [PY, "-m", "tests.replay.resumable_server"], _after(READY_PREFIX + " "), "server"
    )
    url = server.start(60.0)
    try:
        relay = [*mcptape_cmd(), "record", "--upstream", url, "--port", "0", "--db", str(db)]
        child = AnnouncedChild([*relay, "--name", "resume"], _after("mcptape: relaying "), "relay")
        local = child.start(60.0)
        try:
            async with make_client(local, mode="legacy") as client:
                progress = ProgressRecorder()
                result = await client.call_tool(
                    "interrupted", {"steps": 3}, progress_callback=progress
                )
            assert tool_text(result) == "finished 3 steps across a reconnect"
            assert [p for p, _, _ in progress.updates] == [1.0, 2.0, 3.0]
        finally:
            child.stop()
        assert _resumed_gets(db) == {True: 0, False: 1}  # the recording holds the reconnect

        replay = run_cli("replay", "resume", "--db", str(db), "--upstream", url)
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert "no differences" in replay.stdout
        assert _resumed_gets(db) == {True: 1, False: 1}  # … and so does the replay's
    finally:
        server.stop()
