"""Fixtures shared by every test package: databases (SQLite and PostgreSQL) and the mcptape command.

``db_path`` / ``db_url``: a SQLite file (not created yet) — what most tests have always used. A
module marked ``pytestmark = pytest.mark.both_dialects`` gets them once per dialect: for
PostgreSQL ``db_path`` is then the URL (a ``str``) of a fresh database.

``any_db`` / ``any_db_url`` (and ``module_any_db_url``): the same test once per dialect, ids
``sqlite`` and ``postgresql``. ``any_db`` is a ``Path`` for SQLite and a URL string for
PostgreSQL, so a test passes ``str(any_db)`` to ``--db`` and hands ``any_db`` to
``tests.helpers.db`` readers either way. Each PostgreSQL database is fresh, created from a
template already migrated to the head revision; ``pg_server`` gives tests that need an empty
database or several of them their own.

PostgreSQL comes from ``MCPTAPE_TEST_PG`` (``.ci/run`` starts a cluster and sets it) or from a
cluster this session starts itself. When neither works, the PostgreSQL half fails in CI
(``CI`` set) and is skipped elsewhere, with the reason printed at the end of the run.
``MCPTAPE_TEST_DIALECTS=sqlite`` runs only the SQLite half.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.db import ENV_DIALECTS, PgServer, start_pg_server, url_of

BIN = Path(sys.executable).parent


def mcptape_cmd() -> list[str]:
    """The installed console script, exactly as a host would launch it."""
    script = BIN / "mcptape"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "mcp_proxy.cli"]


@pytest.fixture
def store_dialect(request: pytest.FixtureRequest) -> str:
    """``sqlite`` unless the module is marked ``both_dialects`` (then once per dialect)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_path(store_dialect: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A SQLite file (not created yet); in a ``both_dialects`` module, for the PostgreSQL half,
    the URL (a ``str``) of a fresh database migrated to head — pass ``str(db_path)`` to
    ``--db`` and ``db_path`` itself to ``tests.helpers.db``, and it works for both."""
    if store_dialect == "sqlite":
        yield tmp_path / "rec.db"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)


@pytest.fixture
def db_url(db_path: Path | str) -> str:
    return url_of(db_path)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_dialects: run the module's db_path/db_url tests on SQLite and on PostgreSQL",
    )
    config.addinivalue_line(
        "markers",
        "sqlite_only: in a both_dialects module, a test of a SQLite mechanism (file locks …)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``pytestmark = pytest.mark.both_dialects`` in a module: its ``db_path``/``db_url`` tests
    run once per dialect (ids ``sqlite`` and ``postgresql``); a test marked ``sqlite_only``
    (it exercises a SQLite mechanism, e.g. a file lock) runs on SQLite alone."""
    if "store_dialect" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_dialects"
    ):
        only = metafunc.definition.get_closest_marker("sqlite_only")
        metafunc.parametrize("store_dialect", ["sqlite"] if only else DIALECTS, indirect=True)


# --------------------------------------------------------------------------- both dialects
def _dialects() -> list[str]:
    wanted = os.environ.get(ENV_DIALECTS, "sqlite,postgresql")
    return [d for d in ("sqlite", "postgresql") if d in wanted.split(",")] or ["sqlite"]


DIALECTS = _dialects()
_pg_problem: list[str] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for this test session (fails in CI, skips locally, when none)."""
    if _pg_problem:
        _unavailable(_pg_problem[0])
    try:
        server = start_pg_server()
    except Exception as exc:
        _pg_problem.append(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        _unavailable(_pg_problem[0])
    try:
        yield server
    finally:
        server.close()


def _unavailable(reason: str) -> None:
    message = f"PostgreSQL unavailable: {reason}"
    if in_ci():
        pytest.fail(message + " (CI requires the PostgreSQL half)", pytrace=False)
    pytest.skip(message)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _pg_problem:
        verdict = "FAILED (CI)" if in_ci() else "skipped"
        terminalreporter.write_line(
            f"PostgreSQL half {verdict}: {_pg_problem[0]}", red=in_ci(), yellow=not in_ci()
        )


@pytest.fixture(params=DIALECTS)
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """A fresh database per test: a SQLite ``Path`` (not created) or a PostgreSQL URL."""
    if request.param == "sqlite":
        yield tmp_path / "rec.db"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)


@pytest.fixture
def any_db_url(any_db: Path | str) -> str:
    """:func:`any_db` as a SQLAlchemy URL, whatever the dialect."""
    return any_db if isinstance(any_db, str) else "sqlite:///" + str(any_db)


@pytest.fixture(scope="session", params=DIALECTS)
def session_any_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database per dialect for the whole run (a package's shared recordings)."""
    if request.param == "sqlite":
        yield "sqlite:///" + str(tmp_path_factory.mktemp("db") / "rec.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)


@pytest.fixture(scope="module", params=DIALECTS)
def module_any_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database per test module and dialect, for modules that record once and read often."""
    if request.param == "sqlite":
        yield "sqlite:///" + str(tmp_path_factory.mktemp("db") / "rec.db")
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)
