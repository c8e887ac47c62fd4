"""PostgreSQL is not up yet when a recording starts (issue 14): the recorder keeps trying.

A real ``mcptape record`` starts while the test's own PostgreSQL cluster is stopped (the socket
does not exist: every connection is refused at once). The client talks to the server for a few
seconds, the cluster starts, the client goes on. What must hold:

- the traffic flows from the first request: nothing waits for the database;
- once PostgreSQL answers, the recorder connects by itself — the session row is written, and
  every frame relayed after that is recorded;
- what was relayed before is counted, not silently dropped: a ``recorder.gap`` finding says
  how many frames and which sequence numbers, ``gap_count`` agrees, and recorded plus lost
  frames are exactly everything that crossed the wire.

Before this, a recorder that could not open its database at start recorded nothing at all for
the whole session, even after the database came up.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from tests.helpers import db as rdb
from tests.helpers.db import PgCluster
from tests.store.pg_outage_util import accounted, exchange, own_cluster, record

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(pg_server: object) -> Iterator[PgCluster]:
    """A cluster of this module's own, migrated, then stopped: the test starts it."""
    del pg_server
    yield from own_cluster(migrated_and_stopped=True)


def test_a_recording_started_before_postgresql_is_up_connects_when_it_is(
    cluster: PgCluster,
) -> None:
    url = cluster.url()
    assert not cluster.running()
    proc = record(url, "early")
    assert proc.stderr is not None
    err_lines: list[str] = []
    reader = threading.Thread(
        target=lambda: err_lines.extend(line.decode() for line in proc.stderr),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    n = 1
    slowest_down = 0.0
    try:
        exchange(proc, n)  # the first one waits for the relay and the server to start: untimed
        # Talk until the recorder process has tried the database (and said so), then a bit more.
        deadline = time.monotonic() + 60
        while not any("cannot record" in line for line in err_lines):
            assert time.monotonic() < deadline, "the recorder never said it could not connect"
            n += 1
            slowest_down = max(slowest_down, exchange(proc, n))
            time.sleep(0.02)
        for _ in range(10):
            n += 1
            slowest_down = max(slowest_down, exchange(proc, n))
        before = n
        cluster.start()
        # connected by itself: the session row appears while the session is still live
        assert rdb.wait_until(lambda: len(rdb.sessions(url)) == 1, timeout=30)
        back_until = time.monotonic() + 1.5
        while time.monotonic() < back_until:
            n += 1
            exchange(proc, n)
            time.sleep(0.02)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(120)
    assert proc.returncode == 0
    reader.join(30)
    err = "".join(err_lines)
    assert "cannot record to the database" in err and "trying again" in err, err
    assert "recording resumed" in err, err
    assert slowest_down < 1.0, slowest_down  # the relay never waited for the database

    session, _, gaps = accounted(url, n)
    assert session["name"] == "early" and session["status"] == "ended"
    (gap,) = gaps
    assert "could not be opened" in gap["detail"]
    assert len(json.loads(gap["frame_seqs"])) >= 2 * before  # all relayed while it was down
