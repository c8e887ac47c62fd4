"""``mcptape intercept list|resolve``: see and decide the messages a relay holds.

A relay started with ``--intercept RULE`` holds each matching message in the store until
someone decides; these commands are that someone from a terminal (docs/intercept.md). They
take ``--db`` like every command, so a team on PostgreSQL resolves from any machine.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from pathlib import Path
from typing import Annotated

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands.common import Format, FormatOption, json_errors, print_json

intercept_app = typer.Typer(
    name="intercept",
    help="Messages held by --intercept: list them, forward, edit, answer or drop them.",
    no_args_is_help=True,
)
app.add_typer(intercept_app, name="intercept")

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


def _table(db: str | None):  # type: ignore[no-untyped-def]
    from mcp_proxy.commands.common import require_database
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.intercepts import InterceptTable

    url = resolve_url(db)
    require_database(url)
    return InterceptTable(url)


def _preview(raw: bytes, width: int = 100) -> str:
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    return text if len(text) <= width else text[: width - 1] + "…"


@intercept_app.command("list")
@handle_errors
def list_held(db: DbOption = None, fmt: FormatOption = Format.text) -> None:
    """The messages held now, oldest first, with the command that decides each."""
    json_errors(fmt)
    table = _table(db)
    try:
        rows, count = table.held()
    finally:
        table.close()
    if fmt == Format.json:
        print_json(
            {
                "held": [r.listed() for r in rows],
                "count": count,
            }
        )
        return
    if not rows:
        print("nothing is held")
        return
    now = time.time()
    for r in rows:
        what = " ".join(p for p in (r.direction, r.kind, r.method) if p)
        print(f"#{r.id}  {what}  session {r.session_id[:12]}  held {now - r.held_at:.0f} s")
        print(f"    {_preview(r.original)}")
    if count > len(rows):
        print(f"… and {count - len(rows)} more held")


def _who(by: str | None) -> str:
    if by:
        return by
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment
        user = "someone"
    return f"{user}@{socket.gethostname()} (cli)"


def _read(path: Path, what: str) -> bytes:
    from mcp_proxy.limits import INTERCEPT_MAX_BYTES

    try:
        with path.open("rb") as f:
            data = f.read(INTERCEPT_MAX_BYTES + 1)
    except OSError as exc:
        fail(f"{what} {path}: {exc.strerror or exc}", 4)
    return data


@intercept_app.command("resolve")
@handle_errors
def resolve(
    intercept_id: Annotated[int, typer.Argument(help="The held message's number (see list).")],
    forward: Annotated[bool, typer.Option("--forward", help="Forward it as it is.")] = False,
    edit: Annotated[
        Path | None,
        typer.Option("--edit", help="Forward this file's message instead (the whole message)."),
    ] = None,
    set_values: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Forward it with PATH set to VALUE (JSON, else a string), e.g."
            " params.arguments.text=hi (repeatable).",
        ),
    ] = None,
    answer: Annotated[
        Path | None,
        typer.Option(
            "--answer",
            help="Answer a held request in the peer's place: a file with the response, or"
            ' {"result": …} / {"error": …}.',
        ),
    ] = None,
    drop: Annotated[bool, typer.Option("--drop", help="Drop it: nobody receives it.")] = False,
    by: Annotated[
        str | None, typer.Option("--by", help="Who decides (default: user@host (cli)).")
    ] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.text,
) -> None:
    """Decide one held message: exactly one of --forward, --edit, --set, --answer, --drop.

    Exit status: 0 decided, 2 a bad choice or message, 4 no such held message, 6 it was
    decided already (by someone else, or forwarded on its timeout).
    """
    from mcp_proxy.errors import NotFoundError
    from mcp_proxy.intercept import verdicts

    json_errors(fmt)
    chosen = [
        name
        for name, given in (
            ("--forward", forward),
            ("--edit", edit is not None),
            ("--set", bool(set_values)),
            ("--answer", answer is not None),
            ("--drop", drop),
        )
        if given
    ]
    if len(chosen) != 1:
        fail(
            "choose one of --forward, --edit FILE, --set PATH=VALUE, --answer FILE, --drop"
            + (f" (not {' and '.join(chosen)})" if chosen else "")
        )
    table = _table(db)
    try:
        row = table.get(intercept_id)
        if row is None:
            raise NotFoundError(f"no held message #{intercept_id} (see: mcptape intercept list)")
        payload: bytes | None = None
        decision = chosen[0].removeprefix("--")
        if edit is not None:
            payload = verdicts.edited_message(_read(edit, "--edit"))
        elif set_values:
            payload = row.original
            for assignment in set_values:
                payload = verdicts.set_path(payload, assignment)
            decision = "edit"
        elif answer is not None:
            payload = verdicts.answer_message(row.original, _read(answer, "--answer"))
        done = table.resolve(intercept_id, decision, payload, _who(by))
    finally:
        table.close()
    if fmt == Format.json:
        print_json(
            {
                "id": done.id,
                "decision": done.decision,
                "by": done.resolved_by,
                "sent": None if done.payload is None else json.loads(done.payload),
            }
        )
    else:
        print(f"#{done.id}: {done.decision} (by {done.resolved_by})")
