"""A full disk, for real: the database lives on a small tmpfs that the test fills up, then frees
(issue 10, defect 4). Every frame relayed meanwhile is either in the database or counted in
``gap_count`` with a ``recorder.gap`` finding once the disk accepts writes again, and the session
ends. Mounting needs root (as on this project's CI machines); without it the test cannot run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import db as rdb
from tests.helpers.watch import StreamWatch
from tests.recorder.util import ECHO, findings, frame_count, record, session, wait_for


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(path: Path) -> None:
    """Write until the file system says ENOSPC, down to its last block."""
    with open(path, "wb", buffering=0) as fh:
        for size in (1 << 16, 1 << 12, 1 << 9, 1):
            while True:
                try:
                    fh.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break


def _ping(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i


def test_frames_relayed_while_the_disk_is_full_are_counted_in_the_database(
    small_disk: Path,
) -> None:
    db = small_disk / "rec.db"
    proc = record(db, ECHO, name="full", env={"MCPTAPE_BUSY_TIMEOUT_MS": "100"})
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stderr = StreamWatch(proc.stderr)
    sent = 0

    def exchange(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            proc.stdin.write(_ping(sent))  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            assert proc.stdout.readline() == _ping(sent)  # type: ignore[union-attr]
            sent += 1

    exchange(20)
    wait_for(lambda: frame_count(db, "full") == 40, what="the first frames")
    filler = small_disk / "filler"
    _fill(filler)
    try:
        exchange(100)  # relayed while nothing can be written
        stderr.wait_for("recording gap")  # the recorder gave up its retries
    finally:
        filler.unlink()
    exchange(20)
    # Full again when the host hangs up: the recorder holds its count until the disk frees.
    _fill(filler)
    try:
        exchange(100)
        proc.stdin.close()
        # Past the retries of the last batch, the recorder says it keeps trying …
        stderr.wait_for("trying again for up to")
        assert proc.poll() is None  # … and still waits to write what it owes the database
    finally:
        filler.unlink()
    assert proc.wait(timeout=60) == 0
    err = stderr.rest()
    s = session(db, "full")
    recorded = len(rdb.frames(db, s["id"]))
    assert s["status"] == "ended"
    assert s["gap_count"] > 0, err
    assert recorded + s["gap_count"] == 2 * sent, err  # nothing lost without being counted
    assert s["frame_count"] == recorded
    gaps = [f for f in findings(db, s["id"]) if f["code"] == "recorder.gap"]
    assert gaps and sum(int(g["title"].split()[0]) for g in gaps) == s["gap_count"]
    assert "recording gap" in err
    with contextlib.suppress(FileNotFoundError):
        os.unlink(filler)
