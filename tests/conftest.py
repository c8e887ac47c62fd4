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

The test pyramid (README "Tests"): the default run (``uv run pytest``) runs the PostgreSQL half
only where the store is the subject (:data:`PG_CONTRACT`) and in the tests marked ``smoke``
(one end-to-end recording per transport), the mitmproxy forward engine only where marked
``smoke``, and leaves tests marked ``full`` out; ``--full`` (or ``MCPTAPE_TEST_FULL=1``) runs
everything, ``--only-full`` just what the default leaves out (:func:`matrix_only`).
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Container, Iterable, Iterator
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
    if _compiled_in_place():
        return  # installed with its bytecode (.ci/run): a prefix would hide it from the children
    prefix = Path(wanted) if wanted else Path(tempfile.gettempdir()) / f"mcptape-pycache-{_uid()}"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)


def _compiled_in_place() -> bool:
    """The project and its dependencies were compiled beside their sources (``.ci/run``: ``uv
    sync --compile-bytecode`` and ``compileall``): then the children read that bytecode, and a
    ``PYTHONPYCACHEPREFIX`` would hide it from them — a fresh clone's first run compiled every
    module again into an empty prefix (30–60 s of the default run, 2026-12-02)."""
    import importlib.util

    for name in ("mcp_proxy", "mcp", "typer"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            return False
        if not Path(importlib.util.cache_from_source(spec.origin)).exists():
            return False
    return True


WORKERS_ENV = "MCPTAPE_TEST_WORKERS"


def workers_from_env(value: str) -> int:
    """``MCPTAPE_TEST_WORKERS``'s count (``0``: serial); anything else is one usage line."""
    try:
        workers = int(value)
    except ValueError:
        workers = -1
    if workers < 0:
        raise pytest.UsageError(f"{WORKERS_ENV}={value!r}: a number of workers (0: serial)")
    return workers


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite (``uv run pytest`` with no paths: the README's and CI's command) runs on
    two pytest-xdist workers more than the machine has cores (4 on 2 cores); a run of chosen
    files or tests stays in one process.

    Much of the suite's time is spent waiting on subprocesses it starts (relays, SDK servers,
    ``mcptape`` commands, Chromium). Measured on a quiet 2-core machine, back to back, on the
    same tree (2026-12-02): three workers ran the default run in 338 s at 1.74 cores busy, four
    in 314 s at 1.82. ``--dist loadfile``: a module's tests stay on one worker (module
    fixtures start once); the costly session fixtures are built once per run into files that
    every worker copies (``tests/helpers/shared.py``). Every worker has its own temporary
    folders and its own PostgreSQL databases (names carry the pid). ``-n N`` on the command
    line wins; ``MCPTAPE_TEST_WORKERS=N`` sets the count (``0``: serial)."""
    option = config.option
    if not hasattr(option, "numprocesses") or hasattr(config, "workerinput"):
        return  # xdist not installed / disabled, or this is a worker
    if option.numprocesses is not None or option.usepdb or option.collectonly:
        return
    wanted = os.environ.get(WORKERS_ENV, "")
    if wanted.strip():
        workers = workers_from_env(wanted)
    elif config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        workers = (os.cpu_count() or 1) + 2
    else:
        return
    if workers > 1:
        option.numprocesses = workers
        if option.dist == "no":
            option.dist = "loadfile"


# --------------------------------------------------------------------------- the test pyramid
FULL_ENV = "MCPTAPE_TEST_FULL"

#: Where the PostgreSQL half of a dialect-parametrised test stays in the default run: the
#: dialect contract suite over the store API (and the recorder's PostgreSQL-only paths).
#: Elsewhere a test keeps it only when marked ``smoke`` (one end-to-end recording per
#: transport); the rest of the dialect matrix runs under ``--full``.
PG_CONTRACT = (
    "tests/store/",
    "tests/recorder/test_pg_",
    "tests/recorder/test_pipeline.py",  # the recorder's pipelined PostgreSQL writer
    "tests/test_recorder.py::",  # the recorder's batches into each store
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcptape", "mcptape's test pyramid")
    group.addoption(
        "--full",
        action="store_true",
        help="run the whole matrix: both dialects everywhere, both forward engines and the "
        f"hypothesis corpora that start real processes ({FULL_ENV}=1 does the same)",
    )
    group.addoption(
        "--only-full",
        action="store_true",
        help="run only what the default run leaves out (CI runs the default, then this)",
    )


def full_run(config: pytest.Config) -> bool:
    """Whether this run is the whole matrix (``--full``, ``--only-full`` or ``MCPTAPE_TEST_FULL``)."""
    env = os.environ.get(FULL_ENV, "").lower() not in ("", "0", "false", "no")
    return bool(config.getoption("full") or config.getoption("only_full") or env)


_RUN: list[pytest.Config] = []


def running_full() -> bool:
    """:func:`full_run` for code that runs at collection (module-level parametrisations)."""
    return bool(_RUN) and full_run(_RUN[0])


def catalogue_sample(items: Iterable[Any], every: int = 4) -> list[Any]:
    """The finding catalogue's sessions (or any long list of equal shapes) a test compares
    two readings over: every ``every``-th in the default run, all of them under ``--full``
    (mark the test ``corpus`` so that ``--only-full`` runs it again with all of them)."""
    listed = list(items)
    return listed if running_full() else listed[::every]


def corpus_phases() -> tuple[Any, ...]:
    """Hypothesis phases of a corpus that starts real processes per example: in the default
    run its explicit ``@example`` alone (one example of every hostile kind at its door); the
    generated examples, and shrinking, under ``--full``."""
    from hypothesis import Phase

    if running_full():
        return tuple(Phase)
    return (Phase.explicit,)


def matrix(values: Iterable[Any], keep: Container[Any]) -> list[Any]:
    """``values`` as parameters (ids as before) where only those in ``keep`` run in the default
    run; the others are marked ``full`` (a transport × era matrix whose every cell is the same
    code path but one: the cells kept are the ones that differ)."""
    full = pytest.mark.full
    return [
        v
        if v in keep
        else pytest.param(*v, marks=full)
        if isinstance(v, tuple)
        else pytest.param(v, marks=full)
        for v in values
    ]


def matrix_only(item: pytest.Item) -> str | None:
    """Why the default run leaves ``item`` to ``--full`` (None: it runs in the default run).

    - marked ``full`` (e.g. a hypothesis corpus starting real processes per example);
    - a parameter of ``postgresql`` outside :data:`PG_CONTRACT` and not marked ``smoke``;
    - a forward ``engine`` parameter of ``mitmproxy`` not marked ``smoke``;
    - marked ``smoke(dialect=D)`` (its end-to-end example is the one on ``D``) but run on
      another dialect, while ``D`` is enabled: that twin is the dialect matrix.
    """
    if item.get_closest_marker("full"):
        return "full"
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    smoke = item.get_closest_marker("smoke")
    if smoke is not None:
        only = smoke.kwargs.get("dialect")
        if only in DIALECTS and params.get("store_dialect", only) != only:
            return str(params["store_dialect"])
        return None
    if any(isinstance(v, str) and v == "postgresql" for v in params.values()):
        if not item.nodeid.startswith(PG_CONTRACT):
            return "postgresql"
    if params.get("engine") == "mitmproxy":
        return "mitmproxy engine"
    return None


_LEFT_OUT: dict[str, int] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run leaves the matrix (:func:`matrix_only`) to ``--full``; ``--only-full``
    runs just that part, and the modules marked ``corpus`` again (their generated examples,
    :func:`corpus_phases`). Deselected tests are counted in the summary, never silently lost."""
    only = bool(config.getoption("only_full"))
    if full_run(config) and not only:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        why = matrix_only(item)
        if (why is None) != only or (only and item.get_closest_marker("corpus")):
            keep.append(item)
        else:
            drop.append(item)
            if why is not None:
                _LEFT_OUT[why] = _LEFT_OUT.get(why, 0) + 1
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _uid() -> str:
    getuid = getattr(os, "getuid", None)
    return str(getuid()) if getuid else os.environ.get("USERNAME", "user")


