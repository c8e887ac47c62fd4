"""``mcptape demo``: record a scripted session with the bundled test server and show it."""

from __future__ import annotations

from typing import Annotated

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands.common import Format, FormatOption, json_errors, print_json


@app.command()
@handle_errors
def demo(
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."
        ),
    ] = None,
    no_browser: Annotated[
        bool,
        typer.Option("--no-browser", help="Do not open the dashboard on the demo session."),
    ] = False,
    port: Annotated[int, typer.Option("--port", help="Dashboard port (0 picks a free one).")] = 0,
    fmt: FormatOption = Format.text,
) -> None:
    """Record a demo conversation (both protocol eras) and print what was recorded.

    In a terminal it then opens the dashboard on the demo session (Ctrl-C stops it); with
    --no-browser, or when output is not a terminal (CI), it prints the command instead.
    With --format json, stdout is one JSON document (the database, the sessions recorded, the
    dashboard command), the frames go to stderr, and no dashboard is started.
    """
    import shlex
    import sys
    from dataclasses import asdict

    from mcp_proxy.demo import run_demo
    from mcp_proxy.render import cli_name
    from mcp_proxy.store.engine import display_url, resolve_url

    json_errors(fmt)
    if not 0 <= port <= 65535:  # before recording anything, not after
        fail(f"--port {port} is not a port number")
    url = resolve_url(db)
    as_json = fmt is Format.json
    recorded = run_demo(url, out=(lambda line: print(line, file=sys.stderr)) if as_json else print)
    where = "" if db is None else f" --db {shlex.quote(db)}"
    dashboard = f"{cli_name()} dashboard{where}"
    if as_json:
        print_json(
            {
                "database": display_url(url),
                "sessions": [asdict(s) for s in recorded],
                "dashboard": dashboard,
            }
        )
        return
    if no_browser or not sys.stdout.isatty():
        print(f"  {dashboard}   # browse it in a browser")
        return
    open_dashboard(url, recorded[0].id, port=port)


def open_dashboard(db_url: str, session_id: str, *, port: int = 0) -> None:
    """Serve the dashboard and open the browser on one session; returns on Ctrl-C.

    Here, not in :mod:`mcp_proxy.demo`: only the CLI starts the dashboard (the library never
    imports it).
    """
    import asyncio
    import webbrowser

    from dashboard.app import serve

    def announce(address: str) -> None:
        base, _, query = address.partition("/?")
        target = f"{base}/sessions/{session_id}?{query}"
        print(f"\nmcptape dashboard: {target}\n  (Ctrl-C to stop)", flush=True)
        try:
            webbrowser.open(target)
        except webbrowser.Error:
            pass  # no browser here: the address is printed

    try:
        asyncio.run(serve(db_url, port=port, announce=announce))
    except OSError as exc:  # the port is taken: the recording is done, say so in one line
        fail(f"cannot serve the dashboard on 127.0.0.1:{port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass
