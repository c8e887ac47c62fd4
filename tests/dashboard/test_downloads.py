"""The session page offers one download per writable format of the registry, and each works.

The links come from ``mcp_proxy.recording.registry`` (``mcptape formats``), not from a list the
dashboard keeps: a format added to the registry appears here without a dashboard change.

Runs once per dialect: each module database holds a stdio session recorded through the real
``mcptape record`` and an HTTP session (with its HTTP exchanges) copied in from the generated
benchmark database by the real ``mcptape db copy``.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from mcp_proxy.recording.registry import downloads
from mcp_proxy.testing.client import make_client
from tests.dashboard.conftest import AUTH, TOKEN, get_html, recorded_params
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(90)


def _check_body(name: str, body: bytes) -> None:
    """The download is the format it says it is (parsed, not just non-empty)."""
    if name == "jsonl":
        lines = [json.loads(line) for line in body.splitlines()]
        assert lines[-1]["type"] == "end" and any(r.get("type") == "frame" for r in lines)
    elif name == "har":
        assert json.loads(body)["log"]["entries"]
    elif name == "otlp":
        spans = [
            span
            for line in body.splitlines()
            for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        ]
        assert spans
    elif name == "junit":
        assert list(ElementTree.fromstring(body).iter("testcase"))
    else:  # a new format: at least not empty
        assert body


@pytest.fixture(scope="module")
def sessions_db(
    module_any_db: Path | str, bench_db: tuple[Path, str, int]
) -> tuple[Path | str, str, str]:
    """(database, HTTP session id, stdio session id) in a database of each dialect."""
    (http,) = rdb.rows(
        bench_db[0],
        "SELECT s.id FROM sessions s WHERE s.transport = 'http' AND s.id != ?"
        " AND EXISTS (SELECT 1 FROM http_exchanges h WHERE h.session_id = s.id)"
        " ORDER BY s.frame_count LIMIT 1",
        bench_db[1],
    )
    argv = ["db", "copy", str(bench_db[0]), str(module_any_db), "-q", "--session", http["id"]]
    done = run_mcptape(*argv)  # in-process through the real entry point
    assert done.returncode == 0, done.stderr

    async def go() -> None:
        params = recorded_params(module_any_db, "dl", "basic")
        async with make_client(params, mode="legacy") as client:
            await client.call_tool("echo", {"text": "hello"})

    asyncio.run(go())
    (stdio,) = rdb.rows(module_any_db, "SELECT id FROM sessions WHERE name = ?", "dl")
    return module_any_db, http["id"], stdio["id"]


async def test_every_registry_format_is_a_working_download(
    sessions_db: tuple[Path | str, str, str],
) -> None:
    formats = downloads()
    assert {"jsonl", "har", "otlp", "junit"} <= {f.name for f in formats}
    db, http, sid = sessions_db
    app = create_app(rdb.url_of(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        html = await get_html(c, f"/sessions/{http}")
        for fmt in formats:
            href = f"/sessions/{http}/export.{fmt.name}"
            assert f'id="export-{fmt.name}" href="{href}"' in html, fmt.name
            r = await c.get(href, headers=AUTH)
            body = await r.read()
            assert r.status == 200, (fmt.name, body[:300])
            assert r.headers["Content-Type"].startswith(fmt.media_type)
            disposition = r.headers["Content-Disposition"]
            assert disposition.startswith("attachment;")
            assert disposition.endswith(f'{fmt.suffixes[0]}"'), disposition
            _check_body(fmt.name, body)
        r = await c.get(f"/sessions/{http}/export.nosuchformat", headers=AUTH)
        assert r.status == 404 and "nosuchformat" in await r.text()

    app = create_app(rdb.url_of(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        html = await get_html(c, f"/sessions/{sid}")
        for fmt in formats:
            r = await c.get(f"/sessions/{sid}/export.{fmt.name}", headers=AUTH)
            body = await r.read()
            if fmt.holds("stdio"):
                assert r.status == 200, (fmt.name, body[:300])
                _check_body(fmt.name, body)
                assert f'href="/sessions/{sid}/export.{fmt.name}"' in html
            else:  # HAR: refused with the reason, and a disabled button on the page
                assert r.status == 409 and b"stdio" in body
                assert "Content-Disposition" not in r.headers
                assert re.search(rf'<button[^>]*id="export-{fmt.name}"[^>]*disabled', html)
