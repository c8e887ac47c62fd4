"""Recordings for the dashboard tests: real SDK sessions through the real ``mcptape record``.

Recorded once per test run and dialect (a few seconds each) into one SQLite file and one
PostgreSQL database that every dashboard test reads — the tests that use them run once per
dialect (ids ``sqlite`` / ``postgresql``); tests that write annotations use tags of their own so
they do not disturb each other. Rows are read with ``tests.helpers.db``, which reads either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from mcp import StdioServerParameters

from dashboard.app import create_app
from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
)
from mcp_proxy.testing.process import server_argv
from tests.conftest import DIALECTS, fresh_db, mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.shared import bench_file, built_once, copy_sqlite, load_bench

TOKEN = "test-token-0123456789"
#: What a hostile server puts in its name, its tool output, its stdout and its stderr.
HOSTILE_TEXT = (
    "<script>window.__pwned=1;alert(1)</script>"
    '<img src=x onerror="window.__pwned=2">'
    "[click me](javascript:window.__pwned=3) javascript:alert(4) "
    "invoice\u202egnp.exe \u2066isolated\u2069 \x1b[31mred"
)
HOSTILE_NAME = "evil<script>window.__pwned=5</script>\u202eevil"


def recorded_params(db: Path | str, name: str, presets: str, server_name: str | None = None):
    """Launch the test server through ``mcptape record``, exactly as a host would."""
    cmd = mcptape_cmd()
    argv = server_argv(presets, "stdio", name=server_name)
    return StdioServerParameters(
        command=cmd[0],
        args=[*cmd[1:], "record", "--db", str(db), "--name", name, "--", *argv],
        encoding_error_handler="replace",
    )


async def record_demo(db: Path | str, name: str, mode: str) -> None:
    """The scripted session plus a JSON-RPC error, a stray stdout line and stderr lines."""
    rec = CallbackRecorder()
    params = recorded_params(db, name, ",".join([*SCRIPTED_PRESETS, "noise"]))
    async with make_client(params, mode=mode, recorder=rec) as client:
        await run_scripted_session(client, rec)
        try:
            await client.call_tool("protocol_error", {"code": -32602, "message": "bad arg"})
        except Exception:  # the SDK raises on a JSON-RPC error: that is the point
            pass
        await client.call_tool("noise", {"text": "a stray print()", "count": 1})
        await client.call_tool("stderr_noise", {"text": "warning: disk almost full", "count": 2})


async def record_hostile(db: Path | str) -> None:
    params = recorded_params(db, "hostile", "basic,noise", server_name=HOSTILE_NAME)
    async with make_client(params, mode="legacy") as client:
        await client.call_tool("echo", {"text": HOSTILE_TEXT})
        await client.call_tool("noise", {"text": HOSTILE_TEXT, "count": 1})
        await client.call_tool("stderr_noise", {"text": HOSTILE_TEXT, "count": 1})


@dataclass
class Recordings:
    db: Path | str  # what ``--db`` takes: a SQLite file or a PostgreSQL URL
    url: str
    ids: dict[str, str]  # session name → id

    def rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        """``sql`` (``?`` placeholders) on the recordings, whichever the dialect."""
        return rdb.rows(self.db, sql, *args)

    def frame_seq(self, name: str, **where: Any) -> int:
        """The first frame of session ``name`` matching the column values given."""
        cond = " AND ".join(f"{k} = ?" for k in where)
        rows = self.rows(
            f"SELECT seq FROM frames WHERE session_id = ? AND {cond} ORDER BY seq LIMIT 1",
            self.ids[name],
            *where.values(),
        )
        assert rows, (name, where)
        return int(rows[0]["seq"])


def run_async(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``asyncio.run`` in a thread of its own: a fixture of one dialect may be set up while a
    module's Playwright (sync API, an event loop running in this thread) is open for another."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, make()).result()


def session_ids(db: Path | str) -> dict[str, str]:
    """Session name → id, from the database itself."""
    return {r["name"]: r["id"] for r in rdb.rows(db, "SELECT id, name FROM sessions")}


def record_all(db: Path | str) -> None:
    """The three sessions every dashboard test reads, recorded into ``db``."""

    async def go() -> None:
        await record_demo(db, "demo-legacy", "legacy")
        await record_demo(db, "demo-modern", "auto")
        await record_hostile(db)

    run_async(go)


@pytest.fixture(scope="session", params=DIALECTS)
def recordings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Recordings]:
    """The three sessions, recorded once per dialect for the whole run: on SQLite into one
    file that each xdist worker copies (``tests/helpers/shared.py``), on PostgreSQL per worker."""
    folder = tmp_path_factory.mktemp("dashboard")
    if request.param == "sqlite":
        built = built_once(tmp_path_factory, "dashboard-recordings.db", record_all)
        db: Path | str = copy_sqlite(built, folder / "rec.db")
        yield _recordings(db)
        return
    with fresh_db(request.param, request, folder) as db:
        record_all(db)
        yield _recordings(db)


def _recordings(db: Path | str) -> Recordings:
    ids = session_ids(db)
    assert set(ids) == {"demo-legacy", "demo-modern", "hostile"}, ids
    return Recordings(db=db, url=rdb.url_of(db), ids=ids)


#: For a test whose subject is not the store (a process's command line, a browser's clicks) and
#: whose store path another test already covers on every dialect: run it on the first dialect
#: only (SQLite), sharing that dialect's session recordings.
FIRST_DIALECT_ONLY = pytest.mark.parametrize(
    "recordings", DIALECTS[:1], indirect=True, scope="session"
)


@pytest.fixture
async def client(recordings: Recordings) -> AsyncIterator[TestClient]:
    """An aiohttp test client on 127.0.0.1 that sends the token as a Bearer header."""
    app = create_app(recordings.url, token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def get_json(client: TestClient, path: str, status: int = 200) -> Any:
    r = await client.get(path, headers=AUTH)
    body = await r.text()
    assert r.status == status, body[:2000]
    assert r.content_type == "application/json"
    return json.loads(body)


async def get_html(client: TestClient, path: str, status: int = 200) -> str:
    r = await client.get(path, headers=AUTH)
    body = await r.text()
    assert r.status == status, body[:2000]
    assert r.content_type == "text/html"
    return body


@pytest.fixture(scope="session")
def bench_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    """A generated database shaped like the benchmark's: (path, big session id, a request seq).

    The big session is larger than what the dashboard analyses whole, so the paged, windowed
    path is what runs on it.
    """
    bench = load_bench()
    db = copy_sqlite(bench_file(tmp_path_factory), tmp_path_factory.mktemp("bench") / "bench.db")
    big = next(
        r["id"] for r in rdb.rows(db, "SELECT id FROM sessions ORDER BY frame_count DESC LIMIT 1")
    )
    return db, big, bench.exchange_seq(db, big)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium (Playwright) per module of browser tests, closed after it."""
    from playwright.sync_api import sync_playwright

    from tests.dashboard.browser import launch

    with sync_playwright() as pw:
        b = launch(pw)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def dashboard_url(recordings: Recordings) -> Iterator[str]:
    """A real ``mcptape dashboard`` process over the module's recordings: its address."""
    from tests.dashboard.browser import dashboard_process

    with dashboard_process(recordings.db) as url:
        yield url
