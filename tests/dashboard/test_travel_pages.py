"""Export downloads, the diff page and the replay action, on sessions recorded through the relay.

These tests record into a database of their own (a replay adds sessions, which would change
what the other dashboard tests count), once per dialect: a SQLite file and a PostgreSQL database.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from mcp_proxy.testing.client import make_client
from tests.conftest import DIALECTS, fresh_db
from tests.dashboard.conftest import (
    AUTH,
    TOKEN,
    get_html,
    get_json,
    recorded_params,
    run_async,
    session_ids,
)
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(90)

#: The example recordings shipped with the project.
RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"

#: What the "different" session's echo says: changed content that must be shown escaped.
EVIL = "<script>window.__pwned=1</script>hi"


async def _record(db: Path | str, name: str, text: str) -> None:
    async with make_client(recorded_params(db, name, "basic"), mode="legacy") as client:
        await client.call_tool("echo", {"text": text})
        await client.list_tools()


@dataclass
class Small:
    db: Path | str
    url: str
    ids: dict[str, str]


@pytest.fixture(scope="module", params=DIALECTS)
def small(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Small]:
    """Three sessions, recorded once per dialect."""
    with fresh_db(request.param, request, tmp_path_factory.mktemp("travel"), "travel.db") as db:

        async def go() -> None:
            await _record(db, "one", "hello")
            await _record(db, "two", "hello")
            await _record(db, "other", EVIL)

        run_async(go)
        ids = session_ids(db)
        assert set(ids) == {"one", "two", "other"}, ids
        yield Small(db, rdb.url_of(db), ids)


@pytest.fixture
async def tc(small: Small) -> AsyncIterator[TestClient]:
    app = create_app(small.url, token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


# ---------------------------------------------------------------------------------- export


async def test_export_jsonl_download(tc: TestClient, small: Small) -> None:
    sid = small.ids["one"]
    r = await tc.get(f"/sessions/{sid}/export.jsonl", headers=AUTH)
    body = await r.read()
    assert r.status == 200, body[:500]
    assert r.headers["Content-Disposition"].startswith("attachment;")
    assert 'filename="mcptape-one-' in r.headers["Content-Disposition"]
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines[0]["format"] and lines[0]["version"]
    assert lines[1]["type"] == "session" and lines[1]["id"] == sid
    assert lines[-1]["type"] == "end" and lines[-1]["sessions"] == 1
    assert any(rec.get("type") == "frame" for rec in lines)


async def test_export_needs_the_token(tc: TestClient, small: Small) -> None:
    r = await tc.get(f"/sessions/{small.ids['one']}/export.jsonl")
    assert r.status == 401
    r = await tc.get(f"/sessions/{'f' * 32}/export.jsonl", headers=AUTH)
    assert r.status == 404


async def test_har_of_a_stdio_session_is_refused_clearly(tc: TestClient, small: Small) -> None:
    sid = small.ids["one"]
    r = await tc.get(f"/sessions/{sid}/export.har", headers=AUTH)
    text = await r.text()
    assert r.status == 409
    assert "stdio" in text and "Content-Disposition" not in r.headers
    html = await get_html(tc, f"/sessions/{sid}")
    assert f'href="/sessions/{sid}/export.jsonl"' in html
    assert re.search(r'<button[^>]*id="export-har"[^>]*disabled', html)


async def test_har_download_of_an_http_session(bench_db: tuple[Path, str, int]) -> None:
    """HTTP sessions of the generated database (the one the HTTP page tests use)."""
    db = bench_db[0]
    ((sid,),) = [
        r.values()
        for r in rdb.rows(
            db,
            "SELECT s.id FROM sessions s WHERE s.transport = 'http' AND s.id != ?"
            " AND EXISTS (SELECT 1 FROM http_exchanges h WHERE h.session_id = s.id)"
            " ORDER BY s.frame_count LIMIT 1",
            bench_db[1],
        )
    ]
    app = create_app("sqlite:///" + str(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        r = await c.get(f"/sessions/{sid}/export.har", headers=AUTH)
        body = await r.read()
        assert r.status == 200, body[:500]
        assert r.headers["Content-Disposition"].startswith("attachment;")
        assert r.headers["Content-Disposition"].endswith('.har"')
        har = json.loads(body)
        assert har["log"]["version"] and har["log"]["entries"]
        html = await (await c.get(f"/sessions/{sid}", headers=AUTH)).text()
        assert f'href="/sessions/{sid}/export.har"' in html
        # HTTP sessions replay from the dashboard too (against the recorded upstream or a URL)
        assert f'href="/sessions/{sid}/replay"' in html


# ---------------------------------------------------------------------------------- diff


async def test_diff_of_identical_content_is_equal(tc: TestClient, small: Small) -> None:
    a, b = small.ids["one"], small.ids["two"]
    data = await get_json(tc, f"/diff.json?a={a}&b={b}")
    assert data["equal"] is True, data
    assert data["counts"]["changed"] == 0 and data["counts"]["same"] >= 3
    assert data["sessions"]["a"]["id"] == a and data["sessions"]["b"]["id"] == b
    html = await get_html(tc, f"/diff?a={a[:10]}&b=two")
    assert "no differences" in html


async def test_diff_shows_a_changed_row_escaped(tc: TestClient, small: Small) -> None:
    a, b = small.ids["one"], small.ids["other"]
    data = await get_json(tc, f"/diff.json?a={a}&b={b}")
    assert data["equal"] is False
    changed = [row for row in data["exchanges"] if row["status"] == "changed"]
    assert changed and changed[0]["method"] == "tools/call"
    assert any(EVIL in json.dumps(c, ensure_ascii=False) for c in changed[0]["changes"])
    html = await get_html(tc, f"/diff?a={a}&b={b}")
    assert "<script>window.__pwned" not in html
    assert "&lt;script&gt;window.__pwned" in html
    assert 'class="diff-changed"' in html
    assert f'href="/sessions/{a}/exchanges/' in html


async def test_diff_needs_two_known_sessions(tc: TestClient, small: Small) -> None:
    await get_json(tc, f"/diff.json?a={small.ids['one']}", status=400)
    await get_json(tc, f"/diff.json?a={small.ids['one']}&b=nosuchsession", status=404)
    r = await tc.get(f"/diff?a={small.ids['one']}&b={small.ids['two']}")
    assert r.status == 401


async def test_session_page_offers_compare_and_replay(tc: TestClient, small: Small) -> None:
    sid = small.ids["one"]
    html = await get_html(tc, f"/sessions/{sid}")
    assert 'action="/diff"' in html and f'name="a" value="{sid}"' in html
    assert f'<option value="{small.ids["two"]}">' in html
    assert f'href="/sessions/{sid}/replay"' in html


# ---------------------------------------------------------------------------------- replay


async def test_replay_confirm_page_shows_the_command(tc: TestClient, small: Small) -> None:
    sid = small.ids["one"]
    (command,) = [
        json.loads(r["command"])
        for r in rdb.rows(small.db, "SELECT command FROM sessions WHERE id = ?", sid)
    ]
    html = await get_html(tc, f"/sessions/{sid}/replay")
    shown = re.search(r'<pre class="cmd" id="replay-command">(.*?)</pre>', html, re.S)
    assert shown and command[-1] in shown.group(1)
    assert 'name="confirm" value="yes"' in html
    assert f'value="{TOKEN}"' in html  # the token field the POST needs


async def test_replay_page_says_when_the_command_comes_from_an_imported_file(
    tmp_path: Path, small: Small
) -> None:
    """An imported session's command is whatever the file says: the page says so plainly
    (and a session recorded here says nothing of the kind)."""
    from mcp_proxy.recording.database import import_file

    src = RECORDINGS / "basic-legacy.mcptape.jsonl"
    url = f"sqlite:///{tmp_path / 'imported.db'}"
    _, result = import_file(src, url)
    ((_, sid),) = result.sessions
    app = create_app(url, token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        html = await get_html(c, f"/sessions/{sid}/replay")
        data = await get_json(c, f"/sessions/{sid}/replay.json")
    assert '<pre class="cmd" id="replay-command">' in html
    shown = re.search(r'<p class="note" id="replay-imported">(.*?)</p>', html, re.S)
    assert shown, html
    text = re.sub(r"<[^>]+>", "", shown.group(1))
    assert f"This command comes from the imported file {src}" in text
    assert "not from a recording made on this machine: check it before you run it." in text
    assert data["imported_from"] == str(src)
    async with TestClient(TestServer(create_app(small.url, token=TOKEN), host="127.0.0.1")) as c:
        local = await get_html(c, f"/sessions/{small.ids['one']}/replay")
    assert "replay-imported" not in local and "imported file" not in local


async def test_replay_refused_without_token_or_confirmation(tc: TestClient, small: Small) -> None:
    sid = small.ids["one"]
    before = _count(small)
    # The cookie/bearer alone is not enough: the token must be in the request itself…
    cookie = {"Cookie": f"mcptape_dashboard_{tc.port}={TOKEN}"}
    r = await tc.post(f"/sessions/{sid}/replay", data={"confirm": "yes"}, headers=cookie)
    assert r.status == 403
    r = await tc.post(f"/sessions/{sid}/replay", data={"confirm": "yes"})
    assert r.status == 401
    # …and the confirmation is needed too (what a browser sends: the cookie and the field).
    r = await tc.post(f"/sessions/{sid}/replay", data={"_token": TOKEN}, headers=cookie)
    assert r.status == 400 and "confirm" in await r.text()
    r = await tc.post(
        f"/sessions/{sid}/replay", data={"_token": TOKEN, "confirm": "no"}, headers=cookie
    )
    assert r.status == 400
    assert _count(small) == before


async def test_replay_off_when_bound_beyond_loopback(small: Small) -> None:
    before = _count(small)
    app = create_app(small.url, token=TOKEN, bind_host="0.0.0.0")
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        sid = small.ids["one"]
        r = await c.post(
            f"/sessions/{sid}/replay", data={"_token": TOKEN, "confirm": "yes"}, headers=AUTH
        )
        assert r.status == 403 and "loopback" in await r.text()
        r = await c.get(f"/sessions/{sid}/replay", headers=AUTH)
        assert r.status == 403
        r = await c.get(f"/sessions/{sid}", headers=AUTH)
        html = await r.text()
        assert "/replay" not in html
    assert _count(small) == before


async def test_one_replay_at_a_time(small: Small) -> None:
    from dashboard.app import SETTINGS

    app = create_app(small.url, token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        app[SETTINGS]["replay_busy"] = True
        before = _count(small)
        r = await c.post(
            f"/sessions/{small.ids['one']}/replay.json",
            json={"confirm": "yes"},
            headers={**AUTH, "X-Mcptape-Token": TOKEN},
        )
        assert r.status == 409 and "already running" in (await r.json())["error"]["message"]
        assert _count(small) == before


async def test_replay_runs_and_lands_on_an_equal_diff(tc: TestClient, small: Small) -> None:
    sid = small.ids["two"]
    before = _count(small)
    r = await tc.post(
        f"/sessions/{sid}/replay",
        data={"_token": TOKEN, "confirm": "yes"},
        headers={"Cookie": f"mcptape_dashboard_{tc.port}={TOKEN}"},
        allow_redirects=False,
    )
    text = await r.text()
    assert r.status == 303, text[:2000]
    location = r.headers["Location"]
    assert location.startswith(f"/diff?a={sid}&b=")
    assert _count(small) == before + 1
    html = await get_html(tc, location)
    assert "no differences" in html, html[:3000]
    new = location.rsplit("=", 1)[1]
    data = await get_json(tc, f"/diff.json?a={sid}&b={new}")
    assert data["equal"] is True and data["replay_notes"] == []


def _count(small: Small) -> int:
    return int(rdb.rows(small.db, "SELECT count(*) AS n FROM sessions")[0]["n"])


# ---------------------------------------------------------------------------------- browser


@pytest.mark.parametrize("small", DIALECTS[:1], indirect=True, scope="module")
def test_in_a_browser_download_compare_and_replay(small: Small) -> None:
    """Chromium through a real ``mcptape dashboard``: the buttons and forms, end to end — on
    the first dialect only: the replay and the diff behind these forms run on every dialect in
    ``test_replay_runs_and_lands_on_an_equal_diff``, the browser adds the clicks."""
    from playwright.sync_api import expect, sync_playwright

    from tests.dashboard.browser import dashboard_process, launch

    one = small.ids["one"]
    with dashboard_process(small.db) as url, sync_playwright() as pw:
        browser = launch(pw)
        try:
            context = browser.new_context(accept_downloads=True)
            page = context.new_page()
            page.set_default_timeout(30_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url)  # token → cookie
            root = url.split("/?", 1)[0]
            page.goto(f"{root}/sessions/{one}")
            with page.expect_download() as dl:
                page.locator("#export-jsonl").click()
            assert dl.value.suggested_filename.endswith(".jsonl")
            expect(page.locator("#export-har")).to_be_disabled()

            page.locator("form.compare input[name=b]").fill("two")
            page.locator("form.compare button").click()
            expect(page.locator("#diff-summary")).to_contain_text("no differences")

            page.goto(f"{root}/sessions/{one}")
            page.locator("#replay-link").click()
            expect(page.locator("#replay-command")).to_contain_text("mcp_proxy")
            page.locator("#replay-form input[name=confirm]").check()
            page.locator("#replay-form button").click()
            expect(page).to_have_url(re.compile(rf"/diff\?a={one}&b=[0-9a-f]{{32}}$"))
            expect(page.locator("#diff-summary")).to_contain_text("no differences")
            assert errors == [], errors
            context.close()
        finally:
            browser.close()
