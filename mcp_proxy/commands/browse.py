"""``mcptape sessions``, ``show`` and ``tail``: read what was recorded."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from enum import StrEnum
from typing import Annotated, Any

import typer

from mcp_proxy.cli import app, handle_errors

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


class Format(StrEnum):
    text = "text"
    json = "json"


def parse_time(value: str | None) -> float | None:
    """Accept epoch seconds, ISO dates/times, or a relative age like 10m, 2h, 3d."""
    if value is None:
        return None
    from datetime import datetime

    from mcp_proxy.errors import UserError

    v = value.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if v[-1:] in units and v[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(v[:-1]) * units[v[-1]]
    try:
        return float(v)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(v).timestamp()
    except ValueError as exc:
        raise UserError(
            f"cannot read time {value!r} (use 10m, 2h, 3d, an ISO date or epoch seconds)"
        ) from exc


def _store(db: str | None) -> Any:
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import Store

    return Store.open(resolve_url(db))


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
    from mcp_proxy.render import session_json, session_line

    async def go() -> list[dict[str, Any]]:
        store = await _store(db)
        try:
            return await store.list_sessions(
                name=name, since=parse_time(since), until=parse_time(until), limit=limit or None
            )
        finally:
            await store.close()

    rows = asyncio.run(go())
    if fmt == Format.json:
        print(json.dumps([session_json(r) for r in rows], indent=2, default=str))
        return
    if not rows:
        print("no sessions recorded yet (try: mcptape demo)", file=sys.stderr)
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
        from mcp_proxy.commands.analyze import exchange_text, finding_text

        store = await _store(db)
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
    import sqlalchemy as sa

    from mcp_proxy.render import frame_json, frame_oneline
    from mcp_proxy.store.schema import frames, sessions

    async def go() -> None:
        store = await _store(db)
        try:
            names: dict[str, str] = {}
            sid: str | None = None
            if session is not None:
                s = await store.resolve_session(session)
                sid = s["id"]
            cond = [frames.c.session_id == sid] if sid else []
            start = 0
            if not from_start:
                rows = await store._all(sa.select(sa.func.max(frames.c.id)).where(*cond))
                start = int(next(iter(rows[0].values())) or 0)
            last = start
            while True:
                rows = await store._all(
                    sa.select(frames, sessions.c.name)
                    .join(sessions, sessions.c.id == frames.c.session_id)
                    .where(frames.c.id > last, *cond)
                    .order_by(frames.c.id)
                    .limit(2000)
                )
                for f in rows:
                    last = f["id"]
                    if fmt == Format.json:
                        obj = frame_json(f)
                        obj["session_id"] = f["session_id"]
                        print(json.dumps(obj, ensure_ascii=False), flush=True)
                    else:
                        label = None if sid else (f.get("name") or f["session_id"][:8])
                        names[f["session_id"]] = label or ""
                        print(frame_oneline(f, label), flush=True)
                if len(rows) == 2000:
                    continue
                if exit_on_end and sid:
                    cur = await store.get_session(sid)
                    if cur and cur["status"] != "live":
                        # One more pass: frames written in the same batch as the end.
                        more = await store._all(
                            sa.select(sa.func.count())
                            .select_from(frames)
                            .where(frames.c.id > last, *cond)
                        )
                        if not next(iter(more[0].values())):
                            return
                        continue
                await asyncio.sleep(interval)
        finally:
            await store.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
