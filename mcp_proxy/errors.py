"""The project's own exception hierarchy: shallow on purpose.

Every error a user can cause is a :class:`UserError` carrying a one-line message and a stable
exit code; the CLI prints the message and exits with the code, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys


class McptapeError(Exception):
    """Base of every error mcptape raises on purpose."""


class UserError(McptapeError):
    """Something the user can fix: bad arguments, missing files, unknown sessions.

    ``exit_code`` is part of the CLI contract (see README, "Exit codes").
    """

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NotFoundError(UserError):
    """A session, frame or file named by the user does not exist (or is ambiguous)."""

    exit_code = 4


class BadValueError(UserError):
    """A filter, cursor, number or form value that cannot be used as given.

    The CLI exits 2 with it; the dashboard answers HTTP 400.
    """


class StoreError(McptapeError):
    """The database could not be opened, migrated or written."""


#: The variable that asks for JSON error lines (``--format json`` sets it for its command).
ERROR_FORMAT_ENV = "MCPTAPE_ERROR_FORMAT"


def report(message: str, code: int) -> None:
    """Print one error line on stderr: plain, or a JSON envelope with MCPTAPE_ERROR_FORMAT=json."""
    if os.environ.get(ERROR_FORMAT_ENV) == "json":
        print(json.dumps({"error": {"message": message, "code": code}}), file=sys.stderr)
    else:
        print(f"mcptape: {message}", file=sys.stderr)
