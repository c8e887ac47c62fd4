"""``mcptape import --analyse`` stores its sessions' findings and numbers once it committed
(issue 24), as the recorder process does when a session ends: the first ``mcptape check`` and
``stats`` after the import read them instead of analysing the session. Without it an import
stores the file's rows and nothing else (an import and an export give the file back).

Through the real ``mcptape import`` and ``mcptape check``: right after the import, the summary
row that says what the findings were computed from, the findings themselves (the file's last
request is unanswered) and the per-method numbers are stored; ``check`` prints them without
recomputing (the rows keep their ids). A settle that fails costs a log line, not the import.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.catalogue import SUMMARY_CODE
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.recorder.util import findings
from tests.recording.test_import_memory import write_recording

pytestmark = pytest.mark.both_dialects


def _import(tmp_path: Path, db: Path | str, *flags: str) -> str:
    src = tmp_path / "r.jsonl"
    write_recording(src, 5)  # two exchanges answered, the third request never
    out = run_mcptape("import", str(src), "--db", str(db), "--json", *flags)
    assert out.returncode == 0, out.stderr
    [s] = json.loads(out.stdout)["sessions"]
    return str(s["id"])


def _analyzer(db: Path | str, sid: str) -> list[tuple[int, str]]:
    return [(r["id"], r["code"]) for r in findings(db, sid) if r["source"] == "analyzer"]


def test_the_first_check_after_an_import_reads_stored_findings(
    tmp_path: Path, db_path: Path | str
) -> None:
    sid = _import(tmp_path, db_path, "--analyse")
    stored = _analyzer(db_path, sid)
    codes = {code for _, code in stored}
    assert SUMMARY_CODE in codes and "exchange.no_response" in codes, stored
    assert rdb.rows(db_path, "SELECT * FROM session_stats WHERE session_id = ?", sid)
    out = run_mcptape("check", sid, "--db", str(db_path), "--format", "json")
    assert out.returncode in (0, 5), out.stderr
    printed = json.loads(out.stdout)
    assert "exchange.no_response" in {f["code"] for f in printed[0]["findings"]}, printed
    assert _analyzer(db_path, sid) == stored  # read, not recomputed


def test_a_settle_that_fails_leaves_the_import_and_the_first_check_analyses(
    tmp_path: Path,
    db_path: Path | str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(url: str, session_id: str) -> bool:
        raise RuntimeError("analysis broke")

    monkeypatch.setattr(service, "settle", broken)
    with caplog.at_level(logging.WARNING):
        sid = _import(tmp_path, db_path, "--analyse")
    assert [r.getMessage() for r in caplog.records] == [
        f"could not store the findings of {sid}: analysis broke"
    ]
    assert _analyzer(db_path, sid) == []
    monkeypatch.undo()
    out = run_mcptape("check", sid, "--db", str(db_path), "--format", "json")
    assert out.returncode in (0, 5), out.stderr
    assert SUMMARY_CODE in {code for _, code in _analyzer(db_path, sid)}


def test_without_analyse_an_import_stores_only_the_file(
    tmp_path: Path, db_path: Path | str
) -> None:
    sid = _import(tmp_path, db_path)
    assert _analyzer(db_path, sid) == []
    assert not rdb.rows(db_path, "SELECT * FROM session_stats WHERE session_id = ?", sid)
