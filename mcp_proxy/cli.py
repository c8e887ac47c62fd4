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

from mcp_proxy.errors import McptapeError, StoreError, UserError, report

app = typer.Typer(
    name="mcptape",
    help="A flight recorder for the Model Context Protocol.",
    no_args_is_help=True,
    add_completion=False,
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

    return wrapper  # type: ignore[return-value]


def _register_commands() -> None:
    # Importing a module registers its commands on `app`.
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"mcp_proxy.commands.{name}")


COMMAND_MODULES: list[str] = ["record", "browse", "demo", "travel", "hosts", "dashboard", "analyze"]
COMMAND_MODULES.append("db")  # mcptape db upgrade|status|copy


def main() -> None:
    """Console-script entry point."""
    _register_commands()
    app()


if __name__ == "__main__":
    # Run through the package's entry point: commands register on `mcp_proxy.cli.app`, which
    # is not this `__main__` module's app.
    from mcp_proxy.entry import main as entry_main

    entry_main()
