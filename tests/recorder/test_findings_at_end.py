"""A session's findings are stored by the recorder process when the session ends (issue 24):
the first ``mcptape check`` after a recording reads them instead of analysing the session.

Through the real ``mcptape record`` (stdio relay, recorder process) and the real ``mcptape
check``: right after ``record`` exits, the session's analyzer findings and the summary row that
says what they were computed from are there and current, with the findings the analysis gives
(an unanswered request, here), and ``check`` prints them without recomputing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.catalogue import SUMMARY_CODE
from mcp_proxy.store.engine import ensure_schema
from mcp_proxy.store.queries import Store
from tests.helpers.cli import run_mcptape
from tests.recorder.util import ECHO, findings, record, session

pytestmark = pytest.mark.both_dialects

INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
)


def _url(db: Path | str) -> str:
    return db if isinstance(db, str) else "sqlite:///" + str(db)


async def _fresh(db: Path | str, sid: str) -> bool:
    store = await Store.open(_url(db))
    try:
        s = await store.get_session(sid)
        assert s is not None
        return service.is_fresh(s, await store.analysis_summary(sid))
    finally:
        await store.close()


def _record_one(db: Path | str, name: str) -> dict[str, Any]:
    """A host that sends initialize and a request; the echo server answers neither properly
    (it echoes requests back), so the analysis has findings to store."""
    proc = record(db, ECHO, name=name)
    assert proc.stdin is not None and proc.stdout is not None
    for line in (INIT, b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'):
        proc.stdin.write(line)
        proc.stdin.flush()
        assert proc.stdout.readline() == line
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return session(db, name)


def test_findings_are_stored_when_the_session_ends(db_path: Path | str) -> None:
    s = _record_one(db_path, "at-end")
    assert s["status"] == "ended"
    # Right after `record` exits: no `check` has run, yet the findings are there and current.
    rows = findings(db_path, s["id"])
    analyzer = [r for r in rows if r["source"] == "analyzer"]
    assert SUMMARY_CODE in {r["code"] for r in analyzer}, rows
    assert "exchange.no_response" in {r["code"] for r in analyzer}
    assert asyncio.run(_fresh(db_path, s["id"]))
    # The first `check` reads them: the same rows, not recomputed (their ids are kept).
    ids = sorted(r["id"] for r in analyzer)
    out = run_mcptape("check", s["id"], "--db", str(db_path), "--format", "json")  # in-process
    assert out.returncode in (0, 5), out.stderr
    printed = json.loads(out.stdout)
    assert "exchange.no_response" in {f["code"] for f in printed[0]["findings"]}, printed
    assert sorted(r["id"] for r in findings(db_path, s["id"]) if r["source"] == "analyzer") == ids


@pytest.mark.parametrize("new_file", [False, True], ids=["existing", "new"])
def test_the_recorder_process_settles_a_sqlite_session_without_sqlalchemy(
    tmp_path: Path, new_file: bool
) -> None:
    """The settle reads and writes through the driver (``store/direct.py``), and a new file is
    made from the schema snapshot (``store/sqlite_head.py``): neither SQLAlchemy, whose import
    (the async store: engine, ORM, asyncio) cost every ``mcptape record`` more CPU than
    recording a small session, nor alembic. Python's own import log, switched on by the
    environment for the relay and the recorder process alike, says what either imported."""
    db = tmp_path / "lean.sqlite"
    if not new_file:
        ensure_schema("sqlite:///" + str(db))
    proc = record(db, ECHO, name="lean", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(INIT)
    proc.stdin.flush()
    assert proc.stdout.readline() == INIT
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    log = proc.stderr.read().decode()
    imported = {line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if "|" in line}
    assert "mcp_proxy.analysis.service" in imported  # the settle ran in the recorder process
    assert not {m for m in imported if m.split(".")[0] in ("sqlalchemy", "aiosqlite", "alembic")}
    s = session(db, "lean")
    codes = {r["code"] for r in findings(db, s["id"]) if r["source"] == "analyzer"}
    assert SUMMARY_CODE in codes and "exchange.no_response" in codes
