"""``mcptape diff``, ``replay`` and ``mock``: recordings that travel.

Thin commands: each builds its inputs, makes one library call, prints, and maps the outcome to
an exit code. Exit codes beyond the common ones (see :mod:`mcp_proxy.cli`): ``diff`` and
``replay`` exit 1 when the conversations differ, 0 when they agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from mcp_proxy.cli import app, fail, handle_errors
from mcp_proxy.commands import common
from mcp_proxy.commands.common import port_value, seconds_value
from mcp_proxy.limits import INTERCEPT_TIMEOUT

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database path or URL (default: MCPTAPE_DB or the user data dir)."),
]


class OutFormat(StrEnum):
    text = "text"
    json = "json"


class ReplayFormat(StrEnum):
    text = "text"
    json = "json"
    junit = "junit"


def _with_config(ignore: list[str] | None, *sources: str) -> list[str]:
    """``--ignore`` paths plus those ``mcptape.toml`` beside each recording FILE lists."""
    from mcp_proxy.recording.database import split_source
    from mcp_proxy.replay.config import ignores_for

    out = list(ignore or [])
    for source in sources:
        ref = split_source(source)
        for path in ignores_for(ref[0]) if ref else []:
            if path not in out:
                out.append(path)
    return out


def _require_database_for(db: str | None, *sources: str) -> None:
    """A SOURCE that is a session (not a FILE) is read from ``--db``, which must exist: a typo
    there must not create a database (exit 4, "no database at PATH")."""
    from mcp_proxy.commands.common import require_database
    from mcp_proxy.recording.database import split_source
    from mcp_proxy.store.engine import resolve_url

    if any(split_source(source) is None for source in sources):
        require_database(resolve_url(db))


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


IgnoreOption = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore",
        help="JSONPath to leave out of the comparison, e.g. '$..timestamp' (repeatable).",
    ),
]


@app.command()
@handle_errors
def diff(
    a: Annotated[str, typer.Argument(help="A session (id prefix or name) or FILE[#SESSION].")],
    b: Annotated[str, typer.Argument(help="A session (id prefix or name) or FILE[#SESSION].")],
    ignore: IgnoreOption = None,
    fmt: Annotated[OutFormat, typer.Option("--format", help="text or json.")] = OutFormat.text,
    all_rows: Annotated[
        bool, typer.Option("--all", help="Also list the exchanges that are the same.")
    ] = False,
    db: DbOption = None,
) -> None:
    """Compare two conversations exchange by exchange; exit 0 when equal, 1 when different.

    Ids, timestamps, session ids, progress tokens, MRTR requestState and _meta are ignored,
    and so are the paths a mcptape.toml beside a recording file lists ([diff] ignore = [...]).
    """
    from mcp_proxy.diff import diff_sessions, render_text
    from mcp_proxy.normalize import JsonPathError
    from mcp_proxy.recording.database import load_source

    _require_database_for(db, a, b)

    async def go() -> Any:
        _, sa_ = await load_source(a, db)
        _, sb_ = await load_source(b, db)
        return sa_, sb_

    sa_, sb_ = asyncio.run(go())
    ignore = _with_config(ignore, a, b)
    try:
        result = diff_sessions(sa_, sb_, ignores=ignore or [], a_label=a, b_label=b)
    except JsonPathError as exc:
        fail(str(exc))
    if fmt == OutFormat.json:
        _print_json(result.to_json())
    else:
        print(render_text(result, context=all_rows))
    raise typer.Exit(0 if result.equal else 1)


class Pacing(StrEnum):
    fast = "fast"
    recorded = "recorded"


def _busy(label: str) -> contextlib.AbstractContextManager[Any]:
    """A spinner with the elapsed time on stderr while a long step runs (terminals only)."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(label)


def _replay_one(
    source: str,
    command: list[str] | None,
    upstream: str | None,
    ignore: list[str],
    db: str | None,
    **kw: Any,
) -> tuple[Any, Any]:
    """Replay one recorded session; ``(the session, the ReplayResult)``."""
    from mcp_proxy.commands.recording import progress_bar
    from mcp_proxy.diff import diff_sessions
    from mcp_proxy.recording.database import load_source
    from mcp_proxy.store.engine import resolve_url

    with progress_bar("reading", None) as advance:
        recording, session = asyncio.run(load_source(source, db, advance))
    url = resolve_url(db)
    with _busy(f"replaying {len(session.frames)} recorded frame(s)"):
        if upstream:
            from mcp_proxy.replay import replay_http

            result = replay_http(session, upstream, url, origin=recording.origin, **kw)
        else:
            from mcp_proxy.replay import replay_stdio

            result = replay_stdio(session, list(command or []), url, origin=recording.origin, **kw)
    if ignore and result.replayed is not None:
        result.diff = diff_sessions(
            session,
            result.replayed,
            ignores=ignore,
            a_label=result.diff.a_label if result.diff else "recorded",
            b_label=result.diff.b_label if result.diff else "replay",
        )
    return session, result


