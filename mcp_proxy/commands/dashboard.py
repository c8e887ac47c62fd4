"""``mcptape dashboard``: serve the web dashboard over the recordings."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands.common import Format, FormatOption, json_errors, port_value, print_json
from mcp_proxy.netutil import is_loopback as _is_loopback


@app.command()
@handle_errors
def dashboard(
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."
        ),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", help="Port (0 picks a free one).", callback=port_value)
    ] = 6280,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Allow binding a non-loopback address (anyone who can reach it and has the "
            "token sees all recorded traffic).",
        ),
    ] = False,
    fmt: FormatOption = Format.text,
) -> None:
    """Browse, explain and annotate recorded traffic in a browser.

    Prints the address to open; it carries this run's token, which every request needs.
    With --format json that line is one JSON object, {"url": ...}, printed once the server
    listens (a script reads one line).
    """
    import asyncio

    from dashboard.app import serve
    from mcp_proxy.commands.common import require_database
    from mcp_proxy.store.engine import ensure_schema, resolve_url

    json_errors(fmt)
    if not _is_loopback(host):
        if not allow_remote:
            fail(
                f"{host} is not a loopback address; the dashboard shows every recorded byte."
                " Pass --allow-remote to bind it anyway."
            )
        print(
            f"mcptape: WARNING: serving on {host}, reachable from other machines; the token in"
            " the URL is the only protection (no TLS).",
            file=sys.stderr,
        )
    url = resolve_url(db)
    require_database(url)  # the dashboard only reads: it never creates a database
    ensure_schema(url)  # a clear database error before the server starts, not on first page
    extra = frozenset() if _is_loopback(host) else frozenset({host.lower()})

    def announce(address: str) -> None:
        if fmt is Format.json:
            print_json({"url": address}, line=True)
        else:
            print(f"mcptape dashboard: {address}", flush=True)
        print(
            "  (Ctrl-C to stop; the token in the address is needed for every request)",
            file=sys.stderr,
            flush=True,
        )

    try:
        asyncio.run(
            serve(
                url,
                host=host,
                port=port,
                extra_hosts=extra,
                announce=announce,
                allow_remote=allow_remote,
            )
        )
    except OSError as exc:
        fail(f"cannot serve on {host}:{port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
