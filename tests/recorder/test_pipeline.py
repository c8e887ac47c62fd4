"""The recorder process writes batch N on its insert thread while it builds batch N+1
(``BatchRunner(pipelined=True)``): the order of frames, the counts and the loss accounting must
be exactly those of writing each batch in turn, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.recorder import runner as runner_mod
from mcp_proxy.recorder.contract import Chunk, SessionStart, SessionUpdate
from mcp_proxy.recorder.runner import BatchRunner
from tests.helpers import db as rdb

pytestmark = pytest.mark.both_dialects

SID = "p" * 32
S2C, STDIO = Direction.S2C, Channel.STDIO


def _lines(first: int, n: int) -> bytes:
    return b"".join(
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":%d}}\n' % k
        for k in range(first, first + n)
    )


def _start(runner: BatchRunner) -> None:
    runner.feed(
        SessionStart({"id": SID, "transport": "stdio", "status": "live", "started_at": 1.0})
    )


def test_pipelined_batches_keep_order_and_counts(db_path: Path | str, db_url: str) -> None:
    runner = BatchRunner(db_url, pipelined=True)
    assert runner.open()
    _start(runner)
    runner.feed(Chunk(SID, S2C, STDIO, _lines(0, 3), 0, 1.0))
    runner.flush()
    assert runner._pipe is None  # a small batch is written at once, on this thread
    sent = 3
    for _batch in range(20):
        for _ in range(3):  # a few reads per batch, as the worker cuts them
            runner.feed(Chunk(SID, S2C, STDIO, _lines(sent, 100), sent, 1.0 + sent))
            sent += 100
        runner.flush()  # batch N goes to the insert thread; N+1 is built meanwhile
        assert runner._pipe is not None and runner._pipe.busy
    runner.feed(SessionUpdate(SID, {"status": "ended", "ended_at": 99.0}))
    stats = runner.finish()
    assert stats.frames_written == sent == 6003 and stats.frames_lost == 0
    assert runner._pipe is None  # finish() stopped the thread
    frames = rdb.frames(db_path, SID)
    assert [f["seq"] for f in frames] == list(range(1, sent + 1))
    assert [f["raw"] for f in frames[:2]] == _lines(0, 2).splitlines(keepends=True)
    s = rdb.sessions(db_path)[0]
    assert (s["frame_count"], s["gap_count"], s["status"]) == (sent, 0, "ended")


@pytest.mark.sqlite_only
def test_a_batch_refused_while_the_next_was_built_is_counted_once(
    db_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 2 is refused (the file is locked past every retry) while batch 3 is being built:
    batch 3's session count must leave out batch 2's lost frames (it was built counting them),
    and the gap goes in with batch 3 once the lock is gone."""
    monkeypatch.setattr(runner_mod, "PIPELINE_MIN_FRAMES", 1)  # small batches, same path
    warnings: list[str] = []
    runner = BatchRunner(db_url, pipelined=True, retry_delays=(0.01,), warn=warnings.append)
    assert runner.open()
    assert runner.writer is not None
    runner.writer.backend.conn.execute("PRAGMA busy_timeout=50")  # type: ignore[attr-defined]
    _start(runner)
    runner.feed(Chunk(SID, S2C, STDIO, _lines(0, 10), 1, 1.0))
    runner.flush()
    runner._settle()  # batch 1 is in
    lock = sqlite3.connect(db_path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    runner.feed(Chunk(SID, S2C, STDIO, _lines(10, 5), 2, 2.0))
    runner.flush()  # batch 2: on the insert thread, waiting for the lock
    assert runner.owes()
    runner.feed(Chunk(SID, S2C, STDIO, _lines(15, 7), 3, 3.0))
    runner.feed(SessionUpdate(SID, {"name": "locked"}))  # the chunk's rows are built now
    assert runner.builder.pending_frames == 7
    pipe = runner._pipe
    assert pipe is not None
    # Both attempts of batch 2 run into the lock.
    assert rdb.wait_until(lambda: pipe._done is not None, timeout=30)
    lock.execute("ROLLBACK")
    lock.close()
    runner.flush()  # settles batch 2 (refused), then writes batch 3 with the gap
    stats = runner.finish()
    assert stats.frames_lost == 5 and stats.write_errors == 2
    assert any("recording gap" in w for w in warnings)
    frames = rdb.frames(db_path, SID)
    assert [f["seq"] for f in frames] == [*range(1, 11), *range(16, 23)]
    s = rdb.sessions(db_path)[0]
    assert (s["frame_count"], s["gap_count"]) == (17, 5)
    gap = [f for f in rdb.rows(db_path, "SELECT * FROM findings") if f["code"] == "recorder.gap"]
    assert len(gap) == 1 and "5 frame(s)" in gap[0]["title"]