def _replay_text(result: Any) -> None:
    from mcp_proxy.diff import render_text

    if result.diff is not None:
        print(render_text(result.diff))
    for note in result.notes:
        print(f"problem: {note}")
    for field in result.redacted:
        print(f"not reproduced: {field}")
    print(f"replay recorded as session {result.session_id}", file=sys.stderr)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def replay(
    source: Annotated[
        str,
        typer.Argument(
            help="A session (id prefix or name), FILE[#SESSION], or a DIRECTORY of recordings."
        ),
    ],
    command: Annotated[
        list[str] | None, typer.Argument(help="The server command and its arguments, after --.")
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream", help="Replay to this HTTP URL instead (a path ending in /sse: legacy)."
        ),
    ] = None,
    pacing: Annotated[
        Pacing, typer.Option("--pacing", help="fast (default) or recorded (keep the gaps).")
    ] = Pacing.fast,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", help="Seconds to wait for each awaited answer.", callback=seconds_value()
        ),
    ] = 15.0,
    ignore: IgnoreOption = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Name of the new session.")
    ] = None,
    fmt: Annotated[
        ReplayFormat,
        typer.Option("--format", help="text, json, or junit (JUnit XML for CI, on stdout)."),
    ] = ReplayFormat.text,
    db: DbOption = None,
) -> None:
    """Re-send a recorded conversation to a live server, record it, and diff it (exit 1 if it differs).

    stdio:  mcptape replay recordings/basic.mcptape.jsonl -- python -m my_server
    HTTP:   mcptape replay recordings/http.mcptape.jsonl --upstream http://127.0.0.1:8000/mcp
    all:    mcptape replay recordings/ --format junit -- python -m my_server

    A directory replays every *.mcptape.jsonl in it (each session of each file), keeps going
    after a difference, and exits 1 if any differed; a replay."GLOB" table (command = ... or
    upstream = ...) in the mcptape.toml beside the recordings names another server for the
    files it matches.
    """
    from mcp_proxy.normalize import JsonPathError, Normalizer

    directory = Path(source) if Path(source).is_dir() else None
    if directory is None and bool(upstream) == bool(command):
        fail("give the server as -- COMMAND… or as --upstream URL (one of them)")
    if directory is not None and command and upstream:
        fail("give the server as -- COMMAND… or as --upstream URL, not both")
    kw: dict[str, Any] = {"timeout": timeout, "pacing": pacing.value, "name": name}
    if directory is None:
        _require_database_for(db, source)
    if directory is not None:
        _replay_directory(directory, list(command or []), upstream, ignore, fmt, db, kw)
    ignore = _with_config(ignore, source)
    try:
        Normalizer.build(ignore or [])
    except JsonPathError as exc:
        fail(str(exc))
    session, result = _replay_one(source, command, upstream, ignore or [], db, **kw)
    if fmt == ReplayFormat.json:
        _print_json(result.to_json())
    elif fmt == ReplayFormat.junit:
        from mcp_proxy.recording.junit import replay_junit

        label = session.session.get("name") or session.id[:8]
        sys.stdout.buffer.write(replay_junit(result.diff, str(label), result.notes))
        sys.stdout.buffer.flush()
    else:
        _replay_text(result)
    raise typer.Exit(0 if result.equal else 1)


def _replay_directory(
    directory: Path,
    command: list[str],
    upstream: str | None,
    ignore: list[str] | None,
    fmt: ReplayFormat,
    db: str | None,
    kw: dict[str, Any],
) -> None:
    """``mcptape replay DIR``: each recording in turn, one report, exit 1 if any differed."""
    from mcp_proxy.normalize import JsonPathError, Normalizer
    from mcp_proxy.recording.junit import replay_junit
    from mcp_proxy.replay.batch import merge_junit, targets

    todo = targets(directory, command, upstream)
    paths = {t.file: _with_config(ignore, str(t.file)) for t in todo}
    try:
        for found in paths.values():
            Normalizer.build(found)
    except JsonPathError as exc:
        fail(str(exc))
    reports: list[Any] = []
    docs: list[bytes] = []
    differing = 0
    for t in todo:
        _, result = _replay_one(t.source, t.command, t.upstream, paths[t.file], db, **kw)
        differing += 0 if result.equal else 1
        if fmt == ReplayFormat.json:
            reports.append({"recording": t.source, **result.to_json()})
        elif fmt == ReplayFormat.junit:
            label = f"{t.file.name.removesuffix('.mcptape.jsonl')}"
            label += "" if t.source == str(t.file) else f"#{t.source.rsplit('#', 1)[1]}"
            docs.append(replay_junit(result.diff, label, result.notes))
        else:
            print(f"== {t.source}: {'same' if result.equal else 'DIFFERENT'}")
            _replay_text(result)
    if fmt == ReplayFormat.json:
        _print_json(reports)
    elif fmt == ReplayFormat.junit:
        sys.stdout.buffer.write(merge_junit(docs))
        sys.stdout.buffer.flush()
    print(
        f"replayed {len(todo)} recording(s) from {directory}: {differing} differ",
        file=sys.stderr,
    )
    raise typer.Exit(1 if differing else 0)


