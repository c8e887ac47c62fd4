"""PostgreSQL goes away in the middle of a recording, and comes back.

A real ``mcptape record`` relays a client's requests to a server while the test stops its own
PostgreSQL cluster (``pg_ctl stop -m fast``: every connection is cut, the socket disappears),
keeps talking for a few seconds, and starts the cluster again. What must hold:

- the traffic never stops: every request is answered, none waits for the database;
- the frames relayed during the outage are counted, not silently dropped: a ``recorder.gap``
  finding names how many and which sequence numbers, and the session's ``gap_count`` agrees;
- the recorder reconnects by itself: frames after the restart are recorded, and recorded
  frames plus lost frames are exactly everything that crossed the wire.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mcp_proxy.store.engine import ensure_schema
from tests.helpers import db as rdb
from tests.helpers.db import PgCluster
from tests.store.pg_outage_util import accounted, exchange, own_cluster, record

# A reliability scenario of the PostgreSQL backend, not its contract: it runs under --full
# (the default run keeps the dialect contract suite and one recording per transport there).
pytestmark = [pytest.mark.timeout(300), pytest.mark.full]


@pytest.fixture(scope="module")
def cluster(pg_server: object) -> Iterator[PgCluster]:
    """A cluster of this module's own: the test stops and restarts it (needs the PostgreSQL
    binaries, as ``pg_server`` does; depending on it skips or fails this module the same way)."""
    del pg_server
    yield from own_cluster()


def test_recording_survives_a_postgresql_restart(cluster: PgCluster):
    url = cluster.url()
    ensure_schema(url)
    proc = record(url, "outage")
    n = 0
    slowest_down = 0.0
    try:
        for _ in range(20):  # before: recorded normally
            n += 1
            exchange(proc, n)
        assert rdb.wait_until(
            lambda: rdb.rows(url, "SELECT frame_count FROM sessions")[0]["frame_count"] == 2 * n
        )
        cluster.stop("fast")
        down_until = time.monotonic() + 4.0  # longer than the recorder's retries (~1 s)
        while time.monotonic() < down_until:
            n += 1
            slowest_down = max(slowest_down, exchange(proc, n))
            time.sleep(0.02)
        cluster.start()
        back_until = time.monotonic() + 3.0
        while time.monotonic() < back_until:
            n += 1
            exchange(proc, n)
            time.sleep(0.02)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(120)
    assert proc.returncode == 0
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert "recording gap" in err, err
    # The relay never waited for the database (a ping's round trip is microseconds; allow a
    # busy machine its scheduling delays, never the seconds a blocked write would take).
    assert slowest_down < 1.0, slowest_down
    # Reconnected by itself: the last exchanges, after the restart, are in the database.
    session, _, _ = accounted(url, n)
    assert session["status"] == "ended"
