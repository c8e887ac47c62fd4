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


def test_exchange_rows_of_any_columns_and_frame_flags_are_stored(
    db_path: Path, db_url: str
) -> None:
    """Exchange rows go to the backend with only the columns they have (a missing one is NULL,
    an update folded in), and frame flags as the builder makes them (0/1) fit a bool column."""
    from mcp_proxy.frames import Frame

    rec = Recorder(db_url)
    sid = rec.new_session(transport="http", name="exchanges")
    a = rec.new_exchange(sid, method="POST", url="http://up/mcp", started_at=1.0)
    rec.update_exchange(a, status=200, ended_at=2.0, outcome="ok")
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    frames = [
        Frame(Direction.C2S, Channel.HTTP, body, 1, 1.0, True),
        Frame(Direction.S2C, Channel.HTTP, b'{"jsonrpc":"2.0","id":1,"res', 2, 2.0, False),
    ]
    b = rec.record_exchange(
        sid, frames=frames, method="GET", url="/x", started_at=3.0, status=404, not_a_column="x"
    )
    rec.end_session(sid)
    rec.start()
    rec.close()
    got = rdb.rows(
        db_path,
        "SELECT method, url, status, started_at, ended_at, outcome, error, response_size"
        " FROM http_exchanges ORDER BY id",
    )
    assert [tuple(r.values()) for r in got] == [
        ("POST", "http://up/mcp", 200, 1.0, 2.0, "ok", None, None),
        ("GET", "/x", 404, 3.0, None, None, None, None),
    ]
    assert b != a
    frames_ = rdb.frames(db_path, sid)
    assert [(f["complete"], f["partial_parse"]) for f in frames_] in (
        [(1, 0), (0, 0)],  # SQLite
        [(True, False), (False, False)],  # PostgreSQL's bool column
    )
    assert all(f["http_exchange_id"] is not None for f in frames_)
