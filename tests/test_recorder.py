"""The in-process Recorder against a real SQLite file (no relay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.recorder import Recorder
from tests.helpers import db as rdb

pytestmark = pytest.mark.both_dialects


def test_chunks_become_frames_in_read_order_across_streams(db_path: Path, db_url: str) -> None:
    rec = Recorder(db_url)
    sid = rec.new_session(transport="stdio", name="order")
    # The s2c thread handed its response over before the c2s thread handed over the request
    # it had read earlier: the read timestamps decide.
    rec.put_chunk(
        sid, Direction.S2C, Channel.STDIO, b'{"jsonrpc":"2.0","id":1,"result":{}}\n', 200, 2.0
    )
    rec.put_chunk(
        sid, Direction.C2S, Channel.STDIO, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', 100, 1.0
    )
    rec.put_chunk(sid, Direction.C2S, Channel.STDIO, b'{"jsonrpc":"2.0","id":2,"meth', 300, 3.0)
    rec.put_chunk(sid, Direction.C2S, Channel.STDIO, b'od":"ping"}\ntail', 400, 4.0)
    rec.end_stream(sid, Direction.C2S, Channel.STDIO)
    rec.end_session(sid)
    rec.start()
    rec.close()
    frames = rdb.frames(db_path, sid)
    assert [(f["seq"], f["direction"], f["kind"], f["msg_id"], f["ts"]) for f in frames] == [
        (1, "c2s", "request", "1", 1.0),
        (2, "s2c", "response", "1", 2.0),
        (3, "c2s", "request", "2", 4.0),  # a frame carries the time of the read that ended it
        (4, "c2s", "noise", None, frames[3]["ts"]),
    ]
    assert frames[3]["complete"] == 0 and frames[3]["raw"] == b"tail"
    s = rdb.sessions(db_path)[0]
    assert (s["frame_count"], s["status"], s["gap_count"]) == (4, "ended", 0)


def test_unwritable_database_counts_every_frame_as_lost(tmp_path: Path) -> None:
    warnings: list[str] = []
    rec = Recorder("sqlite:///" + str(tmp_path / "missing-dir" / "\0bad.db"), warn=warnings.append)
    sid = rec.new_session(transport="stdio")
    for i in range(5):
        rec.put_chunk(sid, Direction.C2S, Channel.STDIO, b"{}\n", i, float(i))
    rec.start()
    stats = rec.close()
    assert stats.frames_written == 0
    assert stats.frames_lost == 5
    assert warnings and "cannot record" in warnings[0]


def test_a_finding_with_structured_detail_is_kept_as_json_text(db_path: Path, db_url: str) -> None:
    """A producer handing ``detail`` as a dict (the fault engine's ``Decision.finding()`` did)
    had its finding refused by the text column and silently lost; now it is stored as JSON."""
    rec = Recorder(db_url)
    sid = rec.new_session(transport="stdio", name="detail")
    rec.add_finding(
        sid,
        code="inject.delay",
        severity="info",
        title="injected delay",
        detail={"rule": "delay ms=5", "id": 1},
    )
    rec.end_session(sid)
    rec.start()
    rec.close()
    (row,) = rdb.rows(db_path, "SELECT code, detail FROM findings WHERE session_id = ?", sid)
    assert row["code"] == "inject.delay"
    assert json.loads(row["detail"]) == {"rule": "delay ms=5", "id": 1}
