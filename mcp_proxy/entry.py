"""The console-script entry point, with a fast path for the way hosts launch ``mcptape record``.

A host starts ``mcptape record --name NAME --db DB -- COMMAND…`` every time it starts a server,
and that process lives as long as the server does. Building the typer application imports
typer, click and pydantic (about 20 MB and a tenth of a second) for nothing on that path. So the
plain stdio form — only ``--name``/``-n`` and ``--db`` before ``--`` — is recognised here and
run directly; anything else (``--help``, ``--upstream``, ``--fault``/``--faults``, an unknown
option, a typo) goes to the typer application, which stays the one owner of the command line
and of its error messages (a fault rule that does not parse is one line and exit 2 there).
"""

from __future__ import annotations

import sys


def parse_plain_record(argv: list[str]) -> tuple[str | None, str | None, list[str]] | None:
    """``(name, db, command)`` for ``record [--name N] [--db D] -- CMD…``; None otherwise."""
    if not argv or argv[0] != "record" or "--" not in argv:
        return None
    split = argv.index("--")
    opts, command = argv[1:split], argv[split + 1 :]
    if not command:
        return None
    values: dict[str, str] = {}
    i = 0
    while i < len(opts):
        tok = opts[i]
        key, eq, val = tok.partition("=")
        if key in ("--name", "-n", "--db") and not eq:
            if i + 1 >= len(opts):
                return None
            val = opts[i + 1]
            i += 1
        elif key not in ("--name", "--db") or not eq:
            return None
        values["db" if key == "--db" else "name"] = val
        i += 1
    return values.get("name"), values.get("db"), command


def main() -> None:
    plain = parse_plain_record(sys.argv[1:])
    if plain is not None:
        from mcp_proxy.errors import McptapeError, StoreError, UserError, report
        from mcp_proxy.relay.stdio import record_stdio

        name, db, command = plain
        try:
            # The recorder process resolves ``--db`` (or MCPTAPE_DB, or the default location)
            # as every command does, in the same directory and environment: the relay never
            # imports the store (pathlib, platformdirs, dataclasses: start-up CPU and memory).
            sys.exit(record_stdio(command, db_url=db or "", name=name))
        except UserError as exc:
            report(str(exc), exc.exit_code)
            sys.exit(exc.exit_code)
        except StoreError as exc:
            report(f"database error: {exc}", 3)
            sys.exit(3)
        except McptapeError as exc:
            report(str(exc), 1)
            sys.exit(1)
    from mcp_proxy.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
