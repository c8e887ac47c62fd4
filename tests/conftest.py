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

import itertools
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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
    with fresh_db(store_dialect, request, tmp_path) as db:
        yield db


@pytest.fixture
def db_url(db_path: Path | str) -> str:
    return url_of(db_path)


PYCACHE_ENV = "MCPTAPE_TEST_PYCACHE"


def _bytecode_for_subprocesses() -> None:
    """Let the suite's hundreds of Python subprocesses (``mcptape``, relays, SDK test servers,
    recorder workers) load compiled bytecode instead of compiling every imported module.

    With ``PYTHONDONTWRITEBYTECODE`` set (as in this project's containers) and a venv that was
    never compiled, each child compiled mcp, pydantic, typer, rich … from source at every start:
    ``mcptape --help`` took ~1.0 s of CPU instead of ~0.4 s. The variable exists to keep
    ``__pycache__`` out of source trees, so the children write their bytecode to one cache
    outside every tree instead (``PYTHONPYCACHEPREFIX``, kept between runs; the first run fills
    it). The children run the same code from the same sources — Python recompiles a module
    whose source changed — so no test proves anything less. ``MCPTAPE_TEST_PYCACHE=off``
    leaves the environment as it is; a path puts the cache there."""
    wanted = os.environ.get(PYCACHE_ENV, "")
    if wanted.lower() in ("off", "0", "no", "false"):
        return
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # children already write bytecode where the user wants it
    prefix = Path(wanted) if wanted else Path(tempfile.gettempdir()) / f"mcptape-pycache-{_uid()}"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)


WORKERS_ENV = "MCPTAPE_TEST_WORKERS"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite (``uv run pytest`` with no paths: the README's and CI's command) runs on
    two pytest-xdist workers; a run of chosen files or tests stays in one process.

    Most of the suite's time is spent waiting on subprocesses it starts (relays, SDK servers,
    ``mcptape`` commands, Chromium), so one process keeps about one of two cores busy; two
    workers keep both. ``--dist loadgroup``: a module's tests stay on one worker (module
    fixtures start once), and modules marked ``xdist_group`` share a worker (their session
    fixtures are built once). Every worker has its own temporary folders and its own
    PostgreSQL databases (names carry the pid). ``-n N`` on the command line wins;
    ``MCPTAPE_TEST_WORKERS=N`` sets the count (``0``: serial)."""
    option = config.option
    if not hasattr(option, "numprocesses") or hasattr(config, "workerinput"):
        return  # xdist not installed / disabled, or this is a worker
    if option.numprocesses is not None or option.usepdb or option.collectonly:
        return
    wanted = os.environ.get(WORKERS_ENV, "")
    if wanted.strip():
        workers = int(wanted)
    elif config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        workers = min(2, os.cpu_count() or 1)
    else:
        return
    if workers > 1:
        option.numprocesses = workers
        if option.dist == "no":
            option.dist = "loadgroup"
            os.environ[LOADGROUP_ENV] = "1"  # for the workers (see _loadgroup)
            # Hand groups out in the order pytest_collection_modifyitems gives them (longest
            # first), not re-sorted by their number of tests.
            option.loadscopereorder = False


#: Packages whose session fixtures are costly (recorded sessions, a generated 60k-frame
#: database, upstream servers, TLS servers and a shared forward proxy): under xdist each runs
#: on one worker, so those are built once per run, not once per worker.
WORKER_GROUPS = ("tests/dashboard/", "tests/forward/")

#: Modules whose tests share no module fixture and each take long (the fuzz suites, one test
#: per share of viewers): each test is a group of its own, so the two workers share them.
PER_TEST_GROUPS = ("tests/fuzz/",)

#: Seconds a group took on one worker, for the groups that take long: the whole-suite run of
#: 2026-12-01 (session 5, two workers, the machine shared and loaded: load average median 9)
#: and session 4's serial figures for the modules that run did not reach; only their order
#: matters. xdist hands groups out in the order they come: the longest go first, so that the
#: short ones at the end even out the two workers instead of one long group running alone at
#: the end of the run (longest processing time first). Groups not listed follow, most tests
#: first. A stale figure costs balance only, never a result.
GROUP_SECONDS: dict[str, float] = {
    "tests/dashboard/": 650,
    "tests/forward/": 450,
    "tests/fuzz/test_stdio_fuzz.py::test_hostile_stdio_session_is_relayed_recorded_and_viewable[cli-move-and-pages]": 250,
    "tests/fuzz/test_stdio_fuzz.py::test_hostile_stdio_session_is_relayed_recorded_and_viewable[cli-read]": 230,
    "tests/analysis/test_cli.py": 250,
    "tests/mock/test_modes_by_transport.py": 230,
    "tests/analysis/test_real_http.py": 210,
    "tests/recording/test_hardening.py": 160,
    "tests/fuzz/test_http_fuzz.py::test_hostile_http_bodies_are_relayed_recorded_and_viewable[cli-move-and-pages]": 150,
    "tests/fuzz/test_http_fuzz.py::test_hostile_http_bodies_are_relayed_recorded_and_viewable[cli-read]": 130,
    "tests/faults/test_http_faults.py": 130,
    "tests/analysis/test_real_sessions.py": 130,
    "tests/mock/test_record_modes.py": 100,
    "tests/recording/test_otlp.py": 65,
    "tests/faults/test_stdio_faults.py": 65,
    "tests/faults/test_http_faults_stateless.py": 63,
    "tests/recording/test_har_chromium.py": 60,
    "tests/analysis/test_real_false_findings.py": 60,
    "tests/mock/test_faults.py": 60,
    "tests/faults/test_http_faults_legacy.py": 53,
    "tests/recording/test_har_mitmproxy.py": 50,
    "tests/faults/test_stdio_disconnect.py": 46,
}


def group_of(nodeid: str) -> str:
    """The xdist group of a test: its module, its package for :data:`WORKER_GROUPS`, the test
    itself for :data:`PER_TEST_GROUPS` (parameters included)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(PER_TEST_GROUPS):
        return nodeid
    return next((g for g in WORKER_GROUPS if path.startswith(g)), path)


