"""``mcptape export``, ``import``, ``diff``, ``replay`` and ``mock``: recordings that travel.

Thin commands: each builds its inputs, makes one library call, prints, and maps the outcome to
an exit code. Exit codes beyond the common ones (see :mod:`mcp_proxy.cli`): ``diff`` and
``replay`` exit 1 when the conversations differ, 0 when they agree.
"""

from __future__ import annotations

import asyncio
import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from mcp_proxy.cli import app, fail, handle_errors

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    har = "har"


class OutFormat(StrEnum):
    text = "text"
    json = "json"


@app.command()
@handle_errors
def export(
    sessions: Annotated[
        list[str], typer.Argument(help="Session id prefixes or names (latest with that name).")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="File to write ('-' for stdout).")],
    fmt: Annotated[
        ExportFormat, typer.Option("--format", help="jsonl (recording file) or har (HAR 1.2).")
    ] = ExportFormat.jsonl,
    db: DbOption = None,
) -> None:
    """Write sessions to a portable recording file (deterministic bytes) or to HAR 1.2."""
    from mcp_proxy.export import dumps_har, iter_jsonl, load_sessions, write_file
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import Store

    async def go() -> Any:
        store = await Store.open(resolve_url(db))
        try:
            return await load_sessions(store, sessions)
        finally:
            await store.close()

    recording = asyncio.run(go())
    chunks = [dumps_har(recording)] if fmt == ExportFormat.har else iter_jsonl(recording)
    if output == "-":
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        return
    write_file(output, chunks)
    n = sum(len(s.frames) for s in recording.sessions)
    print(
        f"exported {len(recording.sessions)} session(s), {n} frame(s) to {output}",
        file=sys.stderr,
    )


@app.command("import")
@handle_errors
def import_(
    file: Annotated[str, typer.Argument(help="A recording file written by mcptape export.")],
    db: DbOption = None,
) -> None:
    """Load a recording file into the database (each session gets a new id)."""
    from mcp_proxy.export import import_recording, read_recording
    from mcp_proxy.store.engine import resolve_url

    recording = read_recording(file)
    result = import_recording(recording, resolve_url(db))
    for (old, new), s in zip(result.sessions, recording.sessions, strict=True):
        name = s.session.get("name")
        print(f"{new}  {name or '-'}  ({len(s.frames)} frames; was {old[:12]})")
    print(
        f"imported {len(result.sessions)} session(s), {result.frames} frame(s)",
        file=sys.stderr,
    )


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


__all__ = ["export", "fail", "import_"]
