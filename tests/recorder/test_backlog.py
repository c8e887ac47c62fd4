"""The relay's backlog for the recorder process is bounded: memory, then a spill file, then
counted loss (issue 12) — with a real recorder process that is stopped (SIGSTOP) while a burst
arrives, and a real SQLite file."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from mcp_proxy.frames import Channel, Direction
from mcp_proxy.recorder.backlog import Backlog
from mcp_proxy.recorder.client import RecorderClient
from tests.helpers import db as rdb
from tests.recorder.util import wait_for


def test_the_backlog_keeps_order_across_memory_and_file_and_refuses_past_its_limit() -> None:
    b = Backlog(memory_limit=10, disk_limit=20)
    records = [bytes([65 + i]) * 4 for i in range(8)]
    accepted = [b.append(r) for r in records]
    assert accepted == [True, True, True, True, True, True, True, False]
    assert b.memory_bytes == 8 and b.nbytes == 28  # two in memory, five spilled
    out = b""
    while b:
        chunk = b.peek()[:3]  # the pipe takes a little at a time
        out += chunk
        b.consume(len(chunk))
    assert out == b"".join(records[:7])
    assert b.append(b"again") and b.memory_bytes == 5  # drained: memory first again


def test_a_burst_the_recorder_cannot_follow_is_spilled_then_counted(
    db_path: Path, db_url: str
) -> None:
    client = RecorderClient(db_url, backlog_memory=64 << 10, backlog_disk=256 << 10)
    client.start()
    sid = client.new_session(transport="stdio", name="burst")
    assert client.proc is not None
    wait_for(lambda: rdb.sessions(db_path), what="the recorder to start")
    os.kill(client.proc.pid, signal.SIGSTOP)  # the recorder cannot follow at all
    line = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"%06d"}}\n'
    sent = 0
    try:
        for i in range(400):
            chunk = b"".join(line % (i * 100 + k) for k in range(100))  # ~8 KiB per read
            client.put_chunk(sid, Direction.S2C, Channel.STDIO, chunk, time.monotonic_ns(), 1.0)
            sent += 100
        assert client._backlog.memory_bytes <= 64 << 10  # bounded, whatever the burst
        assert client._backlog.spilled_total > 0
        assert client.lost_records > 0  # past the disk limit: refused and counted
    finally:
        os.kill(client.proc.pid, signal.SIGCONT)
    client.end_session(sid)
    client.close()
    s = rdb.sessions(db_path)[0]
    recorded = len(rdb.frames(db_path, sid))
    assert s["status"] == "ended"
    assert s["gap_count"] > 0 and recorded + s["gap_count"] == sent
    gaps = rdb.rows(db_path, "SELECT detail FROM findings WHERE code = 'recorder.gap'")
    assert gaps and "backlog" in gaps[0]["detail"]
