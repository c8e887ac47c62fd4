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
) -> None:
    """Record a demo conversation (both protocol eras) and print what was recorded."""
    from mcp_proxy.demo import run_demo
    from mcp_proxy.store.engine import resolve_url

    run_demo(resolve_url(db))
