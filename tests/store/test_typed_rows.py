"""The typed rows of ``store/rows.py`` name exactly the columns of their tables."""

from __future__ import annotations

from mcp_proxy.store import schema
from mcp_proxy.store.rows import (
    AnnotationRow,
    FindingRow,
    HttpExchangeRow,
    SessionRow,
    SessionStatsRow,
    StoredFinding,
    ViewFrame,
)


def _columns(table: object) -> set[str]:
    return {c.name for c in table.columns}  # type: ignore[attr-defined]


def test_each_typed_row_names_its_tables_columns() -> None:
    assert set(SessionRow.__annotations__) == _columns(schema.sessions)
    assert set(StoredFinding.__annotations__) == _columns(schema.findings)
    assert set(FindingRow.__annotations__) == _columns(schema.findings) - {"id"}
    assert set(HttpExchangeRow.__annotations__) == _columns(schema.http_exchanges)
    assert set(SessionStatsRow.__annotations__) == _columns(schema.session_stats)
    assert set(AnnotationRow.__annotations__) == _columns(schema.annotations)
    assert set(ViewFrame.__annotations__) == _columns(schema.frames)