class RecordMode(StrEnum):
    none = "none"
    once = "once"
    new_episodes = "new_episodes"
    all = "all"


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def mock(
    source: Annotated[
        str, typer.Argument(help="A recording FILE[#SESSION] or a session (id prefix or name).")
    ],
    command: Annotated[
        list[str] | None,
        typer.Argument(help="Real server to forward misses to (recording modes), after --."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            help="Serve Streamable HTTP on this port (0 = any); else stdio.",
            callback=port_value,
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address for --port.")] = "127.0.0.1",
    record_mode: Annotated[
        RecordMode,
        typer.Option("--record-mode", help="none (serve only), once, new_episodes or all."),
    ] = RecordMode.none,
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream", help="Real HTTP server for misses (a path ending in /sse: legacy)."
        ),
    ] = None,
    ignore: IgnoreOption = None,
    no_repeat: Annotated[
        bool,
        typer.Option("--no-repeat", help="A used-up match is a miss (default: the last repeats)."),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds to wait for a client or upstream answer.",
            callback=seconds_value(),
        ),
    ] = 30.0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            "--fault",
            help="A fault rule, e.g. 'error code=-32000 method=tools/call name=search' or"
            " 'http status=429 header=Retry-After:1' (repeatable; see docs/faults.md).",
        ),
    ] = None,
    faults_file: Annotated[
        str | None,
        typer.Option("--faults", help="A TOML file of fault rules, re-read when it changes."),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed for rules with p= (repeatable runs).")
    ] = None,
    intercept: Annotated[
        list[str] | None,
        typer.Option(
            "--intercept",
            help="Hold matching messages until you decide (mcptape intercept list/resolve),"
            " e.g. 'method=tools/call' (repeatable; docs/intercept.md).",
        ),
    ] = None,
    intercepts_file: Annotated[
        str | None,
        typer.Option("--intercepts", help="A TOML file of [[intercept]] rules, re-read."),
    ] = None,
    intercept_timeout: Annotated[
        float,
        typer.Option(
            "--intercept-timeout",
            help="Seconds a held message waits before it goes on unchanged; 0 waits for ever.",
            callback=seconds_value(zero="waits for ever"),
        ),
    ] = INTERCEPT_TIMEOUT,
    db: DbOption = None,
    fmt: common.FormatOption = common.Format.text,
) -> None:
    """Stand in for a server, answering from a recording (stdio, or HTTP with --port).

    It says where it listens once it does: on stderr, or with --format json as one JSON line
    on stdout ({"url", "source", "mode"}). --format json needs --port: a stdio mock's stdout
    is the MCP channel itself.

    mcptape mock recordings/basic.mcptape.jsonl                  # a host launches this
    mcptape mock recordings/basic.mcptape.jsonl --port 8765      # http://127.0.0.1:8765/mcp
    mcptape mock recordings/basic.mcptape.jsonl --fault 'delay ms=2000 name=slow'
    """
    from mcp_proxy.mock import MockOptions, run_mock
    from mcp_proxy.mock.serve import check_port
    from mcp_proxy.normalize import JsonPathError, Normalizer

    common.json_errors(fmt)
    check_port(port)
    if fmt is common.Format.json and port is None:
        fail("--format json needs --port: a stdio mock's stdout is the MCP channel")
    if command and upstream:
        fail("give either -- COMMAND… or --upstream URL, not both")
    _require_database_for(db, source)
    ignore = _with_config(ignore, source)
    try:
        Normalizer.build(ignore or [])
    except JsonPathError as exc:
        fail(str(exc))

    held = desk = None
    if intercept or intercepts_file is not None:
        from mcp_proxy.faults.load import load_intercepts
        from mcp_proxy.intercept.desk import InterceptDesk
        from mcp_proxy.store.engine import resolve_url
        from mcp_proxy.store.intercepts import InterceptTable

        held = load_intercepts(intercept or [], intercepts_file)
        desk = InterceptDesk(InterceptTable(resolve_url(db)), timeout=intercept_timeout)

    def announce(url: str) -> None:
        if fmt is common.Format.json:
            common.print_json({"url": url, "source": source, "mode": record_mode.value}, line=True)
        else:
            print(f"mcptape mock: serving {source} at {url}", file=sys.stderr, flush=True)

    raise typer.Exit(
        run_mock(
            MockOptions(
                source=source,
                port=port,
                host=host,
                mode=record_mode.value,
                command=list(command) if command else None,
                upstream=upstream,
                ignores=ignore or [],
                repeat_last=not no_repeat,
                timeout=timeout,
                db=db,
                faults=list(fault or []),
                faults_file=faults_file,
                seed=seed,
                intercepts=held,
                holder=desk,
            ),
            ready=announce,
        )
    )


__all__ = ["diff", "mock", "replay"]
