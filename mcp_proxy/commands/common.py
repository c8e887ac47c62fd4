"""What the reading commands share: the ``--db`` and ``--format`` options and opening the store.

``browse`` (sessions, show, tail) and ``analyze`` (check, stats) both use these, so neither
imports the other. Heavy modules (SQLAlchemy) are imported inside the functions: every command
module is imported when the CLI starts, including for ``mcptape record``.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mcp_proxy.store.queries import Store

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


class Format(StrEnum):
    text = "text"
    json = "json"


def json_errors(fmt: str) -> None:
    """With --format json, errors also come as one JSON line on stderr (for scripts)."""
    if fmt == Format.json:
        os.environ.setdefault("MCPTAPE_ERROR_FORMAT", "json")


async def open_store(db: str | None) -> Store:
    """Open the database a reading command was pointed at; a missing file is an error.

    A command that only reads never creates the database (or its folder): ``--db /typo/x.db``
    says there is no database there and exits 4.
    """
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import Store

    url = resolve_url(db)
    require_database(url)
    return await Store.open(url, create=False)


def require_database(url: str) -> None:
    """Raise NotFoundError (exit 4) when ``url`` names a SQLite file that does not exist.

    The message says how to get one from where the user is (``uv run mcptape demo`` after
    ``uv run``, ``mcptape demo`` when installed).
    """
    from mcp_proxy.errors import NotFoundError
    from mcp_proxy.render import cli_name
    from mcp_proxy.store.queries import missing_database

    missing = missing_database(url)
    if missing is not None:
        raise NotFoundError(
            f"no database at {missing} (record a session first — try: {cli_name()} demo —"
            " or check --db / MCPTAPE_DB)"
        )


def parse_time(value: str | None) -> float | None:
    """``--since``/``--until``: see :func:`mcp_proxy.store.filters.parse_time`."""
    from mcp_proxy.store.filters import parse_time as parse

    return parse(value)


def check_limit(limit: int) -> int | None:
    """``--limit``: 0 means all; see :func:`mcp_proxy.store.filters.check_limit`."""
    from mcp_proxy.store.filters import check_limit as check

    return check(limit)
