"""``show -x`` runs the one bounded pass over a stored session (issue #24: one way to analyse a
stored session and store what it found): the pass stores the session's findings *and* its
per-method numbers, so that the next ``check`` and ``stats`` are reads; a second ``show -x``
writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_proxy.analysis import service
from tests.analysis.cases import CASES
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape


def test_show_x_stores_findings_and_numbers_then_check_and_stats_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "x.db"
    sid = CASES["transport.exit_with_pending"][0]().record("sqlite:///" + str(db), name="crashy")
    assert rdb.rows(db, "SELECT * FROM session_stats") == []
    shown = run_mcptape("show", "crashy", "-x", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "transport.exit_with_pending" in shown.stdout  # its findings, printed after
    [row] = rdb.rows(db, "SELECT session_id FROM session_stats")
    assert row["session_id"] == sid  # (the async way stored the findings only)
    summary = rdb.rows(db, "SELECT id FROM findings WHERE code = 'analysis.summary'")
    assert len(summary) == 1

    passes: list[int] = []
    real = service.stream_analysis
    monkeypatch.setattr(
        service, "stream_analysis", lambda *a, **k: passes.append(1) or real(*a, **k)
    )
    assert run_mcptape("check", "crashy", "--db", str(db)).returncode != 0  # (it has errors)
    assert run_mcptape("stats", "crashy", "--db", str(db)).returncode == 0
    assert passes == []  # both read what show -x stored
    again = run_mcptape("show", "crashy", "-x", "--db", str(db))
    assert again.stdout == shown.stdout and passes == [1]
    assert rdb.rows(db, "SELECT id FROM findings WHERE code = 'analysis.summary'") == summary
