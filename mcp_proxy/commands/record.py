"""``mcptape record``: relay a server (stdio) or an upstream URL (HTTP) and record it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands.common import (
    Format,
    port_value,
    redact_paths_value,
    seconds_value,
)
from mcp_proxy.limits import INTERCEPT_TIMEOUT

if TYPE_CHECKING:
    from mcp_proxy.relay.stdio_faults import FaultDecider


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
    forward: Annotated[
        bool,
        typer.Option(
            "--forward",
            help="Run a forward proxy (mitmproxy) on --port and record the MCP traffic of hosts"
            " that use it (HTTPS_PROXY); see docs/forward-proxy.md.",
        ),
    ] = False,
    forward_engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="With --forward: 'lean' (mcptape's own proxy, the default) or 'mitmproxy'"
            " (chosen by itself when mitmproxy's config.yaml needs it).",
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option("--port", help="Local port for --upstream or --forward.", callback=port_value),
    ] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Local address for --upstream.")
    ] = "127.0.0.1",
    no_redact: Annotated[
        bool,
        typer.Option(
            "--no-redact",
            help="Record credentials in clear (local debugging only; says so loudly)."
            " MCPTAPE_REDACT=0 does the same.",
        ),
    ] = False,
    redact_header: Annotated[
        list[str] | None,
        typer.Option("--redact-header", help="Also redact this header (repeatable)."),
    ] = None,
    redact_path: Annotated[
        list[str] | None,
        typer.Option(
            "--redact-path",
            help="Also redact this JSON path in bodies, e.g. params.arguments.query or **.ssn"
            " (repeatable).",
            callback=redact_paths_value,
        ),
    ] = None,
    idle_cut: Annotated[
        float,
        typer.Option(
            "--idle-cut",
            help="--upstream: seconds of idleness that end a sessionless (2026-07-28) group.",
            callback=seconds_value(),
        ),
    ] = 300.0,
    connect_timeout: Annotated[
        float,
        typer.Option(
            "--connect-timeout",
            help="--upstream: seconds to connect (504).",
            callback=seconds_value(),
        ),
    ] = 10.0,
    response_timeout: Annotated[
        float,
        typer.Option(
            "--response-timeout",
            help="--upstream: seconds to wait for response headers (504); 0 waits for ever.",
            callback=seconds_value(zero="waits for ever"),
        ),
    ] = 0.0,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="--upstream: also answer requests whose Host is this name (repeatable; '*'"
            " turns DNS-rebinding protection off). Default: only the listen address.",
        ),
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="Break the wire on purpose: one rule, e.g. 'delay ms=2000 method=tools/call'"
            " (repeatable; docs/faults.md).",
        ),
    ] = None,
    faults_file: Annotated[
        str | None,
        typer.Option(
            "--faults",
            help="A TOML file of fault rules, re-read when it changes (docs/faults.md).",
        ),
    ] = None,
    intercept: Annotated[
        list[str] | None,
        typer.Option(
            "--intercept",
            help="Hold matching messages until you decide (mcptape intercept list/resolve):"
            " fault-rule matchers, e.g. 'method=tools/call' (repeatable; docs/intercept.md).",
        ),
    ] = None,
    intercepts_file: Annotated[
        str | None,
        typer.Option(
            "--intercepts",
            help="A TOML file of [[intercept]] rules, re-read when it changes.",
        ),
    ] = None,
    intercept_timeout: Annotated[
        float,
        typer.Option(
            "--intercept-timeout",
            help="Seconds a held message waits for a decision before it is forwarded"
            " unchanged; 0 waits for ever.",
            callback=seconds_value(zero="waits for ever"),
        ),
    ] = INTERCEPT_TIMEOUT,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint",
            help="Send each exchange's spans live to this OTLP/HTTP endpoint (e.g."
            " http://127.0.0.1:4318; /v1/traces is added to a bare URL). Default:"
            " OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT.",
        ),
    ] = None,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            help="text or json: the summary printed when recording stops, as the last line on"
            " stderr (stdout is the server's channel with stdio).",
        ),
    ] = Format.text,
) -> None:
    """Run a server through mcptape and record every frame.

    stdio:  mcptape record --name fs -- npx -y @modelcontextprotocol/server-filesystem ~/src
    HTTP:   mcptape record --upstream https://server.example/mcp --port 8765
    """
    from mcp_proxy.commands.common import json_errors
    from mcp_proxy.redact import env_allows_redaction
    from mcp_proxy.store.engine import resolve_url

    json_errors(fmt)
    output = fmt.value
    url = resolve_url(db)
    if otlp_endpoint is not None:
        _live_otlp(otlp_endpoint)
    if forward and (command or upstream):
        fail("--forward records what hosts send through it: give no --upstream or COMMAND")
    engine = None
    if fault or faults_file is not None:
        from mcp_proxy.faults.load import load_engine

        http = bool(upstream or forward)
        engine = load_engine(fault or [], faults_file, transport="http" if http else "stdio")
    held = desk = None
    if intercept or intercepts_file is not None:
        from mcp_proxy.faults.load import load_intercepts
        from mcp_proxy.intercept.desk import InterceptDesk
        from mcp_proxy.store.intercepts import InterceptTable

        held = load_intercepts(intercept or [], intercepts_file)
        if upstream and command:
            fail("give either --upstream URL or -- COMMAND, not both")
        if not upstream and not command and not forward:
            fail("no server command given (usage: mcptape record [--name NAME] -- COMMAND [ARGS…])")
        desk = InterceptDesk(InterceptTable(url), timeout=intercept_timeout)
    decider: FaultDecider | None = engine
    if held is not None:
        from mcp_proxy.faults import FirstOf

        decider = held if engine is None else FirstOf(held, engine)
    if forward:
        from mcp_proxy.forward.runner import record_forward

        raise typer.Exit(
            record_forward(
                db_url=url,
                host=host,
                port=port,
                name=name,
                redact=not no_redact,
                redact_headers=redact_header or [],
                redact_paths=redact_path or [],
                idle_cut=idle_cut,
                engine=forward_engine,
                output=output,
                faults=decider,
                intercepts=desk,
            )
        )
    if forward_engine is not None:
        fail("--engine chooses the --forward proxy's engine; give it with --forward")
    if upstream:
        if command:
            fail("give either --upstream URL or -- COMMAND, not both")
        from mcp_proxy.relay.http import record_http

        raise typer.Exit(
            record_http(
                upstream,
                db_url=url,
                name=name,
                host=host,
                port=port,
                redact=not no_redact and env_allows_redaction(),
                redact_headers=redact_header or [],
                redact_paths=redact_path or [],
                idle_cut=idle_cut,
                connect_timeout=connect_timeout,
                response_timeout=response_timeout or None,
                allow_hosts=allow_host or [],
                faults=decider,
                intercepts=desk,
                output=output,
            )
        )
    if not command:
        fail("no server command given (usage: mcptape record [--name NAME] -- COMMAND [ARGS…])")
    from mcp_proxy.relay.stdio import record_stdio

    raise typer.Exit(
        record_stdio(
            list(command),
            db_url=url,
            name=name,
            redact=False if no_redact else None,
            redact_headers=redact_header or [],
            redact_paths=redact_path or [],
            faults=decider,
            intercepts=desk,
            output=output,
        )
    )


def _live_otlp(endpoint: str) -> None:
    """Hand ``--otlp-endpoint`` to the recorder process (it inherits the environment; the
    relays need not know): ``mcp_proxy/otel/live.py`` reads it there."""
    import os
    from urllib.parse import urlsplit

    from mcp_proxy.otel.live import ENDPOINT_ENV

    try:
        parts = urlsplit(endpoint)
        host, scheme, path = parts.hostname, parts.scheme, parts.path
    except ValueError:  # e.g. an unclosed IPv6 bracket
        host, scheme, path = None, "", ""
    if scheme not in ("http", "https") or not host:
        fail(f"--otlp-endpoint wants an http(s):// URL of an OTLP/HTTP receiver, not {endpoint!r}")
    if path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    os.environ[ENDPOINT_ENV] = endpoint
