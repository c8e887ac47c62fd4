"""What the reading commands share: the ``--db`` and ``--format`` options and opening the store.

``browse`` (sessions, show, tail) and ``analyze`` (check, stats) both use these, so neither
imports the other. Heavy modules (SQLAlchemy) are imported inside the functions: every command
module is imported when the CLI starts, including for ``mcptape record``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from mcp_proxy.limits import MAX_FLAG_SECONDS

if TYPE_CHECKING:
    from mcp_proxy.store.direct import DirectStore
    from mcp_proxy.store.queries import Store

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


class Format(StrEnum):
    text = "text"
    json = "json"


#: ``--format text|json`` for a command that prints a result (the same help everywhere).
FormatOption = Annotated[Format, typer.Option("--format", help="text or json.")]


def json_errors(fmt: str) -> None:
    """With --format json, errors also come as one JSON line on stderr (for scripts)."""
    if fmt == Format.json:
        from mcp_proxy.errors import ERROR_FORMAT_ENV

        os.environ.setdefault(ERROR_FORMAT_ENV, "json")  # put back by cli.handle_errors


def print_json(doc: object, *, line: bool = False) -> None:
    """A command's result as one JSON document on stdout, flushed.

    ``line``: on one line (what a long-running command prints when it is ready, for a script
    to read with one ``readline``); otherwise indented, as the other ``--format json`` outputs.
    """
    text = json.dumps(doc, ensure_ascii=False, default=str, indent=None if line else 2)
    print(text, flush=True)


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


def open_direct(db: str | None) -> tuple[str, DirectStore]:
    """The database a reading command was pointed at, through the driver (``show``, ``export``):
    ``(url, store)``, without the async store's start-up. A missing file is an error, as for
    :func:`open_store`; an older schema is brought to the head as :func:`open_store` does."""
    from mcp_proxy.store.direct import DirectStore
    from mcp_proxy.store.engine import ensure_schema, resolve_url

    url = resolve_url(db)
    require_database(url)
    ensure_schema(url)
    return url, DirectStore(url)


def require_database(url: str) -> None:
    """Raise NotFoundError (exit 4) when ``url`` names a SQLite file that does not exist.

    The message says how to get one from where the user is (``uv run mcptape demo`` after
    ``uv run``, ``mcptape demo`` when installed).
    """
    from mcp_proxy.errors import NotFoundError
    from mcp_proxy.render import cli_name
    from mcp_proxy.store.engine import plain_sqlite_file

    plain = plain_sqlite_file(url)  # a plain file is checked without importing SQLAlchemy
    if plain is not None:
        missing = None if plain.is_file() else plain
    else:
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


# --- Flag values checked by the parser itself: one line and exit 2 before anything starts ---


def port_value(port: int | None) -> int | None:
    """``--port``: 0 (any free port) to 65535, one rule and message for every command."""
    from mcp_proxy.cli import fail
    from mcp_proxy.netutil import port_problem

    problem = port_problem(port)
    if problem is not None:
        fail(problem)
    return port


def seconds_value(*, zero: str | None = None) -> Callable[[float], float]:
    """A callback for a time flag: a finite number of seconds above 0, at most a week.

    ``zero`` says what 0 means for a flag that takes it (e.g. "waits for ever"); without it
    0 is refused too, since a timeout of 0 s fails everything at once.
    """
    week = f"{MAX_FLAG_SECONDS:g}"

    def check(value: float) -> float:
        low_ok = value > 0 or (value == 0 and zero is not None)
        if not math.isfinite(value) or not low_ok or value > MAX_FLAG_SECONDS:
            lowest = "0 or more" if zero is not None else "more than 0"
            raise typer.BadParameter(
                f"{value:g} is not a number of seconds ({lowest}, at most {week}"
                + (f"; 0 {zero})" if zero is not None else ")")
            )
        return value

    return check


def redact_paths_value(paths: list[str] | None) -> list[str] | None:
    """``--redact-path``: each path must parse (a typo would otherwise redact nothing)."""
    if not paths:
        return paths
    from mcp_proxy.redact import Redactor

    try:
        Redactor.from_options(paths=paths)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return paths
