"""One schema on both dialects: alembic's head equals the models, on SQLite and on PostgreSQL.

The models (``mcp_proxy.store.schema``) are what every query is written against; the migrations
are what builds real databases. Alembic's own comparison (the one ``--autogenerate`` uses, with
types and server defaults) must find nothing to do after a from-scratch upgrade, on each
dialect; and the two migrated databases must have the same tables, columns and indexes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mcp_proxy.store.engine import current_revision, ensure_schema, known_revisions, sync_engine
from mcp_proxy.store.schema import SCHEMA_HEAD, metadata
from tests.conftest import DIALECTS
from tests.helpers.db import PgServer


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """An empty database: the migrations run from nothing."""
    if request.param == "sqlite":
        yield "sqlite:///" + str(tmp_path / "empty.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database(migrated=False)
    yield url
    server.drop_database(url)


def _diff(url: str, target: sa.MetaData) -> list[Any]:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            return list(compare_metadata(ctx, target))
    finally:
        engine.dispose()


def _shape(url: str) -> dict[str, Any]:
    engine = sync_engine(url)
    try:
        insp = sa.inspect(engine)
        return {
            t: {
                "columns": sorted(c["name"] for c in insp.get_columns(t)),
                "nullable": sorted(c["name"] for c in insp.get_columns(t) if c["nullable"]),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in insp.get_indexes(t)
                    # A unique constraint's own index: SQLite names it itself, PostgreSQL
                    # reports it beside the constraint; compared as constraints below.
                    if not i.get("duplicates_constraint") and not i["name"].startswith("sqlite_")
                ),
                "unique": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(t)),
                "pk": tuple(insp.get_pk_constraint(t)["constrained_columns"]),
                "fks": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"])
                    for f in insp.get_foreign_keys(t)
                ),
            }
            for t in sorted(insp.get_table_names())
            if t != "alembic_version"
        }
    finally:
        engine.dispose()


def test_alembic_head_matches_the_models(empty_url: str):
    ensure_schema(empty_url)
    engine = sync_engine(empty_url)
    try:
        assert current_revision(engine) == SCHEMA_HEAD
    finally:
        engine.dispose()
    assert SCHEMA_HEAD == known_revisions()[-1]
    assert _diff(empty_url, metadata) == []


def test_the_comparison_sees_a_drift(empty_url: str):
    """The check above can fail: a column the migrations never added is reported."""
    ensure_schema(empty_url)
    drifted = sa.MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(drifted)
    drifted.tables["frame_rows"].append_column(sa.Column("added_by_hand", sa.Integer))
    diff = _diff(empty_url, drifted)
    assert any(d[0] == "add_column" and d[3].name == "added_by_hand" for d in diff), diff


def test_both_dialects_build_the_same_tables(tmp_path: Path, pg_server: PgServer):
    sqlite_url = "sqlite:///" + str(tmp_path / "a.db")
    pg_url = pg_server.create_database(migrated=False)
    try:
        ensure_schema(sqlite_url)
        ensure_schema(pg_url)
        lite, pg = _shape(sqlite_url), _shape(pg_url)
        assert sorted(lite) == sorted(pg)
        for table in lite:
            assert lite[table] == pg[table], table
    finally:
        pg_server.drop_database(pg_url)
