"""A large import into SQLite builds ``frame_rows``' secondary indexes once, after its rows.

Past ``IMPORT_DEFER_INDEXES`` frames (and past the rows the table held before) the import drops
the ``msg_id`` index inside its transaction (the others take the rows in order, row by row) and creates them again before it commits: the schema after
is the one before, every index holds every row, and a failed import leaves them as they were.
The limits are made small here so that a few hundred frames cross them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mcp_proxy.errors import UserError
from mcp_proxy.recording import importer
from mcp_proxy.recording.importer import import_file
from mcp_proxy.store import recordings
from mcp_proxy.store.recordings import ImportWriter
from tests.recording.test_import_memory import write_recording


def schema(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"
        ).fetchall()


def check(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]


@pytest.fixture
def deferrals(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pages of 50 frames, indexes deferred past 100; each deferral's frames-written count."""
    monkeypatch.setattr(importer, "IMPORT_PAGE", 50)
    monkeypatch.setattr(recordings, "IMPORT_DEFER_INDEXES", 100)
    seen: list[int] = []
    defer = ImportWriter._defer_indexes

    def spy(self: ImportWriter) -> None:
        seen.append(self._written)
        defer(self)

    monkeypatch.setattr(ImportWriter, "_defer_indexes", spy)
    return seen


def _small_then_large(tmp_path: Path) -> tuple[Path, Path, list[tuple[str, str, str]]]:
    """A file holding one small imported session, its schema, and a 400-frame file to import."""
    src, db = tmp_path / "r.jsonl", tmp_path / "r.db"
    write_recording(src, 10)
    import_file(src, f"sqlite:///{db}")
    before = schema(db)
    write_recording(src, 400)
    return src, db, before


def test_a_large_import_leaves_the_schema_and_every_index_whole(
    tmp_path: Path, deferrals: list[int]
) -> None:
    src, db, before = _small_then_large(tmp_path)
    import_file(src, f"sqlite:///{db}")
    assert deferrals == [100]  # the first import was too small; the second deferred once
    assert schema(db) == before
    assert check(db) == ["ok"]
    with sqlite3.connect(db) as conn:
        used = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM frame_rows WHERE session_key = 2 AND msg_id = '3'"
        ).fetchall()
        assert "ix_frames_session_msgid" in str(used)
        assert conn.execute(
            "SELECT count(*) FROM frame_rows INDEXED BY ix_frames_requests"
            " WHERE session_key = 2 AND kind = 0"
        ).fetchone() == (200,)


def test_only_the_msg_id_index_is_deferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deferrals: list[int]
) -> None:
    src, db, _before = _small_then_large(tmp_path)
    kept: list[list[str]] = []
    defer = ImportWriter._defer_indexes  # (the fixture's spy)

    def look(self: ImportWriter) -> None:
        defer(self)
        rows = self.driver.dbapi.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'frame_rows'"
            " AND sql IS NOT NULL ORDER BY name"
        ).fetchall()
        kept.append([r[0] for r in rows])

    monkeypatch.setattr(ImportWriter, "_defer_indexes", look)
    import_file(src, f"sqlite:///{db}")
    assert deferrals == [100]
    assert kept == [
        [
            "ix_frames_exchange",
            "ix_frames_requests",
            "ix_frames_session_method",
            "uq_frames_session_seq",
        ]
    ]
    assert check(db) == ["ok"]


def test_an_import_into_a_fuller_table_keeps_its_indexes_up_to_date(
    tmp_path: Path, deferrals: list[int]
) -> None:
    src, db = tmp_path / "r.jsonl", tmp_path / "r.db"
    write_recording(src, 300)
    import_file(src, f"sqlite:///{db}")
    deferrals.clear()
    write_recording(src, 200)  # fewer than the 300 rows already there: a rebuild would cost more
    import_file(src, f"sqlite:///{db}")
    assert deferrals == []
    assert check(db) == ["ok"]


def test_a_failed_import_leaves_the_indexes_as_they_were(
    tmp_path: Path, deferrals: list[int]
) -> None:
    src, db, before = _small_then_large(tmp_path)
    lines = src.read_bytes().splitlines(keepends=True)
    src.write_bytes(b"".join(lines[:-1]))  # no end record: the file is refused at its end
    with pytest.raises(UserError, match="truncated"):
        import_file(src, f"sqlite:///{db}")
    assert deferrals == [100]
    assert schema(db) == before
    assert check(db) == ["ok"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM frame_rows").fetchone() == (10,)
