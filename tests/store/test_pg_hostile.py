"""Values PostgreSQL refuses where SQLite takes anything, through the real relay.

PostgreSQL text cannot hold a NUL character nor a lone surrogate, an INTEGER holds 32 bits and
a BIGINT 64: a peer can put any of these in a method name, an id or an error code. Whatever a
peer sends, every frame's exact bytes must be recorded (the derived columns may be left empty),
its neighbours in the same batch too, and nothing may be counted as lost.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.db import PgServer

HOSTILE = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/\\u0000call"}\n',  # NUL in a method
    b'{"jsonrpc":"2.0","id":"a\\u0000b","method":"ping"}\n',  # NUL in an id
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',  # lone surrogate in an id
    b'{"jsonrpc":"2.0","id":7,"method":"tools/\\udfff"}\n',  # ... and in a method
    b'{"jsonrpc":"2.0","id":8,"error":{"code":%d,"message":"big"}}\n' % (2**40),
    b'{"jsonrpc":"2.0","id":9,"error":{"code":%d,"message":"huge"}}\n' % (2**70),
    json.dumps({"jsonrpc": "2.0", "id": "x" * 400, "method": "ping"}).encode() + b"\n",
]

pytestmark = pytest.mark.timeout(120)


def test_hostile_values_are_recorded_on_postgresql(pg_server: PgServer):
    url = pg_server.create_database()
    try:
        plain = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(100, 140)]
        lines = plain[:20] + HOSTILE + plain[20:]
        # ``cat`` as the server: every line comes back, so each is one c2s and one s2c frame.
        proc = subprocess.run(
            [*mcptape_cmd(), "record", "--db", url, "--name", "hostile", "--", "cat"],
            input=b"".join(lines),
            capture_output=True,
            timeout=90,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == b"".join(lines)
        assert b"Traceback" not in proc.stderr and b"gap" not in proc.stderr, proc.stderr
        (s,) = rdb.sessions(url)
        assert s["gap_count"] == 0 and s["frame_count"] == 2 * len(lines)
        assert rdb.stream(url, s["id"], "c2s") == b"".join(lines)
        assert rdb.stream(url, s["id"], "s2c") == b"".join(lines)
        gaps = rdb.rows(url, "SELECT * FROM findings WHERE code = 'recorder.gap'")
        assert gaps == []
    finally:
        pg_server.drop_database(url)
