"""``mcptape record``: relay a server (stdio) or an upstream URL (HTTP) and record it."""

from __future__ import annotations

from typing import Annotated

import typer

from mcp_proxy.cli import app, fail, handle_errors


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
@handle_errors
def record(
    command: Annotated[
        list[str] | None, typer.Argument(help="The server command and its arguments, after --.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Session name.")] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option("--upstream", help="Relay Streamable HTTP/SSE to this URL instead of stdio."),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Local port for --upstream.")] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Local address for --upstream.")
    ] = "127.0.0.1",
) -> None:
    """Run a server through mcptape and record every frame.

    stdio:  mcptape record --name fs -- npx -y @modelcontextprotocol/server-filesystem ~/src
    HTTP:   mcptape record --upstream https://server.example/mcp --port 8765
    """
    from mcp_proxy.store.engine import resolve_url

    url = resolve_url(db)
    if upstream:
        if command:
            fail("give either --upstream URL or -- COMMAND, not both")
        from mcp_proxy.relay.http import record_http  # type: ignore[import-not-found]

        raise typer.Exit(record_http(upstream, db_url=url, name=name, host=host, port=port))
    if not command:
        fail("no server command given (usage: mcptape record [--name NAME] -- COMMAND [ARGS…])")
    from mcp_proxy.relay.stdio import record_stdio

    raise typer.Exit(record_stdio(list(command), db_url=url, name=name))
