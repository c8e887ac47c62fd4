"""The dashboard replays HTTP sessions (issue 16), exercised in Chromium.

A session is recorded through the real HTTP relay (an SDK client via ``mcptape record
--upstream``); in a real ``mcptape dashboard`` the replay page offers the recorded upstream URL,
the user confirms, and the page lands on the diff: equal against the same server, and — with a
URL typed on the confirmation page — the changed server's echo named in the diff.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.testing.client import make_client, tool_text
from mcp_proxy.testing.process import READY_PREFIX, start_http_server
from tests.conftest import mcptape_cmd
from tests.travel.conftest import PY

# Under --full: the default run replays from the dashboard in Chromium over stdio
# (tests/dashboard/test_travel_pages.py) and replays HTTP sessions from the CLI
# (tests/replay/test_http_transports.py).
pytestmark = [pytest.mark.timeout(240), pytest.mark.full]


def _word_after(prefix: str):  # type: ignore[no-untyped-def]
    return lambda line: line[len(prefix) :].split()[0] if line.startswith(prefix) else None


async def _record(url: str, db: Path) -> None:
    relay = [*mcptape_cmd(), "record", "--upstream", url, "--port", "0", "--db", str(db)]
    child = AnnouncedChild([*relay, "--name", "web"], _word_after("mcptape: relaying "), "relay")
    local = child.start(60.0)
    try:
        async with make_client(local, mode="legacy") as client:
            assert tool_text(await client.call_tool("echo", {"text": "hello, wire"}))
            await client.list_prompts()
    finally:
        child.stop()


def test_dashboard_replays_an_http_session_in_chromium(tmp_path: Path) -> None:
    import asyncio
    import sqlite3

    from playwright.sync_api import expect, sync_playwright

    from tests.dashboard.browser import dashboard_process, launch

    db = tmp_path / "web.db"
    changed_argv = [PY, "-m", "mcp_proxy.testing.presets_changed", "--preset", "basic_changed"]
    changed_argv += ["--transport", "http", "--port", "0"]
    changed = AnnouncedChild(changed_argv, _word_after(READY_PREFIX + " "), "changed server")
    with start_http_server("basic", name="mcptape-test") as (url, _proc):
        asyncio.run(_record(url, db))
        conn = sqlite3.connect(db)
        ((sid, upstream),) = conn.execute("SELECT id, upstream FROM sessions").fetchall()
        conn.close()
        changed_url = changed.start(60.0)
        try:
            with dashboard_process(db) as dash, sync_playwright() as pw:
                browser = launch(pw)
                try:
                    page = browser.new_page()
                    page.set_default_timeout(60_000)
                    errors: list[str] = []
                    page.on("pageerror", lambda exc: errors.append(str(exc)))
                    page.goto(dash)  # token → cookie
                    root = dash.split("/?", 1)[0]
                    page.goto(f"{root}/sessions/{sid}/replay")
                    field = page.locator("#replay-upstream")
                    expect(field).to_have_value(upstream)
                    page.locator("#replay-form input[name=confirm]").check()
                    page.locator("#replay-form button").click()
                    expect(page).to_have_url(re.compile(rf"/diff\?a={sid}&b=[0-9a-f]+$"))
                    expect(page.locator("#diff-summary")).to_contain_text("no differences")

                    page.goto(f"{root}/sessions/{sid}/replay")
                    field.fill(changed_url)
                    page.locator("#replay-form input[name=confirm]").check()
                    page.locator("#replay-form button").click()
                    expect(page).to_have_url(re.compile(r"/diff\?a="))
                    expect(page.locator("#diff")).to_contain_text("HELLO, WIRE")
                    assert errors == [], errors
                finally:
                    browser.close()
        finally:
            changed.stop()