LOADGROUP_ENV = "MCPTAPE_TEST_LOADGROUP"


def _loadgroup(config: pytest.Config) -> bool:
    """Whether tests are handed out by group: ``--dist loadgroup`` on the controller. A worker
    sees ``dist = "no"`` and ``loadgroup = True`` (pytest-xdist ``remote.setup_config``) only
    when ``--dist loadgroup`` was on the command line; when :func:`pytest_cmdline_main` chose
    it, the workers learn it from :data:`LOADGROUP_ENV`, which they inherit."""
    return (
        bool(getattr(config.option, "loadgroup", False))
        or getattr(config.option, "dist", "no") == "loadgroup"
        or os.environ.get(LOADGROUP_ENV) == "1"
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup`` hand out work in the groups of :func:`group_of`.

    pytest-xdist's own ``loadgroup`` groups by an ``@group`` suffix that its worker hook writes
    into ``item._nodeid``; pytest 9 derives ``nodeid`` from ``item._id`` instead, so the suffix
    never reaches the controller and every test became a group of its own (pytest 9.2, xdist
    3.8, seen in session 5: a module's tests ran on both workers, each building the module's
    fixtures, and the dashboard's session recordings were made twice). The scheduler below
    reads the group from the test id itself, which needs nothing from the workers."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (see :func:`pytest_cmdline_main`) keep each group's tests
    together and the groups longest first (:data:`GROUP_SECONDS`), in the same order on every
    worker: the controller hands the groups out in this order
    (:func:`pytest_xdist_make_scheduler`)."""
    if not _loadgroup(config):
        return
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    order = sorted(groups, key=lambda g: (-GROUP_SECONDS.get(g, 0.0), -len(groups[g]), g))
    items[:] = [item for group in order for item in groups[group]]


def _uid() -> str:
    getuid = getattr(os, "getuid", None)
    return str(getuid()) if getuid else os.environ.get("USERNAME", "user")


def pytest_configure(config: pytest.Config) -> None:
    _bytecode_for_subprocesses()
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
    message = _UNAVAILABLE + reason
    if in_ci():
        pytest.fail(message + " (CI requires the PostgreSQL half)", pytrace=False)
    pytest.skip(message)


_UNAVAILABLE = "PostgreSQL unavailable: "


def _reported_problem(terminalreporter: pytest.TerminalReporter) -> str | None:
    """Why PostgreSQL was unavailable, from this process or (under xdist, where the workers
    met the problem) from the skip/failure reports the workers sent back."""
    if _pg_problem:
        return _pg_problem[0]
    for key in ("skipped", "failed", "error"):
        for report in terminalreporter.stats.get(key, []):
            text = str(getattr(report, "longrepr", "") or "")
            if _UNAVAILABLE in text:
                return text.split(_UNAVAILABLE, 1)[1].split("\n")[0].split("'")[0].strip()
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    problem = _reported_problem(terminalreporter)
    if problem:
        verdict = "FAILED (CI)" if in_ci() else "skipped"
        terminalreporter.write_line(
            f"PostgreSQL half {verdict}: {problem}", red=in_ci(), yellow=not in_ci()
        )


@contextmanager
def fresh_db(
    dialect: str, request: pytest.FixtureRequest, directory: Path, name: str = "rec.db"
) -> Iterator[Path | str]:
    """A new database of ``dialect``: a SQLite ``Path`` in ``directory`` (not created yet) or
    the URL of a PostgreSQL database migrated to head, dropped on exit. Fixtures of any scope
    build on it (the PostgreSQL server is the session's ``pg_server``)."""
    if dialect == "sqlite":
        yield directory / name
        return
    server: PgServer = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield url
    finally:
        server.drop_database(url)


@pytest.fixture(params=DIALECTS)
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """A fresh database per test: a SQLite ``Path`` (not created) or a PostgreSQL URL."""
    with fresh_db(request.param, request, tmp_path) as db:
        yield db


@pytest.fixture
def any_db_url(any_db: Path | str) -> str:
    """:func:`any_db` as a SQLAlchemy URL, whatever the dialect."""
    return url_of(any_db)


@pytest.fixture
def db_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """``db_factory(dialect)``: another fresh database of that dialect for this test (a
    ``Path`` or a URL, as :func:`any_db`), for tests that move recordings between stores."""
    with ExitStack() as stack:
        count = itertools.count(1)

        def make(dialect: str) -> Path | str:
            return stack.enter_context(fresh_db(dialect, request, tmp_path, f"db{next(count)}.db"))

        yield make


@pytest.fixture(scope="session", params=DIALECTS)
def session_any_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database per dialect for the whole run (a package's shared recordings)."""
    with fresh_db(request.param, request, tmp_path_factory.mktemp("db")) as db:
        yield url_of(db)


@pytest.fixture(scope="module", params=DIALECTS)
def module_any_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One database per test module and dialect, for modules that record once and read often."""
    with fresh_db(request.param, request, tmp_path_factory.mktemp("db")) as db:
        yield url_of(db)


@pytest.fixture(scope="module", params=DIALECTS)
def module_any_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path | str]:
    """:func:`module_any_db_url` as :func:`any_db` gives it: a SQLite ``Path`` or a URL."""
    with fresh_db(request.param, request, tmp_path_factory.mktemp("db")) as db:
        yield db


def crossed(values: list[str]) -> list[Any]:
    """``values`` (e.g. the host modes of an already parametrised test) each paired with a
    *recording* dialect and an *import* dialect, so that across the params each dialect serves
    in each role — both dialects covered, and recordings moved between them, without running
    the test more often: ``[("auto", "sqlite", "postgresql"), ("legacy", "postgresql",
    "sqlite")]`` (one dialect enabled: it in both roles). The test asks ``db_factory`` for the
    two databases; a PostgreSQL param fails or skips as :func:`pg_server` says."""
    out = []
    for i, value in enumerate(values):
        first, second = DIALECTS[i % len(DIALECTS)], DIALECTS[(i + 1) % len(DIALECTS)]
        out.append(pytest.param(value, first, second, id=f"{value}-{first}-to-{second}"))
    return out
