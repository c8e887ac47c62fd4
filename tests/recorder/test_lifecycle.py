"""The relay's lifecycle under faults, through the real ``mcptape record`` (issue 10, defects 1,
7 and 8): a recorder process that dies is noticed and replaced, the host sees the server's EOF
when it happens, and the server never outlives the relay.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

from tests.helpers import db as rdb
from tests.helpers.watch import QUIET
from tests.recorder.util import (
    ECHO,
    PY,
    alive,
    frame_count,
    record,
    session,
    wait_for,
    worker_pid,
)


def _ping(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i


def test_a_recorder_process_killed_mid_session_is_replaced_and_nothing_goes_unaccounted(
    db_path: Path,
) -> None:
    proc = record(db_path, ECHO, name="killed")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    for i in range(50):
        proc.stdin.write(_ping(i))
        proc.stdin.flush()
        assert proc.stdout.readline() == _ping(i)
    wait_for(lambda: frame_count(db_path, "killed") == 100, what="the first 100 frames")
    worker = worker_pid(proc.pid)
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker), what="the recorder process to die")
    # Traffic goes on; some of it while nobody is recording.
    for i in range(50, 100):
        proc.stdin.write(_ping(i))
        proc.stdin.flush()
        assert proc.stdout.readline() == _ping(i)
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    err = proc.stderr.read().decode()
    # Said once when it happens (the last line may name it again as the cause of a loss).
    assert err.count("a new one continues the recording") == 1, err
    s = session(db_path, "killed")
    frames = rdb.frames(db_path, s["id"])
    assert s["status"] == "ended"
    assert len(frames) + s["gap_count"] == 200  # every frame is recorded or counted as lost
    assert len(frames) >= 100 and s["frame_count"] == len(frames)
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(set(seqs))  # the new recorder numbers on, never over the old rows


def test_the_host_sees_eof_when_the_server_stdout_ends_not_when_recording_ends(
    db_path: Path,
) -> None:
    """The database is locked while the server crashes: the recorder cannot write for seconds,
    but the host must see EOF at once (issue 10, defect 7)."""
    proc = record(
        db_path,
        [PY, "-m", "tests.recorder.peers", "crash"],
        name="eof",
        env={"MCPTAPE_BUSY_TIMEOUT_MS": "3000"},
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(_ping(1))
    proc.stdin.flush()
    assert proc.stdout.readline() == _ping(1)
    wait_for(lambda: frame_count(db_path, "eof") == 2, what="the first frames")
    locker = sqlite3.connect(db_path, timeout=5, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        proc.stdin.write(b"crash\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"crash\n"
        t0 = time.monotonic()
        assert proc.stdout.read() == b""  # EOF
        latency = time.monotonic() - t0
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert latency < 1.5, f"host saw EOF {latency:.2f}s after the server's stdout ended"
    assert proc.wait(timeout=60) == 3
    s = session(db_path, "eof")
    assert s["status"] == "crashed" and len(rdb.frames(db_path, s["id"])) == 4


def _gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_a_server_that_ignores_sigterm_and_eof_dies_with_a_killed_relay(db_path: Path) -> None:
    proc = record(db_path, [PY, "-m", "tests.recorder.peers", "stubborn", "--child"], name="orph")
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    wait_for(lambda: rdb.sessions(db_path), what="the session row")
    proc.kill()  # the host escalates to SIGKILL: no signal handler of ours runs
    proc.wait()
    try:
        assert _gone(pids, 8), "the server (or its child) outlived mcptape"
    finally:
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)
    s = session(db_path, "orph")
    assert s["status"] == "live"  # nobody could end it: the relay was killed


def test_sigterm_is_still_forwarded_to_the_server_once(db_path: Path) -> None:
    proc = record(db_path, [PY, "-m", "tests.recorder.peers", "stubborn"], name="term")
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)  # forwarded; the stubborn server ignores it
    time.sleep(QUIET)  # a negative check: neither has exited
    assert alive(pid) and proc.poll() is None
    proc.kill()
    proc.wait()
    assert _gone([pid], 8)
