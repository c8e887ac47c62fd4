"""The import writer's page by column (``store/recordings.py`` ``frame_page``, ``ImportWriter``).

A column that holds one value on the whole page is written into the ``INSERT`` as a literal, the
others are bound: whichever way a value goes in, the stored row is the one the frame gives.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.errors import StoreError
from mcp_proxy.store.columns import CHANNEL_CODES, DIRECTION_CODES, KIND_CODES
from mcp_proxy.store.recordings import RecordingStore, frame_page

REQ = b'{"jsonrpc":"2.0","id":7,"method":"tools/call"}'
ERR = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}'


def _row(seq: int, **over: Any) -> tuple[Any, ...]:
    """A frame row (``FRAME_COLUMNS`` order): an HTTP request unless ``over`` says otherwise."""
    base = {
        "seq": seq, "ts": 1_750_000_000.0 + seq, "mono_ns": seq * 10, "direction": "c2s",
        "channel": "http", "kind": "request", "method": "tools/call", "msg_id": "7",
        "error_code": None, "size": len(REQ), "complete": True, "partial_parse": False,
        "raw": REQ, "http_exchange_id": 1, "sse_id": None, "sse_event": None,
    }  # fmt: skip
    return tuple({**base, **over}.values())


def _stored(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT seq, direction, channel, kind, method_code IS NOT NULL, msg_id, error_code,"
            " complete, partial_parse, raw, http_exchange_id, sse_id, sse_event, redacted"
            " FROM frame_rows ORDER BY seq"
        ).fetchall()


def _write(db: Path, pages: list[tuple[list[tuple[Any, ...]], set[int]]]) -> int:
    """Write ``pages`` (rows, the positions marked redacted) as one session; its exchange's id."""
    with RecordingStore(f"sqlite:///{db}", write=True) as rs, rs.import_writer() as w:
        new_id, key = w.session({"transport": "http", "status": "ended", "started_at": 1.0})
        ids = w.exchanges(
            new_id, [{"id": 1, "method": "POST", "url": "http://x/mcp", "started_at": 1.0}]
        )
        before = 0
        for rows, marked in pages:
            w.frames(key, before, frame_page(rows), marked, ids)
            before += len(rows)
        w.commit()
    return ids[1]


def test_one_value_columns_and_varying_ones_store_the_same_values(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    c2s, s2c = DIRECTION_CODES["c2s"], DIRECTION_CODES["s2c"]
    http, sse = CHANNEL_CODES["http"], CHANNEL_CODES["sse"]
    # Page 1: every literal-able column holds one value (every frame redacted, incomplete,
    # partial, on exchange 1, error code -32601). Page 2: every one of them varies.
    same = [
        _row(n, complete=False, partial_parse=True, error_code=-32601, kind="error", raw=ERR)
        for n in (1, 2)
    ]
    mixed = [
        _row(3),
        _row(4, direction="s2c", channel="sse", kind="error", method=None, error_code=-32601,
             complete=False, partial_parse=True, raw=ERR, http_exchange_id=None, sse_id="e1",
             sse_event="message"),
    ]  # fmt: skip
    ex = _write(db, [(same, {0, 1}), (mixed, {1})])
    err, req = KIND_CODES["error"], KIND_CODES["request"]
    assert _stored(db) == [
        (1, c2s, http, err, 1, "7", -32601, 0, 1, ERR, ex, None, None, 1),
        (2, c2s, http, err, 1, "7", -32601, 0, 1, ERR, ex, None, None, 1),
        (3, c2s, http, req, 1, "7", None, 1, 0, REQ, ex, None, None, None),
        (4, s2c, sse, err, 0, "7", -32601, 0, 1, ERR, None, "e1", "message", 1),
    ]


def test_values_out_of_their_columns_are_made_storable(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    long_id = '"' + "x" * 400 + '"'
    _write(db, [([_row(1, msg_id=long_id, error_code=2**70, mono_ns=2**70)], set())])
    (row,) = _stored(db)
    assert len(row[5]) <= 300 and row[5].startswith('"xxx')  # the id's short stand-in
    assert row[6] is None  # an integer past 64 bits is dropped, as the recorder drops it
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT mono_ns FROM frame_rows").fetchall() == [(0,)]


def test_an_unknown_kind_is_one_line() -> None:
    with pytest.raises(StoreError, match="unknown frame direction/channel/kind 'chat'"):
        frame_page([_row(1, kind="chat")])
