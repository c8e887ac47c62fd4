"""``store/engine.py`` ``Driver`` (the driver modules' connections) opens the database the URL
names, with its options: a SQLite URL with a query (``?mode=ro&uri=true``) was opened as a plain
file named after the URL's text — a new, empty database in the current folder, written to
instead of refusing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mcp_proxy.errors import StoreError
from mcp_proxy.store.engine import Driver


def test_a_read_only_uri_is_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "ro.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    monkeypatch.chdir(tmp_path)
    driver = Driver(f"sqlite:///file:{db}?mode=ro&uri=true")
    try:
        with pytest.raises(StoreError, match="readonly"), driver.transaction() as c:
            c.execute("INSERT INTO t VALUES (1)")
    finally:
        driver.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.db"]  # no stray database
    assert sqlite3.connect(db).execute("SELECT count(*) FROM t").fetchone() == (0,)
