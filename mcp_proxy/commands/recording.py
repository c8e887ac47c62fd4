"""``mcptape export``, ``import`` and ``formats``: recordings in and out, in every registered format.

Thin commands over :mod:`mcp_proxy.recording`: the format choices come from its registry, so a
new format appears here without touching this module. Long runs show a progress bar on stderr
when stderr is a terminal (never in pipes, logs or CI).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_proxy.cli import app, handle_errors
from mcp_proxy.commands import common
from mcp_proxy.errors import UserError
from mcp_proxy.recording.registry import declared_names

if TYPE_CHECKING:
    from mcp_proxy.recording.registry import Format
    from mcp_proxy.store.rows import SessionRow

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


@contextlib.contextmanager
def progress_bar(
    label: str, total: int | None, unit: str = "frames"
) -> Iterator[Callable[[int], None] | None]:
    """A callback that advances a rich progress bar on stderr, or None when not on a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def _names_help() -> str:
    """The format names for ``--help`` (no format module is imported: this runs at every start)."""
    return ", ".join(declared_names()) + " (`mcptape formats` says what each can do)"


def _counting(advance: Callable[[int], None] | None, done: list[int]) -> Callable[[int], None]:
    """A progress callback that also counts the frames written into ``done[0]``."""

    def step(n: int) -> None:
        done[0] += n
        if advance is not None:
            advance(n)

    return step


def _write_out(output: str, chunks: Iterable[bytes]) -> bool:
    """Write the chunks to ``output`` (a file, atomically, or ``-``); True for stdout.

    A file is replaced atomically (temp file + rename). Something that exists and is not a
    regular file (``/dev/full``, a FIFO, ``/dev/stdout``) is written in place, never replaced
    by a rename — and a failed write there (no space left) is one line and exit 2, like a
    file that cannot be written.
    """
    from pathlib import Path

    from mcp_proxy.recording.model import write_file

    if output == "-":
        _write_stream(sys.stdout.buffer, chunks, "stdout")
        return True
    target = Path(output)
    if target.exists() and not target.is_file() and not target.is_dir():
        try:
            with open(target, "wb") as fh:
                _write_stream(fh, chunks, output)
        except OSError as exc:
            raise UserError(f"cannot write {output}: {exc.strerror or exc}") from exc
        return False
    write_file(output, chunks)
    return False


def _write_stream(out: Any, chunks: Iterable[bytes], name: str) -> None:
    """Write and flush ``chunks`` to an open binary stream; an I/O error is one clear line."""
    try:
        for chunk in chunks:
            out.write(chunk)
        out.flush()
    except BrokenPipeError:
        raise  # `mcptape export … -o - | head`: the CLI's boundary treats it as the end
    except OSError as exc:
        raise UserError(f"cannot write {name}: {exc.strerror or exc}") from exc


def _sender(fmt: str | None) -> Format:
    """The format for ``export -o http(s)://…``: the one named, else the one format that sends
    (an http(s) URL names no file suffix to go by, and only a sending format can use it)."""
    from mcp_proxy.recording.registry import formats, get_format

    if fmt is not None:
        return get_format(fmt)
    senders = [f for f in formats() if f.send is not None]
    if len(senders) != 1:
        names = ", ".join(f.name for f in senders) or "none"
        raise UserError(f"give --format for an http(s) URL (formats that send: {names})")
    return senders[0]


