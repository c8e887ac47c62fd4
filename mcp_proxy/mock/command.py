"""``python -m mcp_proxy.mock SOURCE …``: the mock's own command line, without the CLI.

Hosts without the console script on PATH (the pytest plugin's stdio command, a host config
pointing at a virtualenv's python) launch the mock this way. It takes the options of
``mcptape mock`` and calls the library the same way the CLI command does; the mock room never
imports the CLI (docs/architecture.md, checked by tests/test_layers.py). A usage error is one
line on stderr and exit 2; other errors map to the exit codes of docs/cli-exit-codes.md.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

from mcp_proxy.errors import McptapeError, NotFoundError, StoreError, UserError, report
from mcp_proxy.limits import MAX_FLAG_SECONDS
from mcp_proxy.mock.serve import RECORD_MODES, MockOptions, check_port, run_mock

EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_UNEXPECTED = 1


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit 2, like the CLI."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"mock: {message}", exit_code=EXIT_USAGE)


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0 or value > MAX_FLAG_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} is not a number of seconds (more than 0, at most {MAX_FLAG_SECONDS:g})"
        )
    return value


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m mcp_proxy.mock",
        description="mcptape mock, without the CLI.",
        allow_abbrev=False,
    )
    p.add_argument("source", help="A recording FILE[#SESSION] or a session (id prefix or name).")
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--record-mode", choices=RECORD_MODES, default="none")
    p.add_argument("--upstream", default=None)
    p.add_argument("--ignore", action="append", default=[])
    p.add_argument("--no-repeat", action="store_true")
    p.add_argument("--timeout", type=_seconds, default=30.0)
    p.add_argument("--fault", action="append", default=[])
    p.add_argument("--faults", dest="faults_file", default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--db", default=None)
    return p


def options(argv: list[str]) -> MockOptions:
    """The :class:`MockOptions` for ``argv`` (``SOURCE [options] [-- COMMAND…]``), checked."""
    from mcp_proxy.normalize import JsonPathError, Normalizer

    split = argv.index("--") if "--" in argv else len(argv)
    args = parser().parse_args(argv[:split])
    command = argv[split + 1 :]
    check_port(args.port)
    if command and args.upstream:
        raise UserError("give either -- COMMAND… or --upstream URL, not both")
    _require_database_for(args.db, args.source)
    ignores = _with_config(args.ignore, args.source)
    try:
        Normalizer.build(ignores)
    except JsonPathError as exc:
        raise UserError(str(exc)) from None
    return MockOptions(
        source=args.source,
        port=args.port,
        host=args.host,
        mode=args.record_mode,
        command=command or None,
        upstream=args.upstream,
        ignores=ignores,
        repeat_last=not args.no_repeat,
        timeout=args.timeout,
        db=args.db,
        faults=args.fault,
        faults_file=args.faults_file,
        seed=args.seed,
    )


def _with_config(ignore: list[str], source: str) -> list[str]:
    """``--ignore`` paths plus those ``mcptape.toml`` beside the recording FILE lists."""
    from mcp_proxy.recording.database import split_source
    from mcp_proxy.replay.config import ignores_for

    ref = split_source(source)
    return [*ignore, *(p for p in (ignores_for(ref[0]) if ref else []) if p not in ignore)]


def _require_database_for(db: str | None, source: str) -> None:
    """A SOURCE that is a session (not a FILE) is read from ``--db``, which must exist."""
    from mcp_proxy.recording.database import split_source
    from mcp_proxy.render import cli_name
    from mcp_proxy.store.engine import resolve_url
    from mcp_proxy.store.queries import missing_database

    if split_source(source) is not None:
        return
    missing = missing_database(resolve_url(db))
    if missing is not None:
        raise NotFoundError(
            f"no database at {missing} (record a session first — try: {cli_name()} demo —"
            " or check --db / MCPTAPE_DB)"
        )


def main(argv: list[str]) -> int:
    """Run the mock for ``argv``; the exit code (errors reported as one line on stderr)."""

    def announce(url: str) -> None:
        print(f"mcptape mock: serving {opts.source} at {url}", file=sys.stderr, flush=True)

    try:
        opts = options(argv)
        return run_mock(opts, ready=announce)
    except UserError as exc:
        report(str(exc), exc.exit_code)
        return exc.exit_code
    except StoreError as exc:
        report(f"database error: {exc}", EXIT_STORE)
        return EXIT_STORE
    except McptapeError as exc:
        report(str(exc), EXIT_UNEXPECTED)
        return EXIT_UNEXPECTED
    except KeyboardInterrupt:
        return 130
