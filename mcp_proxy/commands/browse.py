"""``mcptape sessions``, ``show`` and ``tail``: read what was recorded."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from mcp_proxy.cli import app, handle_errors
from mcp_proxy.commands.common import DbOption, Format, check_limit, open_store, parse_time


@app.command()
@handle_errors
def sessions(
    db: DbOption = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Only sessions with this name.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Started after (10m, 2h, 3d, ISO time).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Started before (10m, 2h, 3d, ISO time).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many (0 = all).")] = 50,
    fmt: Annotated[Format, typer.Option("--format", help="text or json.")] = Format.text,
) -> None:
    """List recorded sessions, newest first."""
    from mcp_proxy.render import cli_name, session_json, session_line

    since_ts, until_ts, max_rows = parse_time(since), parse_time(until), check_limit(limit)

    async def go() -> list[dict[str, Any]]:
        store = await open_store(db)
        try:
            return await store.list_sessions(
                name=name, since=since_ts, until=until_ts, limit=max_rows
            )
        finally:
            await store.close()

    rows = asyncio.run(go())
    if fmt == Format.json:
        print(json.dumps([session_json(r) for r in rows], indent=2, default=str))
        return
    if not rows:
        print(f"no sessions recorded yet (try: {cli_name()} demo)", file=sys.stderr)
        return
    for r in rows:
        print(session_line(r))


@app.command()
@handle_errors
def show(
    session: Annotated[
        str, typer.Argument(help="Session id prefix or name (latest with that name).")
    ],
    db: DbOption = None,
    fmt: Annotated[
        Format,
        typer.Option("--format", help="text or json (one object per frame, or per exchange)."),
    ] = Format.text,
    no_body: Annotated[
        bool, typer.Option("--no-body", help="Only the header line of each frame.")
    ] = False,
    no_stderr: Annotated[
        bool, typer.Option("--no-stderr", help="Leave out server stderr lines.")
    ] = False,
    exchanges: Annotated[
        bool,
        typer.Option(
            "--exchanges",
            "-x",
            help="One line per request/response pair (latency, outcome, notifications).",
        ),
    ] = False,
    no_findings: Annotated[
        bool, typer.Option("--no-findings", help="Text mode: leave out the findings at the end.")
    ] = False,
) -> None:
    """Print a session's frames in order (or its exchanges), then its findings.

    Findings (text mode) are the recorder's and the analyzer's; ``mcptape check`` prints them
    alone, and as JSON. With ``--format json`` only frames (or exchanges) are printed, one JSON
    object per line.
    """
    from mcp_proxy.render import frame_block, frame_json, session_line

    out = sys.stdout

    async def go() -> None:
        from mcp_proxy.analysis.service import session_analysis, session_findings
        from mcp_proxy.render import exchange_text, finding_text

        store = await open_store(db)
        try:
            s = await store.resolve_session(session)
            if fmt == Format.text:
                out.write(session_line(s) + "\n")
                cmd = s.get("command")
                if cmd:
                    out.write("  command: " + " ".join(cmd) + "\n")
                if s.get("protocol_version"):
                    out.write(
                        f"  protocol {s['protocol_version']} ({s.get('era')})  client"
                        f" {s.get('client_name')} {s.get('client_version') or ''}  server"
                        f" {s.get('server_name')} {s.get('server_version') or ''}\n"
                    )
                if s.get("exit_code") is not None or s.get("exit_signal") is not None:
                    out.write(f"  exit: code={s.get('exit_code')} signal={s.get('exit_signal')}\n")
                out.write("\n")
            if exchanges:
                analysis = await session_analysis(store, s)
                for ex in analysis.exchanges:
                    if fmt == Format.json:
                        out.write(json.dumps(ex.as_dict(), ensure_ascii=False) + "\n")
                    else:
                        out.write(exchange_text(ex) + "\n")
            else:
                async for f in store.iter_frames(s["id"]):
                    if no_stderr and f["channel"] == "stderr":
                        continue
                    if fmt == Format.json:
                        out.write(json.dumps(frame_json(f), ensure_ascii=False) + "\n")
                    else:
                        out.write(frame_block(f, body=not no_body) + "\n")
            if fmt == Format.text and not no_findings:
                rows = await session_findings(store, s)
                out.write(f"\nFindings ({len(rows)}):\n" if rows else "\nNo findings.\n")
                for row in rows:
                    out.write(finding_text(row, detail=not no_body) + "\n")
        finally:
            await store.close()

    asyncio.run(go())


@app.command()
@handle_errors
def tail(
    session: Annotated[
        str | None, typer.Argument(help="Session id prefix or name; default: every session.")
    ] = None,
    db: DbOption = None,
    from_start: Annotated[
        bool, typer.Option("--from-start", help="Print what is already recorded first.")
    ] = False,
    exit_on_end: Annotated[
        bool, typer.Option("--exit-on-end", help="Stop when the session ends.")
    ] = False,
    fmt: Annotated[Format, typer.Option("--format", help="text or json.")] = Format.text,
    interval: Annotated[float, typer.Option(help="Polling interval in seconds.")] = 0.2,
) -> None:
    """Follow frames live as they are recorded, like tcpdump for MCP."""
    from mcp_proxy.render import frame_json, frame_oneline

    async def go() -> None:
        store = await open_store(db)
        try:
            sid: str | None = None
            if session is not None:
                sid = (await store.resolve_session(session))["id"]
            last = 0 if from_start else await store.last_frame_id(sid)
            while True:
                rows = await store.frames_after_id(last, sid, limit=2000)
                for f in rows:
                    last = f["id"]
                    if fmt == Format.json:
                        obj = frame_json(f)
                        obj["session_id"] = f["session_id"]
                        print(json.dumps(obj, ensure_ascii=False), flush=True)
                    else:
                        label = None if sid else (f.get("name") or f["session_id"][:8])
                        print(frame_oneline(f, label), flush=True)
                if len(rows) == 2000:
                    continue
                if exit_on_end and sid:
                    cur = await store.get_session(sid)
                    if cur and cur["status"] != "live":
                        # One more pass: frames written in the same batch as the end.
                        if not await store.count_frames_after_id(last, sid):
                            return
                        continue
                await asyncio.sleep(interval)
        finally:
            await store.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
