"""More recorder deaths than ``MAX_RESTARTS``, through the real ``mcptape record`` (issue 22,
defect 7): every frame is recorded or counted, the session ends, the last line tells the total.

Before: after the fourth death the relay stopped handing anything over and said so, but nobody
counted what it relayed from then on, the session stayed ``live``, and the last line on stderr
named only the last batch (of 600,000 frames the database held 33,854 recorded and 144,999
counted; on a fresh database the file was 0 bytes).
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from mcp_proxy.limits import MAX_RESTARTS
from tests.helpers import db as rdb
from tests.recorder.util import (
    ECHO,
    alive,
    children,
    cmdline,
    frame_count,
    record,
    session,
    wait_for,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.both_dialects]

#: Pings per round between two deaths (each is two frames: the request and its echo).
ROUND = 1500


def _workers(relay: int) -> list[int]:
    return [p for p in children(relay) if b"mcp_proxy.recorder" in cmdline(p) and alive(p)]


def _pings(start: int, n: int) -> bytes:
    return b"".join(
        b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(start, start + n)
    )


@pytest.mark.parametrize("fresh", [False, True], ids=["mid-session", "fresh-database"])
def test_every_frame_is_recorded_or_counted_across_more_deaths_than_restarts(
    db_path: Path | str, fresh: bool
) -> None:
    """``fresh``: each recorder process is killed before anything reached the database (on
    SQLite the first before it created the file), so the whole session is the last recorder's
    to write."""
    db = db_path
    proc = record(db, ECHO, name="deaths")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    sent = stored = 0
    killed: set[int] = set()
    for death in range(MAX_RESTARTS + 2):
        if death <= MAX_RESTARTS:
            # the recorder of this round (the first, or the replacement of the one just killed)
            wait_for(lambda: set(_workers(proc.pid)) - killed, what="a recorder process")
            [worker] = set(_workers(proc.pid)) - killed
        if not fresh or death > MAX_RESTARTS:
            data = _pings(sent // 2, ROUND)
            proc.stdin.write(data)
            proc.stdin.flush()
            got = b""
            while len(got) < len(data):
                got += proc.stdout.read1(1 << 16)
            assert got == data  # the relay forwards everything, recorder or not
            sent += 2 * ROUND
        if not fresh and death <= MAX_RESTARTS:  # this recorder wrote some of its round
            before = stored
            wait_for(lambda b=before: frame_count(db, "deaths") > b, what="frames written")
            stored = frame_count(db, "deaths")
        if death <= MAX_RESTARTS:  # killed while it may still be writing what it was given
            os.kill(worker, signal.SIGKILL)
            killed.add(worker)
            wait_for(lambda w=worker: not alive(w), what="the recorder process to die")
    proc.stdin.close()
    assert proc.wait(timeout=90) == 0
    lines = proc.stderr.read().decode().splitlines()
    s = session(db, "deaths")
    recorded = len(rdb.frames(db, s["id"]))
    assert s["status"] == "ended", lines
    assert recorded + s["gap_count"] == sent, (recorded, s["gap_count"], sent, lines)
    assert s["frame_count"] == recorded and s["gap_count"] > 0
    gaps = rdb.rows(db, "SELECT title FROM findings WHERE code = 'recorder.gap'")
    assert sum(int(g["title"].split()[0]) for g in gaps) == s["gap_count"]
    # The last line tells the whole loss, not the last batch's.
    pattern = (
        rf"mcptape: recording incomplete: {sent - recorded} frame\(s\) were relayed but not"
        rf" recorded \(the recorder process died {MAX_RESTARTS + 1} times, the last .+\)"
    )
    assert re.fullmatch(pattern, lines[-1]), lines
    if isinstance(db, Path):
        assert os.stat(db).st_size > 0
