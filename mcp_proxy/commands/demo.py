"""``mcptape demo``: record a scripted session with the bundled test server and show it."""

from __future__ import annotations

from typing import Annotated

import typer

from mcp_proxy.cli import app, handle_errors


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
) -> None:
    """Record a demo conversation (both protocol eras) and print what was recorded.

    In a terminal it then opens the dashboard on the demo session (Ctrl-C stops it); with
    --no-browser, or when output is not a terminal (CI), it prints the command instead.
    """
    import sys

    from mcp_proxy.demo import open_dashboard, run_demo
    from mcp_proxy.store.engine import resolve_url

    url = resolve_url(db)
    ids = run_demo(url)
    if no_browser or not sys.stdout.isatty():
        print(
            f"  mcptape dashboard{'' if db is None else ' --db ' + db}   # browse it in a browser"
        )
        return
    open_dashboard(url, ids[0], port=port)