@app.command()
@handle_errors
def export(
    sessions: Annotated[
        list[str], typer.Argument(help="Session id prefixes or names (latest with that name).")
    ],
    output: Annotated[
        str,
        typer.Option(
            "--output",
            "-o",
            help="File to write ('-' for stdout), or an http(s) URL to send to"
            " (otlp, the format that sends, unless --format says otherwise).",
        ),
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=f"Default: from the output's name, else jsonl. One of {_names_help()}.",
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Write sessions to a file in a recording format (deterministic bytes), or send them."""
    from mcp_proxy.commands.common import open_direct
    from mcp_proxy.recording.database import read_sessions
    from mcp_proxy.recording.registry import output_format

    sending = output.startswith(("http://", "https://"))
    chosen = _sender(fmt) if sending else output_format(output, fmt)
    writer = chosen.need_writer() if not sending else None

    # export only reads: a --db typo must not create a database (open_direct refuses it). The
    # sessions are named through the driver, without starting the async store.
    url, direct = open_direct(db)
    with direct:
        named: dict[str, SessionRow] = {}
        for ref in sessions:
            row = direct.resolve_session(ref)
            named.setdefault(str(row["id"]), row)
    rows = list(named.values())
    ids = [str(r["id"]) for r in rows]
    total = sum(int(r.get("frame_count") or 0) for r in rows)
    if not sending and chosen.write_db is not None:
        # Straight from the store, a page of rows at a time (no model of the whole session).
        done = [0]
        with progress_bar(f"writing {chosen.name}", total) as advance:
            to_stdout = _write_out(output, chosen.write_db(url, ids, _counting(advance, done)))
        if not to_stdout:
            print(
                f"exported {len(ids)} session(s), {done[0]} frame(s) to {output} ({chosen.name})",
                file=sys.stderr,
            )
        return
    with progress_bar("reading", total) as advance:
        recording = read_sessions(url, ids, advance)
    n = recording.frame_total
    if sending:
        if chosen.send is None:
            raise UserError(f"{chosen.name} cannot be sent to a URL; give a file name with -o")
        with progress_bar(f"sending {chosen.name}", n) as advance:
            summary = chosen.send(recording, output, advance)
        print(summary, file=sys.stderr)
        return
    assert writer is not None
    with progress_bar(f"writing {chosen.name}", n) as advance:
        if _write_out(output, writer(recording, advance)):
            return
    print(
        f"exported {len(recording.sessions)} session(s), {n} frame(s) to {output} ({chosen.name})",
        file=sys.stderr,
    )


@app.command("import")
@handle_errors
def import_(
    file: Annotated[
        str, typer.Argument(help="A recording file: mcptape JSON Lines, or a HAR from devtools.")
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help=f"Default: recognised from the file. One of {_names_help()}."
        ),
    ] = None,
    db: DbOption = None,
    no_redact: Annotated[
        bool,
        typer.Option(
            "--no-redact",
            help="Import credentials in clear (local debugging only; says so loudly)."
            " MCPTAPE_REDACT=0 does the same.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the imported sessions as one JSON document (--format names the file's"
            " format here).",
        ),
    ] = False,
    analyse: Annotated[
        bool,
        typer.Option(
            "--analyse",
            help="Also analyse each imported session and store its findings and numbers (as a"
            " recording stores them when it ends), so the first check and stats are reads.",
        ),
    ] = False,
) -> None:
    """Load a recording file into the database (each session gets a new id), redacted as
    `record` redacts."""
    from mcp_proxy.recording.database import import_file, import_redactor
    from mcp_proxy.store.engine import resolve_url

    if as_json:
        common.json_errors(common.Format.json)
    try:
        size: int | None = os.stat(file).st_size or None  # a pipe or /dev/stdin: 0, unknown
    except OSError:
        size = None  # import_file says why the file cannot be read
    with (
        progress_bar("reading", size, unit="bytes") as read_bytes,
        progress_bar("importing", None) as advance,
    ):
        recording, result = import_file(
            file,
            resolve_url(db),
            fmt,
            read_bytes=read_bytes,
            progress=advance,
            redactor=import_redactor(False) if no_redact else None,
            analyse=analyse,
        )
    done = [
        (new, s.session.get("name"), n, old)
        for (old, new), s, n in zip(result.sessions, recording.sessions, result.counts, strict=True)
    ]
    if as_json:
        sessions = [{"id": i, "name": nm, "frames": n, "was": old} for i, nm, n, old in done]
        common.print_json({"sessions": sessions, "frames": result.frames})
        return
    for new, name, n, old in done:
        print(f"{new}  {name or '-'}  ({n} frames; was {old[:12]})")
    print(
        f"imported {len(result.sessions)} session(s), {result.frames} frame(s)",
        file=sys.stderr,
    )


@app.command("formats")
@handle_errors
def formats_(fmt: common.FormatOption = common.Format.text) -> None:
    """List the recording formats: what export writes and import reads."""
    from mcp_proxy.recording.registry import formats

    common.json_errors(fmt)
    rows = [
        (f, [w for w, ok in (("export", f.write), ("import", f.read), ("send", f.send)) if ok])
        for f in formats()
    ]
    if fmt is common.Format.json:
        common.print_json(
            [
                {
                    "name": f.name,
                    "title": f.title,
                    "suffixes": list(f.suffixes),
                    "media_type": f.media_type,
                    "can": can,
                    "transports": list(f.transports),
                }
                for f, can in rows
            ]
        )
        return
    for f, can in rows:
        print(f"{f.name:<7} {'/'.join(can):<20} {', '.join(f.suffixes):<24} {f.title}")


__all__ = ["export", "formats_", "import_", "progress_bar"]
