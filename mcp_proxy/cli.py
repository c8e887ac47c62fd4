"""The ``mcptape`` command line: thin typer commands over the library.

Each command lives in a module of :mod:`mcp_proxy.commands` that registers itself on ``app``;
commands import their heavy dependencies lazily so that ``mcptape record`` starts fast (a host
launches it in place of the server on every start).

Exit codes (stable, documented in the README):
  0 ok · 1 unexpected failure · 2 usage error · 3 store (database) error · 4 not found
  · the wrapped server's own status for ``record`` (127 command not found, 126 not executable,
  128+N killed by signal N).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn, TypeVar

import typer

from mcp_proxy.errors import ERROR_FORMAT_ENV, McptapeError, StoreError, UserError, report

app = typer.Typer(
    name="mcptape",
    help="A flight recorder for the Model Context Protocol.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    """A flight recorder for the Model Context Protocol."""


EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_NOT_FOUND = 4

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one clear line on stderr and exit with ``code``.

    With ``MCPTAPE_ERROR_FORMAT=json`` the line is a JSON envelope instead, for scripts.
    """
    report(message, code)
    raise typer.Exit(code)


def handle_errors[F: Callable[..., Any]](func: F) -> F:
    """Map our exceptions to one line and a stable exit code (the boundary for the CLI)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # `--format json` asks for JSON errors by setting MCPTAPE_ERROR_FORMAT (children see it
        # too); it is this command's setting, so it is put back when the command returns — a
        # process that runs commands one after another (tests, an embedding) keeps its own.
        before = os.environ.get(ERROR_FORMAT_ENV)
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            fail(str(exc), exc.exit_code)
        except StoreError as exc:
            fail(f"database error: {exc}", EXIT_STORE)
        except McptapeError as exc:
            fail(str(exc), EXIT_UNEXPECTED)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # `mcptape show ... | head`: the reader went away; that is not an error.
            try:
                sys.stdout = open(os.devnull, "w")
            except OSError:
                pass
            raise typer.Exit(0) from None
        finally:
            if before is None:
                os.environ.pop(ERROR_FORMAT_ENV, None)
            else:
                os.environ[ERROR_FORMAT_ENV] = before

    return wrapper  # type: ignore[return-value]


def _register_commands() -> None:
    # Importing a module registers its commands on `app`.
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"mcp_proxy.commands.{name}")


COMMAND_MODULES: list[str] = [
    "record",
    "browse",
    "demo",
    "recording",
    "travel",
    "hosts",
    "dashboard",
    "analyze",
    "db",  # mcptape db upgrade|status|copy
    "intercept",  # mcptape intercept list|resolve
]


_METAVARS = {int: "INTEGER", float: "FLOAT", str: "TEXT"}


def _metavar(param: Any) -> str:
    """The conventional click metavar for a typer parameter (``TEXT``, ``[a|b]``, none for flags).

    Typer 0.29 shows Python type tags (``<str>``, ``<bool>``, ``<list[str]>``); every other
    click-based CLI a user knows (and typer before it) shows ``TEXT``/``INTEGER``/``[a|b]`` and
    nothing after a flag.
    """
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return ""
    if param.param_type_name == "option" and (param.is_flag or desc.annotation is bool):
        return ""
    if desc.is_choice and desc.choices:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices) + "]"
    if desc.is_path:
        return "PATH"
    annotation = desc.annotation
    args = getattr(annotation, "__args__", None)
    if desc.is_list and args:
        annotation = args[0]
    return _METAVARS.get(annotation, "TEXT")


def classic_help(command: Any, help_names: list[str] | None = None) -> Any:
    """Give every option and argument of ``command`` (recursively) a conventional metavar."""
    names = help_names or ["-h", "--help"]
    ctx = command.context_class(command, help_option_names=names)
    help_option = command.get_help_option(ctx)  # created once and cached by the command
    if help_option is not None:
        help_option.metavar = ""
    for param in getattr(command, "params", []):
        if not hasattr(param, "type_descriptor") or param.metavar is not None:
            continue
        shown = _metavar(param)
        if param.param_type_name == "argument":
            name = (param.name or "arg").upper()
            param.metavar = name
            many = "..." if param.nargs != 1 else ""
            usage = name + many if param.required else f"[{name}]{many}"
            # Instance attributes: typer has no option for the argument's type column or for
            # click's usage form (SESSION, [SESSION]) instead of {session}.
            param.display_type_rich = lambda ctx, shown=shown: shown  # type: ignore[method-assign]
            param._usage_display_name = lambda usage=usage: usage  # type: ignore[attr-defined]
        else:
            param.metavar = shown
    for sub in getattr(command, "commands", {}).values():
        classic_help(sub, names)
    return command


#: One example per command (and sub-command), shown at the end of its ``--help``; keyed by the
#: command path after ``mcptape`` ("" is the top level). tests/test_help.py checks that every
#: command has one and that it parses.
EXAMPLES: dict[str, str] = {
    "": "mcptape demo",
    "record": "mcptape record --name fs -- npx -y @modelcontextprotocol/server-filesystem .",
    "sessions": "mcptape sessions --since 2h",
    "show": "mcptape show fs --exchanges",
    "tail": "mcptape tail fs --from-start",
    "demo": "mcptape demo --no-browser",
    "export": "mcptape export fs -o fs.jsonl",
    "import": "mcptape import session.har",
    "formats": "mcptape formats",
    "diff": "mcptape diff fs.jsonl fs",
    "replay": "mcptape replay fs.jsonl -- npx -y @modelcontextprotocol/server-filesystem .",
    "mock": "mcptape mock fs.jsonl --port 8080",
    "install": "mcptape install --host claude-desktop --dry-run",
    "uninstall": "mcptape uninstall --host claude-desktop",
    "hosts": "mcptape hosts --format json",
    "doctor": "mcptape doctor --fix",
    "dashboard": "mcptape dashboard --port 8765",
    "check": "mcptape check fs --fail-on warning",
    "stats": "mcptape stats --name fs --since 3d",
    "db": "mcptape db status",
    "db status": "mcptape db status --format json",
    "intercept": "mcptape intercept list",
    "intercept list": "mcptape intercept list --format json",
    "intercept resolve": "mcptape intercept resolve 3 --set params.arguments.path=/tmp/x",
    "db upgrade": "mcptape db upgrade --db postgresql://mcptape@db.example/mcptape",
    "db copy": "mcptape db copy laptop.db postgresql://mcptape@db.example/mcptape",
}


def with_examples(command: Any, path: str = "") -> Any:
    """Give ``command`` and its sub-commands their ``Example:`` epilog from :data:`EXAMPLES`."""
    example = EXAMPLES.get(path)
    if example is not None and not command.epilog:
        command.epilog = f"Example: {example}"
    for name, sub in getattr(command, "commands", {}).items():
        with_examples(sub, f"{path} {name}".strip())
    return command


def build_command() -> Any:
    """The click command tree of ``mcptape``: every command registered, classic metavars and an
    example in every ``--help``."""
    import typer.main

    _register_commands()
    return with_examples(classic_help(typer.main.get_command(app)))


def _click_exceptions() -> Any:
    """The exception module of the click that typer runs on.

    Typer 0.2x vendors click as ``typer._click`` and re-exports only ``BadParameter``, ``Exit``
    and ``Abort``; older typer runs on the ``click`` package. Either way the classes are there.
    """
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - typer before it vendored click
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def _command_path(argv: list[str]) -> str:
    """``mcptape`` plus the subcommand named in ``argv`` (for "see … --help" hints)."""
    for arg in argv:
        if not arg.startswith("-"):
            return f"mcptape {arg}"
        break
    return "mcptape"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: parser errors are one line and exit 2, like ours."""
    click = _click_exceptions()
    # Whatever a recording holds (a lone surrogate decoded from JSON's "\ud800") is printed as
    # its escape rather than failing the command half-way through its output.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")

    argv = sys.argv[1:] if argv is None else argv
    command = build_command()
    try:
        code = command.main(args=argv, prog_name="mcptape", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        if exc.format_message().strip():  # (rich help has been printed already)
            exc.show()  # `mcptape` alone: the help, exit 2 (as click does)
        sys.exit(EXIT_USAGE)
    except click.UsageError as exc:
        report(f"{exc.format_message()} (see: {_command_path(argv)} --help)", EXIT_USAGE)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        report(exc.format_message(), exc.exit_code)
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    # Run through the package's entry point: commands register on `mcp_proxy.cli.app`, which
    # is not this `__main__` module's app.
    from mcp_proxy.entry import main as entry_main

    entry_main()
