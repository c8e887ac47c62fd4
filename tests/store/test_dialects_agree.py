"""SQLite and PostgreSQL print the same: the same sessions, copied from one store to the other,
give the same output byte for byte for every command that reads a whole session — ``check``
(stored findings, ``--recompute``, ``--format json``), ``stats``, ``show`` (text, JSON, ``-x``).

Both stores hand the analysis and the renderer one row shape (``frame_rows`` as stored, the
shape integer: :func:`mcp_proxy.store.stream.shaped_pages`); this holds what they print to it
on the fuzz corpus's hostile lines and a sample of the finding catalogue (injected frames,
HTTP exchanges, SSE, noise, stderr, invalid UTF-8 …).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from mcp_proxy.store.copy import copy_store
from mcp_proxy.store.engine import ensure_schema
from tests.analysis.cases import CASES
from tests.analysis.test_decoder_rows import hostile
from tests.conftest import running_full, url_of
from tests.helpers.cli import run_mcptape

COMMANDS = [
    ("check",),
    ("check", "--format", "json"),
    ("check", "--recompute"),
    ("stats",),
    ("stats", "--recompute"),
    ("show",),
    ("show", "--format", "json"),
    ("show", "-x"),
]


def cli(*args: str) -> tuple[int, str, str]:
    """The real entry point in-process (exit code, stdout without exchange ids, stderr)."""
    done = run_mcptape(*args)
    return done.returncode, EXCHANGE_ID.sub("", done.stdout), done.stderr


#: An HTTP exchange's id: the store's own (``db copy`` gives the copies the destination's).
EXCHANGE_ID = re.compile(
    r', "http_exchange_id": \d+|(?<=exchange )\d+|(?<=exchanges )\d+(?:, \d+)*'
)


@pytest.mark.corpus
def test_both_dialects_print_the_same_for_every_session(
    db_factory: Any,
) -> None:
    lite = url_of(db_factory("sqlite"))
    ensure_schema(lite)
    names = ["hostile"]
    hostile().record(lite, name="hostile")
    # Every catalogue session reaches both stores through the same code (one row shape); the
    # default run takes a few, --full an eighth of them (each costs 16 CLI runs).
    for code in sorted(CASES)[:: 8 if running_full() else 48]:
        for which in (0, 1):
            names.append(f"{code}-{which}")
            CASES[code][which]().record(lite, name=names[-1])
    pg = url_of(db_factory("postgresql"))
    copy_store(lite, pg)
    compared = 0
    for name in names:
        for command in COMMANDS:
            on_sqlite = cli(*command, name, "--db", lite)
            on_pg = cli(*command, name, "--db", pg)
            assert on_pg == on_sqlite, (name, command)
            compared += len(on_sqlite[1])
    assert compared > 10_000