def pytest_configure(config: pytest.Config) -> None:
    _bytecode_for_subprocesses()
    _RUN[:] = [config]
    config.addinivalue_line(
        "markers",
        "full: runs only in the whole matrix (--full), e.g. a corpus starting processes per example",
    )
    config.addinivalue_line(
        "markers",
        "corpus: a hypothesis corpus (corpus_phases): its example in the default run, its "
        "generated examples under --full and --only-full",
    )
    config.addinivalue_line(
        "markers",
        "smoke: keeps its PostgreSQL / mitmproxy-engine parameters in the default run (the one "
        "end-to-end example of its kind); smoke(dialect='postgresql'): only on that dialect, "
        "its other dialect twin under --full",
    )
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
    config = terminalreporter.config
    if not full_run(config):
        counts = ", ".join(f"{why}: {n}" for why, n in sorted(_LEFT_OUT.items()))
        terminalreporter.write_line(
            "default run: the dialect and forward-engine matrix and the hypothesis corpora "
            f"are left to `uv run pytest --full`{f' ({counts})' if counts else ''}"
        )
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
    "sqlite")]`` (one dialect enabled, or the default run without ``--full``: it in both
    roles; the other values marked ``full``). The test asks ``db_factory`` for the
    two databases; a PostgreSQL param fails or skips as :func:`pg_server` says."""
    full = running_full()
    dialects = DIALECTS if full else DIALECTS[:1]  # the default run: SQLite alone …
    out = []
    for i, value in enumerate(values):
        first, second = dialects[i % len(dialects)], dialects[(i + 1) % len(dialects)]
        marks = [pytest.mark.full] if i and not full else []  # … and the first value alone
        out.append(
            pytest.param(value, first, second, id=f"{value}-{first}-to-{second}", marks=marks)
        )
    return out


# --------------------------------------------------------------------------- test servers
@pytest.fixture(scope="session", autouse=True)
def _test_servers_fork_from_a_zygote() -> Iterator[None]:
    """This worker's Python test servers fork from one process that imported ``mcp`` once
    (``tests/helpers/forkserver.py``): ``server_argv`` runs them through the launcher it names
    in ``MCPTAPE_TEST_SERVER_PYTHON``. Not waited for: until the zygote listens, the launcher
    runs the real interpreter. ``MCPTAPE_TEST_SERVER_PYTHON`` set already (to an interpreter)
    wins: no zygote."""
    import subprocess

    from mcp_proxy.testing.process import SERVER_PYTHON_ENV
    from tests.helpers.forkserver import write_launcher

    if os.environ.get(SERVER_PYTHON_ENV):
        yield
        return
    folder = Path(tempfile.mkdtemp(prefix="mcptape-forks-"))
    sock = folder / "zygote.sock"
    zygote = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.forkserver", str(sock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    before = os.environ.get(SERVER_PYTHON_ENV)
    os.environ[SERVER_PYTHON_ENV] = str(write_launcher(folder / "python", sock))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SERVER_PYTHON_ENV, None)
        else:
            os.environ[SERVER_PYTHON_ENV] = before
        assert zygote.stdin is not None
        zygote.stdin.close()
        try:
            zygote.wait(10)
        except subprocess.TimeoutExpired:
            zygote.kill()
            zygote.wait()
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()
