"""``mcptape doctor``'s question about a store (``store/status.py``), asked through the driver."""

from __future__ import annotations

from pathlib import Path

from mcp_proxy.store.engine import ensure_schema
from mcp_proxy.store.status import database_status


def test_a_store_at_the_head_is_current_and_an_empty_file_has_no_schema(tmp_path: Path) -> None:
    made = tmp_path / "made.db"
    ensure_schema(f"sqlite:///{made}")
    assert database_status(f"sqlite:///{made}").state == "current"
    empty = tmp_path / "empty.db"
    empty.touch()
    assert (
        database_status(f"sqlite:///{empty}").state,
        database_status(f"sqlite:///{empty}").revision,
    ) == ("behind", None)


def test_what_cannot_be_reached_is_one_line_never_an_exception(tmp_path: Path) -> None:
    """A URL of no known database was raised as a StoreError past ``doctor``'s report."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"x" * 4096)
    for url in ("nonsense://", f"sqlite:///{junk}"):
        status = database_status(url)
        assert status.state == "unreachable" and "\n" not in status.message, status
