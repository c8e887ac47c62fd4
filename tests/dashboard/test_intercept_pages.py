"""The "Intercepted" page: held messages listed (and its ``.json`` twin), decided by a form with
the security of every form (token in the request, Origin), refused on a dashboard bound beyond
loopback without ``--allow-remote``; the session's badge. One Chromium test decides a real held
``tools/call`` (a real SDK client through the real ``mcptape record --intercept``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from playwright.sync_api import Browser, expect

from dashboard.app import create_app
from mcp_proxy.store.intercepts import InterceptTable
from mcp_proxy.testing.client import make_client, stdio_params, tool_text
from tests.conftest import mcptape_cmd
from tests.dashboard.browser import dashboard_process
from tests.dashboard.conftest import AUTH, TOKEN

pytestmark = pytest.mark.timeout(90)

CALL = b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"<b>hi</b>"}}}\n'
SID = "ab" * 16


@pytest.fixture
def table(tmp_path: Path) -> InterceptTable:
    t = InterceptTable(f"sqlite:///{tmp_path / 'held.db'}")
    yield t
    t.close()


async def client_for(table: InterceptTable, **kw: object) -> TestClient:
    app = create_app(table.url, token=TOKEN, **kw)  # type: ignore[arg-type]
    return TestClient(TestServer(app, host="127.0.0.1"))


@pytest.fixture
async def client(table: InterceptTable) -> AsyncIterator[TestClient]:
    async with await client_for(table) as c:
        yield c


def origin(c: TestClient) -> dict[str, str]:
    """Our own Origin, and the cookie a browser would add (never enough by itself)."""
    return {"Origin": f"http://127.0.0.1:{c.port}", "Cookie": f"mcptape_dashboard_{c.port}={TOKEN}"}


async def test_the_page_lists_what_is_held(client: TestClient, table: InterceptTable) -> None:
    r = await client.get("/intercepts.json", headers=AUTH)
    assert (await r.json()) == {"held": [], "count": 0, "can_resolve": True}
    iid = table.hold(SID, "c2s", "request", "tools/call", "4", "method=tools/call", CALL)
    doc = await (await client.get("/intercepts.json", headers=AUTH)).json()
    assert [h["id"] for h in doc["held"]] == [iid]
    assert doc["held"][0]["message"] == CALL.decode().rstrip("\n")
    page = await (await client.get("/intercepts", headers=AUTH)).text()
    assert f'id="held-{iid}"' in page
    assert "&lt;b&gt;hi&lt;/b&gt;" in page and "<b>hi</b>" not in page  # escaped
    assert 'value="answer"' in page  # a request can be answered


async def test_a_form_decides_once_with_the_token_and_our_origin(
    client: TestClient, table: InterceptTable
) -> None:
    iid = table.hold(SID, "c2s", "request", "tools/call", "4", "", CALL)
    url = f"/intercepts/{iid}"
    edited = json.loads(CALL)
    edited["params"]["arguments"]["text"] = "edited"
    form = {"decision": "edit", "message": json.dumps(edited, indent=2)}
    refused = [
        ({**form}, origin(client), 403),  # the cookie/bearer alone is not enough: no _token
        ({**form, "_token": TOKEN}, {"Origin": "http://evil.example"}, 403),
        ({**form, "_token": "nope"}, origin(client), 403),
    ]
    cookie_only = {"Cookie": f"mcptape_dashboard_{client.port}={TOKEN}"}
    for data, headers, status in refused:
        r = await client.post(
            url, data=data, headers={**cookie_only, **headers}, allow_redirects=False
        )
        assert r.status == status, (data, headers, await r.text())
    assert table.get(iid).state == "held"  # type: ignore[union-attr]
    bad = await client.post(
        url, data={"decision": "edit", "message": "{", "_token": TOKEN}, headers=origin(client)
    )
    assert bad.status == 400 and "is not JSON" in await bad.text()
    ok = await client.post(
        url, data={**form, "_token": TOKEN}, headers=origin(client), allow_redirects=False
    )
    assert (ok.status, ok.headers["Location"]) == (303, "/intercepts")
    row = table.get(iid)
    assert row is not None and row.decision == "edit" and row.resolved_by.startswith("dashboard")
    assert json.loads(row.payload or b"")["params"]["arguments"]["text"] == "edited"
    again = await client.post(
        url + ".json", data={"decision": "drop", "_token": TOKEN}, headers=origin(client)
    )
    assert again.status == 400 and "already resolved: edit by dashboard" in await again.text()


async def test_bound_beyond_loopback_it_cannot_decide_without_allow_remote(
    table: InterceptTable,
) -> None:
    iid = table.hold(SID, "c2s", "request", "tools/call", "4", "", CALL)
    async with await client_for(table, bind_host="0.0.0.0") as c:
        doc = await (await c.get("/intercepts.json", headers=AUTH)).json()
        assert doc["can_resolve"] is False
        r = await c.post(
            f"/intercepts/{iid}", data={"decision": "drop", "_token": TOKEN}, headers=origin(c)
        )
        assert r.status == 403 and "--allow-remote" in await r.text()
    assert table.get(iid).state == "held"  # type: ignore[union-attr]
    async with await client_for(table, bind_host="0.0.0.0", allow_remote=True) as c:
        r = await c.post(
            f"/intercepts/{iid}.json", data={"decision": "drop", "_token": TOKEN}, headers=origin(c)
        )
        assert r.status == 200
    assert table.get(iid).decision == "drop"  # type: ignore[union-attr]


def test_a_held_call_decided_in_chromium(browser: Browser, tmp_path: Path) -> None:
    """The page follows a new hold by itself; the edit made in the browser is what the client
    gets back, and the session's page showed the badge while it was held."""
    db = tmp_path / "held.db"
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", "held", "--intercept"]
    argv += ["method=tools/call", "--"]
    base = stdio_params("basic")
    params = base.model_copy(
        update={"command": argv[0], "args": [*argv[1:], base.command, *base.args]}
    )
    InterceptTable(f"sqlite:///{db}").close()  # the database exists before the dashboard
    results: list[str] = []
    failure: list[BaseException] = []
    go = threading.Event()

    async def host() -> None:
        async with make_client(params, mode="legacy") as client:
            await asyncio.to_thread(go.wait, 30)
            results.append(tool_text(await client.call_tool("echo", {"text": "from the host"})))

    def run() -> None:
        try:
            asyncio.run(host())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        with dashboard_process(db) as url:
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(20_000)
            page.goto(url)
            page.goto(url.split("/?", 1)[0] + "/intercepts")
            expect(page.locator("#intercepts .empty")).to_be_visible()
            go.set()
            section = page.locator("section.held")
            expect(section).to_have_count(1)  # the page reloaded by itself
            box = section.locator("textarea")
            message = json.loads(box.input_value())
            session_page = context.new_page()
            href = section.locator("a").first.get_attribute("href") or ""
            session_page.goto(url.split("/?", 1)[0] + href)
            expect(session_page.locator("#held-badge")).to_have_text("1 held")
            session_page.close()
            message["params"]["arguments"]["text"] = "from the browser"
            box.fill(json.dumps(message, indent=2))
            section.get_by_role("button", name="Forward edited").click()
            expect(page.locator("#intercepts .empty")).to_be_visible()
            thread.join(30)
            assert results == ["from the browser"], failure
            context.close()
    finally:
        go.set()
        thread.join(30)
    assert not failure, failure
