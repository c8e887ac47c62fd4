"""``mcptape record --upstream URL --fault RULE``: the command line reaches the HTTP relay.

The other HTTP fault tests start the relay through ``record_http`` with a rules file; this one
goes through the real CLI, so a flag that parses but is never handed to the relay fails here.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import anyio
import pytest

from tests.conftest import mcptape_cmd
from tests.faults.http_rig import call
from tests.relay.conftest import start_upstream
from tests.relay.launch import relay_process

pytestmark = pytest.mark.timeout(90)


def test_record_upstream_fault_flag_is_carried_out(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with start_upstream("--transport", "http") as up:
        argv = [
            *mcptape_cmd(),
            "record",
            "--upstream",
            up.url,
            "--port",
            "0",
            "--db",
            str(db),
            "--fault",
            "http status=503 method=tools/call",
        ]
        with relay_process(argv, stop_timeout=20) as (_, url, _lines):
            seen = anyio.run(call, url)
    # The SDK client sees an error (the SDK reports any non-2xx as "Server returned an error
    # response"); without the flag reaching the relay the echo would have succeeded.
    assert seen[0] == "error", seen
    deadline = time.monotonic() + 10
    while True:
        con = sqlite3.connect(db)
        codes = [c for (c,) in con.execute("SELECT code FROM findings")]
        statuses = [s for (s,) in con.execute("SELECT status FROM http_exchanges")]
        con.close()
        if "inject.http" in codes or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "inject.http" in codes, codes
    assert 503 in statuses, statuses
