"""``mcptape db upgrade|status|copy``: look after a database, shared or not.

A SQLite file is migrated by whoever opens it. A shared PostgreSQL database is not: recorders
and dashboards of different mcptape versions may use it at once, so its schema moves only when
someone runs ``mcptape db upgrade`` (once, after upgrading mcptape), and an mcptape that finds a
newer schema than it knows refuses it with a clear message instead of writing into it.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from mcp_proxy.cli import EXIT_STORE, app, fail, handle_errors

db_app = typer.Typer(
    name="db",
    help="Database upkeep: schema status and upgrade, copying recordings between stores.",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


@db_app.command("status")
@handle_errors
def status(
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Where the database's schema stands against this mcptape.

    Exit status: 0 when it is current, 3 when it needs `mcptape db upgrade`, is newer than this
    mcptape, or cannot be reached, 4 when there is no SQLite file at the path (none is created);
    an empty database is reported (exit 0: it is created on first use).
    """
    from mcp_proxy.commands.common import require_database
    from mcp_proxy.store.engine import auto_migrates, resolve_url, schema_state

    url = resolve_url(db)
    require_database(url)  # status only looks: a --db typo must not create a database
    st = schema_state(url)
    advice = {
        "current": "up to date",
        "empty": "empty: the schema is created on first use (or now, with `mcptape db upgrade`)",
        "behind": (
            "behind: it is upgraded the next time mcptape opens it"
            if auto_migrates(url)
            else "behind: run `mcptape db upgrade` once (recorders refuse it until then)"
        ),
        "newer": "newer than this mcptape: upgrade mcptape to use it",
    }[st.state]
    if as_json:
        print(
            json.dumps(
                {
                    "url": st.url,
                    "dialect": st.dialect,
                    "revision": st.current,
                    "head": st.head,
                    "state": st.state,
                    "auto_upgrade": auto_migrates(url),
                }
            )
        )
    else:
        print(f"database  {st.url} ({st.dialect})")
        print(f"schema    {st.current or '-'} (this mcptape: {st.head})")
        print(f"state     {advice}")
    if st.state in ("behind", "newer") and not (st.state == "behind" and auto_migrates(url)):
        raise typer.Exit(EXIT_STORE)


@db_app.command("upgrade")
@handle_errors
def upgrade(db: DbOption = None) -> None:
    """Create the schema or migrate it to this mcptape's revision.

    Safe to run twice, and by two people at once: PostgreSQL orders them with a lock and
    upgrades in one transaction.
    """
    from mcp_proxy.errors import StoreError
    from mcp_proxy.store import engine as engine_mod

    url = engine_mod.resolve_url(db)
    st = engine_mod.schema_state(url)
    if st.state == "newer":
        fail(
            f"the database is at schema {st.current}, newer than this mcptape ({st.head});"
            " upgrade mcptape instead",
            EXIT_STORE,
        )
    if st.state == "current":
        print(f"{st.url}: already at schema {st.head}")
        return
    try:
        before = engine_mod.upgrade(url)
    except StoreError:
        raise
    except Exception as exc:  # alembic's errors and the driver's: one line
        raise StoreError(f"cannot migrate the database: {engine_mod._short(exc)}") from exc
    if before == st.head:  # someone else upgraded it while we waited for the lock
        print(f"{st.url}: already at schema {st.head}")
        return
    print(f"{st.url}: schema {before or 'empty'} → {st.head}")


@db_app.command("copy")
@handle_errors
def copy(
    src: Annotated[str, typer.Argument(help="Source database: a path or a URL.")],
    dst: Annotated[str, typer.Argument(help="Destination database: a path or a URL.")],
    session: Annotated[
        list[str] | None,
        typer.Option("--session", "-s", help="Copy only this session id (repeatable)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
) -> None:
    """Copy recordings from SRC to DST (e.g. a laptop's SQLite file into the team's PostgreSQL).

    Sessions keep their ids, frames, HTTP exchanges, findings, annotations and links (a
    replay's replay_of). Running it again copies only what changed; annotations written in DST
    are kept.
    """
    from mcp_proxy.store.copy import copy_store
    from mcp_proxy.store.engine import display_url, resolve_url

    src_url, dst_url = resolve_url(src), resolve_url(dst)

    def progress(line: str) -> None:
        if not quiet and sys.stderr.isatty():
            print(f"\r  {line}", end="", file=sys.stderr, flush=True)

    result = copy_store(src_url, dst_url, only=session or None, progress=progress)
    if not quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    print(
        f"{display_url(src_url)} → {display_url(dst_url)}: {result.copied} session(s) copied,"
        f" {result.replaced} updated, {result.unchanged} already there;"
        f" {result.frames} frame(s), {result.exchanges} HTTP exchange(s),"
        f" {result.findings} finding(s), {result.annotations} annotation(s)"
    )
