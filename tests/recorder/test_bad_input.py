"""Hostile frames through the real ``mcptape record`` relay into a real SQLite file (issue 10,
defects 1–3 and 5): nothing a peer sends can kill or corrupt the recording.

One relay run per database state; the host sends through an echo server, so each line is one
c2s and one s2c frame and the recording must hold exactly twice what the host sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DIALECTS, fresh_db
from tests.helpers import db as rdb
from tests.recorder.util import ECHO, findings, record, session

DEEP = (
    b'{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":'
    + b"[" * 1500
    + b"]" * 1500
    + b"}\n"
)
LONG_ID = "x" * 400
BAD_VALUES = [
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',  # lone surrogate in an id
    b'{"jsonrpc":"2.0","id":7,"method":"tools/\\udfff"}\n',  # ... and in a method
    b'{"jsonrpc":"2.0","id":8,"error":{"code":%d,"message":"big"}}\n' % (2**70),
    b'{"jsonrpc":"2.0","id":9,"error":{"code":%d,"message":"small"}}\n' % (-(2**64)),
    json.dumps({"jsonrpc": "2.0", "id": LONG_ID, "method": "ping"}).encode() + b"\n",
    json.dumps({"jsonrpc": "2.0", "id": LONG_ID, "result": {}}).encode() + b"\n",
]


def _lines(hostile: list[bytes], total: int = 101) -> list[bytes]:
    n = total - len(hostile)
    plain = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(n)]
    # hostile lines in the middle of ordinary traffic: their batch neighbours must survive
    return plain[: n // 2] + hostile + plain[n // 2 :]


Run = tuple[Path | str, list[bytes], bytes, str, int]


def _run(db: Path | str, name: str, lines: list[bytes]) -> Run:
    proc = record(db, ECHO, name=name)
    out, err = proc.communicate(b"".join(lines), timeout=60)
    return db, lines, out, err.decode(), proc.returncode


@pytest.fixture(scope="module", params=DIALECTS)
def values(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    """Bad values and long ids, on a fresh database: a SQLite file and a PostgreSQL database
    (the tests that read it run once per dialect)."""
    with fresh_db(request.param, request, tmp_path_factory.mktemp("values")) as db:
        yield _run(db, "values", _lines(BAD_VALUES))


def _check_deep_run(run: Run, name: str) -> None:
    db, lines, out, err, code = run
    assert code == 0, err
    assert out == b"".join(lines)  # the relay is byte-exact whatever the recorder thinks
    s = session(db, name)
    frames = rdb.frames(db, s["id"])
    assert len(frames) == 202 and s["frame_count"] == 202 and s["gap_count"] == 0
    assert s["status"] == "ended"
    assert rdb.stream(db, s["id"], "c2s") == b"".join(lines)
    assert rdb.stream(db, s["id"], "s2c") == b"".join(lines)
    deep = [f for f in frames if f["raw"] == DEEP]
    assert [f["kind"] for f in deep] == ["undecodable", "undecodable"]
    codes = {f["code"] for f in findings(db, s["id"])}
    assert "recorder.undecodable" in codes
    assert "Traceback" not in err


def test_deep_nesting_on_a_fresh_database_records_all_202_frames(tmp_path: Path) -> None:
    _check_deep_run(_run(tmp_path / "rec.db", "deep", _lines([DEEP])), "deep")


def test_deep_nesting_on_an_existing_database_records_all_202_frames(values: Run) -> None:
    db = values[0]
    _check_deep_run(_run(db, "deep-existing", _lines([DEEP])), "deep-existing")


def test_values_no_column_can_hold_cost_nothing_but_themselves(values: Run) -> None:
    db, lines, out, err, code = values
    assert code == 0 and out == b"".join(lines), err
    s = session(db, "values")
    assert (s["frame_count"], s["gap_count"], s["status"]) == (202, 0, "ended")
    assert rdb.stream(db, s["id"], "c2s") == b"".join(lines)  # the exact bytes always go in
    rows = {bytes(f["raw"]): f for f in rdb.frames(db, s["id"]) if f["direction"] == "c2s"}
    surrogate_id = rows[BAD_VALUES[0]]
    assert surrogate_id["kind"] == "request"
    assert json.loads(surrogate_id["msg_id"]) == "\ud800"  # the id text is its JSON escape
    assert rows[BAD_VALUES[1]]["method"] == "tools/\\udfff"  # escaped, never dropped
    big, small = rows[BAD_VALUES[2]], rows[BAD_VALUES[3]]
    assert (big["kind"], big["error_code"], big["msg_id"]) == ("error", None, "8")
    assert (small["kind"], small["error_code"]) == ("error", None)
    escaped = [f for f in findings(db, s["id"]) if f["code"] == "recorder.value_escaped"]
    assert escaped and "error_code cleared" in escaped[0]["detail"]


def test_ids_longer_than_300_characters_stay_valid_json_and_pair(values: Run) -> None:
    db = values[0]
    s = session(db, "values")
    long_rows = [f for f in rdb.frames(db, s["id"]) if f["msg_id"] and LONG_ID[:50] in f["msg_id"]]
    assert len(long_rows) == 4  # request and response, each in both directions
    ids = {f["msg_id"] for f in long_rows}
    assert len(ids) == 1  # the same stand-in for every frame of that id: pairing still works
    stored = ids.pop()
    assert len(stored) <= 300
    assert json.loads(stored).startswith("x" * 100)


def test_a_database_that_never_opened_is_the_reason_on_the_last_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = record(blocker / "rec.db", ECHO, name="nodb")
    lines = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(5)]
    out, err = proc.communicate(b"".join(lines), timeout=60)
    assert proc.returncode == 0 and out == b"".join(lines)
    last = err.decode().strip().splitlines()[-1]
    assert "fell behind" not in last
    assert "10 frame(s)" in last and "could not be opened" in last, last
