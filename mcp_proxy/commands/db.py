"""``mcptape db upgrade|status|copy``: look after a database, shared or not.

A SQLite file is migrated by whoever opens it. A shared PostgreSQL database is not: recorders
and dashboards of different mcptape versions may use it at once, so its schema moves only when
someone runs ``mcptape db upgrade`` (once, after upgrading mcptape), and an mcptape that finds a
newer schema than it knows refuses it with a clear message instead of writing into it.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Annotated

import typer

from mcp_proxy.cli import EXIT_STORE, app, fail, handle_errors
from mcp_proxy.commands.common import Format, FormatOption, json_errors, print_json

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


@dataclass(frozen=True)
class StatusResult:
    """What ``db status`` found (``--format json`` prints it as it is)."""

    url: str
    dialect: str
    revision: str | None
    head: str
    state: str
    auto_upgrade: bool
    message: str


@db_app.command("status")
@handle_errors
def status(
    db: DbOption = None,
    fmt: FormatOption = Format.text,
    as_json: Annotated[
        bool, typer.Option("--json", hidden=True, help="Deprecated: --format json.")
    ] = False,
) -> None:
    """Where the database's schema stands against this mcptape.

    Exit status: 0 when it is current, 3 when it needs `mcptape db upgrade`, is newer than this
    mcptape, or cannot be reached, 4 when there is no SQLite file at the path (none is created);
    an empty database is reported (exit 0: it is created on first use).
    """
    from mcp_proxy.commands.common import require_database
    from mcp_proxy.store.engine import auto_migrates, resolve_url, schema_state

    if as_json:
        fmt = Format.json
    json_errors(fmt)
    url = resolve_url(db)
    require_database(url)  # status only looks: a --db typo must not create a database
    st = schema_state(url)
    auto = auto_migrates(url)
    advice = {
        "current": "up to date",
        "empty": "empty: the schema is created on first use (or now, with `mcptape db upgrade`)",
        "behind": (
            "behind: it is upgraded the next time mcptape opens it"
            if auto
            else "behind: run `mcptape db upgrade` once (recorders refuse it until then)"
        ),
        "newer": "newer than this mcptape: upgrade mcptape to use it",
    }[st.state]
    result = StatusResult(st.url, st.dialect, st.current, st.head, st.state, auto, advice)
    if fmt is Format.json:
        print_json(asdict(result))
    else:
        print(f"database  {result.url} ({result.dialect})")
        print(f"schema    {result.revision or '-'} (this mcptape: {result.head})")
        print(f"state     {result.message}")
    if st.state in ("behind", "newer") and not (st.state == "behind" and auto):
        raise typer.Exit(EXIT_STORE)


@dataclass(frozen=True)
class UpgradeResult:
    """What ``db upgrade`` did: the schema revision before and after (``None``: empty)."""

    url: str
    before: str | None
    after: str
    upgraded: bool

    def text(self) -> str:
        if not self.upgraded:
            return f"{self.url}: already at schema {self.after}"
        return f"{self.url}: schema {self.before or 'empty'} → {self.after}"


@db_app.command("upgrade")
@handle_errors
def upgrade(db: DbOption = None, fmt: FormatOption = Format.text) -> None:
    """Create the schema or migrate it to this mcptape's revision.

    Safe to run twice, and by two people at once: PostgreSQL orders them with a lock and
    upgrades in one transaction.
    """
    from mcp_proxy.errors import StoreError
    from mcp_proxy.store import engine as engine_mod

    json_errors(fmt)
    url = engine_mod.resolve_url(db)
    st = engine_mod.schema_state(url)
    if st.state == "newer":
        fail(
            f"the database is at schema {st.current}, newer than this mcptape ({st.head});"
            " upgrade mcptape instead",
            EXIT_STORE,
        )
    if st.state == "current":
        result = UpgradeResult(st.url, st.current, st.head, upgraded=False)
    else:
        try:
            before = engine_mod.upgrade(url)
        except StoreError:
            raise
        except Exception as exc:  # alembic's errors and the driver's: one line
            raise StoreError(f"cannot migrate the database: {engine_mod.error_line(exc)}") from exc
        # before == head: someone else upgraded it while we waited for the lock
        result = UpgradeResult(st.url, before, st.head, upgraded=before != st.head)
    if fmt is Format.json:
        print_json(asdict(result))
    else:
        print(result.text())


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
    fmt: FormatOption = Format.text,
) -> None:
    """Copy recordings from SRC to DST (e.g. a laptop's SQLite file into the team's PostgreSQL).

    Sessions keep their ids, frames, HTTP exchanges, findings, annotations and links (a
    replay's replay_of). Running it again copies only what changed; annotations written in DST
    are kept.
    """
    from mcp_proxy.store.copy import copy_store
    from mcp_proxy.store.engine import display_url, resolve_url

    json_errors(fmt)
    src_url, dst_url = resolve_url(src), resolve_url(dst)

    def progress(line: str) -> None:
        if not quiet and sys.stderr.isatty():
            print(f"\r  {line}", end="", file=sys.stderr, flush=True)

    result = copy_store(src_url, dst_url, only=session or None, progress=progress)
    if not quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    if fmt is Format.json:
        print_json({"from": display_url(src_url), "to": display_url(dst_url), **asdict(result)})
        return
    print(
        f"{display_url(src_url)} → {display_url(dst_url)}: {result.copied} session(s) copied,"
        f" {result.replaced} updated, {result.unchanged} already there;"
        f" {result.frames} frame(s), {result.exchanges} HTTP exchange(s),"
        f" {result.findings} finding(s), {result.annotations} annotation(s)"
    )
