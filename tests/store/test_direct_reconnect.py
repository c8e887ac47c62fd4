"""The async store's small reads go through one driver connection (``DirectStore``, issue #24);
when that connection fails — a PostgreSQL server restarted or a link dropped while a dashboard
idled, a statement refused — the store answers that one call with a ``StoreError`` line and
opens a new connection for the next, instead of failing every call until it is restarted."""

from __future__ import annotations

import pytest

from mcp_proxy.errors import StoreError
from mcp_proxy.store.queries import Store
from tests.helpers import db as rdb


async def test_a_failed_driver_connection_is_replaced(any_db_url: str) -> None:
    store = await Store.open(any_db_url)
    try:
        assert await store.recorded_findings("nope") == []
        direct = store._direct_store
        assert direct is not None
        if direct.pg:  # the server ends the connection, as a restart or an idle timeout does
            pid = direct.conn.info.backend_pid
            rdb.execute(any_db_url, "SELECT pg_terminate_backend(?)", int(pid))
        else:
            direct.conn.close()
        with pytest.raises(StoreError):
            await store.recorded_findings("nope")
        assert await store.recorded_findings("nope") == []  # a new connection
        assert await store.analysis_summary("nope") is None
    finally:
        await store.close()


async def test_a_refused_read_leaves_the_connection_usable(any_db_url: str) -> None:
    """On PostgreSQL a failed statement leaves its transaction aborted: without a rollback
    every later statement on the connection was refused."""
    store = await Store.open(any_db_url)
    try:
        assert await store.recorded_findings("nope") == []
        direct = store._direct_store
        assert direct is not None
        with pytest.raises(StoreError):
            direct._dicts("findings", "SELECT no_such_column FROM findings", ())
        assert direct.recorded_findings("nope") == []
    finally:
        await store.close()
