"""What the PostgreSQL outage tests share: a cluster of their own, a recording, the accounting.

``tests/store/test_pg_outage.py`` (PostgreSQL stops mid-recording) and
``tests/recorder/test_pg_unreachable_at_start.py`` (PostgreSQL not up yet when recording starts)
drive the same real ``mcptape record`` over the raw echo server against a cluster they stop and
start themselves, and check the same promise at the end: recorded frames plus the frames a
``recorder.gap`` finding names are exactly everything that crossed the wire.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_proxy.store.engine import ensure_schema
from tests.conftest import in_ci, mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.db import PgCluster

PY = sys.executable


def own_cluster(*, migrated_and_stopped: bool = False) -> Iterator[PgCluster]:
    """A running cluster of the test module's own (for a module-scoped fixture to yield from);
    ``migrated_and_stopped``: at the schema head, then stopped (the test starts it).

    Fails in CI and skips locally when the PostgreSQL binaries cannot start one.
    """
    try:
        c = PgCluster.create()
        c.start()
        if migrated_and_stopped:
            ensure_schema(c.url())
            c.stop("fast")
    except Exception as exc:  # pragma: no cover - depends on the machine
        if in_ci():
            pytest.fail(f"cannot start a PostgreSQL cluster: {exc}", pytrace=False)
        pytest.skip(f"cannot start a PostgreSQL cluster: {exc}")
    try:
        yield c
    finally:
        c.destroy()


def record(url: str, name: str) -> subprocess.Popen[bytes]:
    """``mcptape record`` of the raw echo server into ``url``, pipes on all three streams."""
    return subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", url, "--name", name, "--",
         PY, "-m", "mcp_proxy.testing.rawecho"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def exchange(proc: subprocess.Popen[bytes], i: int) -> float:
    """One request and its answer; returns the round trip in seconds."""
    assert proc.stdin and proc.stdout
    t0 = time.perf_counter()
    proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line.startswith(b'{"jsonrpc":"2.0","id":%d,' % i), line
    return time.perf_counter() - t0


def accounted(url: str, exchanges: int) -> tuple[dict[str, Any], list[int], list[dict[str, Any]]]:
    """Check that recorded plus lost frames are every frame of ``exchanges`` round trips, and
    that ``gap_count``/``frame_count`` agree; returns the session, its seqs and gap findings."""
    (session,) = rdb.sessions(url)
    seqs = [f["seq"] for f in rdb.frames(url, session["id"])]
    gaps = rdb.rows(url, "SELECT * FROM findings WHERE code = 'recorder.gap'")
    assert gaps, "the loss must be recorded as a finding once the database is back"
    lost = [s for g in gaps for s in json.loads(g["frame_seqs"])]
    total = 2 * exchanges
    assert session["gap_count"] == len(lost) > 0
    assert sorted(seqs + lost) == list(range(1, total + 1))
    assert session["frame_count"] == len(seqs) == total - len(lost)
    assert seqs[-1] == total  # the exchanges after the database came back are all recorded
    return session, seqs, gaps
