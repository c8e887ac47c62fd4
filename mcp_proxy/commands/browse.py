"""``mcptape sessions``, ``show`` and ``tail``: read what was recorded."""

from __future__ import annotations

import asyncio
import codecs
import json
import sys
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_proxy.cli import app, handle_errors
from mcp_proxy.commands.common import (
    DbOption,
    Format,
    check_limit,
    open_direct,
    open_store,
    parse_time,
)

if TYPE_CHECKING:
    from mcp_proxy.store.rows import SessionRow, TailFrame


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

    async def go() -> list[SessionRow]:
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

    Findings (text mode) are the recorder's and the analyzer's; `mcptape check` prints them
    alone, and as JSON. With `--format json` only frames (or exchanges) are printed, one JSON
    object per line.
    """
    out = sys.stdout
    findings = fmt == Format.text and not no_findings

    def print_findings(rows: list[dict[str, Any]]) -> None:
        from mcp_proxy.render import finding_text

        out.write(f"\nFindings ({len(rows)}):\n" if rows else "\nNo findings.\n")
        for row in rows:
            out.write(finding_text(row, detail=not no_body) + "\n")

    # Through the driver: no event loop, no async store to start (nor the analysis, imported
    # only for the findings text mode prints, or for the exchanges).
    url, direct = open_direct(db)
    with direct:
        s = direct.resolve_session(session)
    if fmt == Format.text:
        out.write(_session_head(s))
    if exchanges:
        found = _print_exchanges(url, s, fmt)
        if findings:
            print_findings(found)
        return
    _print_frames(url, s["id"], fmt, body=not no_body, no_stderr=no_stderr)
    if findings:
        from mcp_proxy.analysis.service import current_findings

        print_findings(current_findings(url, s))


def _print_exchanges(url: str, s: SessionRow, fmt: Format) -> list[dict[str, Any]]:
    """A session's exchanges, printed as the streaming pass resolves them, in request order
    with the frames mcptape injected between them (``InOrder``: a bounded reorder buffer, past
    which they print in the order they were answered, and stderr says so once). The pass is
    the one that stores the session's findings (:func:`~mcp_proxy.analysis.service.
    stored_findings`); returns them."""
    from mcp_proxy.analysis.in_order import InOrder
    from mcp_proxy.analysis.model import Exchange
    from mcp_proxy.analysis.service import stored_findings
    from mcp_proxy.render import exchange_text, folded_poll, injected_text

    write = sys.stdout.write
    json_mode = fmt == Format.json

    def emit(item: Any) -> None:
        if json_mode:
            write(json.dumps(item.as_dict(), ensure_ascii=False) + "\n")
        elif isinstance(item, Exchange):
            if not folded_poll(item):  # its task's line counts it
                write(exchange_text(item) + "\n")
        else:  # a frame mcptape injected
            write(injected_text(item) + "\n")

    def overflow(held: int) -> None:
        print(
            f"note: a request was still pending after {held} later ones were answered;"
            " the exchanges from here on are printed in the order they were answered",
            file=sys.stderr,
        )

    found, _fresh = stored_findings(url, s, also=lambda injected: InOrder(injected, emit, overflow))
    return found


def _session_head(s: SessionRow) -> str:
    """The lines above a session's frames in text mode."""
    from mcp_proxy.render import session_line

    lines = [session_line(s)]
    if command := s.get("command"):
        lines.append("  command: " + " ".join(command))
    if s.get("protocol_version"):
        lines.append(
            f"  protocol {s['protocol_version']} ({s.get('era')})  client"
            f" {s.get('client_name')} {s.get('client_version') or ''}  server"
            f" {s.get('server_name')} {s.get('server_version') or ''}"
        )
    if s.get("exit_code") is not None or s.get("exit_signal") is not None:
        lines.append(f"  exit: code={s.get('exit_code')} signal={s.get('exit_signal')}")
    return "\n".join(lines) + "\n\n"


def _print_frames(url: str, sid: str, fmt: Format, *, body: bool, no_stderr: bool) -> None:
    """Every frame of a session, streamed through the one renderer: ``frame_rows`` as stored
    (rows by shape, ``shaped_pages``; text reads :data:`~mcp_proxy.render.TEXT_COLUMNS`), one
    batch of rows and one write per 5,000 frames (a 1,000,000-frame session prints with bounded
    memory)."""
    from mcp_proxy.osutil import gc_paused
    from mcp_proxy.render import SHAPED_COLUMNS, TEXT_COLUMNS, FrameRenderer
    from mcp_proxy.store.stream import shaped_pages

    json_mode = fmt == Format.json
    shapes, batches = shaped_pages(url, sid, SHAPED_COLUMNS if json_mode else TEXT_COLUMNS)
    renderer = FrameRenderer(shapes)
    render = renderer.json if json_mode else partial(renderer.text, body=body)
    # The lines come as UTF-8: to the pipe as they are, or decoded for a stdout that writes
    # another encoding (whose errors stay the terminal's, as for any text).
    buffer = getattr(sys.stdout, "buffer", None)
    utf8 = buffer is not None and codecs.lookup(sys.stdout.encoding or "ascii").name == "utf-8"
    if utf8:
        sys.stdout.flush()  # the session's head, written as text, goes first
    # No cycle is made here (rows, bytes, lists; freed as each page is written): the cyclic
    # collector, run every few hundred row tuples, only traversed them (~3% of the CPU).
    with gc_paused():
        for rows in batches:
            if no_stderr:
                rows = [r for r in rows if shapes(r[2])[1] != "stderr"]
            chunks = render(rows)
            if chunks:
                chunks.append(b"")
                page = b"\n".join(chunks)
                if buffer is not None and utf8:
                    buffer.write(page)
                else:
                    sys.stdout.write(page.decode())
    if buffer is not None and utf8:
        buffer.flush()


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
    if not 0 < interval <= 3600:
        from mcp_proxy.errors import BadValueError

        raise BadValueError(f"--interval must be between 0 and 3600 seconds, not {interval}")

    async def go() -> None:
        store = await open_store(db)
        try:
            sid = None if session is None else (await store.resolve_session(session))["id"]
            await _follow(store, sid, fmt, from_start=from_start, exit_on_end=exit_on_end,
                          interval=interval)  # fmt: skip
        finally:
            await store.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


async def _follow(
    store: Any, sid: str | None, fmt: Format, *, from_start: bool, exit_on_end: bool,
    interval: float,
) -> None:  # fmt: skip
    """Print frames as they are recorded (of one session, or of all) until told to stop."""
    last = 0 if from_start else await store.last_frame_id(sid)
    while True:
        rows = await store.frames_after_id(last, sid, limit=2000)
        if rows:
            last = rows[-1]["id"]
            _print_live(rows, fmt, labelled=sid is None)
        if len(rows) == 2000:
            continue
        if exit_on_end and sid:
            cur = await store.get_session(sid)
            # Ended: one more pass for frames written in the same batch as the end.
            if cur and cur["status"] != "live":
                if not await store.count_frames_after_id(last, sid):
                    return
                continue
        await asyncio.sleep(interval)


def _print_live(rows: list[TailFrame], fmt: Format, *, labelled: bool) -> None:
    from mcp_proxy.render import frame_json, frame_oneline

    for f in rows:
        if fmt == Format.json:
            obj = frame_json(f)
            obj["session_id"] = f["session_id"]
            print(json.dumps(obj, ensure_ascii=False), flush=True)
        else:
            label = (f.get("name") or f["session_id"][:8]) if labelled else None
            print(frame_oneline(f, label), flush=True)
