"""The dashboard in a real browser: Debian's Chromium via Playwright, real recordings.

Clicks through list → session → exchange → frame, annotates and filters, follows a session
that is being recorded right now, and proves that hostile server output stays inert.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from mcp_proxy.testing.client import make_client
from tests.dashboard.browser import dashboard_process
from tests.dashboard.conftest import Recordings, recorded_params

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert errors == [], errors


def base(url: str) -> str:
    return url.split("/?", 1)[0]


def test_click_through_list_session_exchange_frame(page: Page, dashboard_url: str):
    page.goto(dashboard_url)  # the printed URL: token → cookie, then the sessions list
    expect(page).to_have_url(re.compile(r"/sessions$"))
    assert "token=" not in page.url
    expect(page.locator("table.sessions tbody tr")).to_have_count(3)

    page.get_by_role("link", name="demo-legacy").click()
    expect(page.locator("h1")).to_contain_text("demo-legacy")
    expect(page.locator("#timeline tr.ch-stderr")).to_have_count(2)

    # The exchange opens beside the timeline (issue #28); its full page is one link away.
    page.locator("a.exchange-link", has_text="tools/call").first.click()
    page.locator("#detail a.full-page").click()
    expect(page).to_have_url(re.compile(r"/exchanges/\d+$"))
    expect(page.locator("h1")).to_contain_text("tools/call")
    expect(page.locator("h1 .badge")).to_have_text("ok")
    expect(page.locator("table.headers")).to_have_count(0)  # stdio: no HTTP headers

    page.locator("a.frame-link").first.click()
    expect(page).to_have_url(re.compile(r"/frames/\d+$"))
    expect(page.locator("h1")).to_contain_text("Frame #")
    tree = page.locator(".json").first
    expect(tree).to_contain_text('"method": "tools/call"')
    # Fold the params object: its summary then says how many keys it holds.
    params = tree.locator("details details").first
    params.locator("summary").first.click()
    expect(params).not_to_have_attribute("open", "")

    page.locator("a", has_text="demo-legacy").first.click()
    expect(page.locator("h1")).to_contain_text("demo-legacy")


def test_annotate_then_filter_by_tag(page: Page, dashboard_url: str, recordings: Recordings):
    sid = recordings.ids["demo-modern"]
    page.goto(dashboard_url)
    page.goto(f"{base(dashboard_url)}/sessions/{sid}")
    head = page.locator("section.session-head")
    head.locator("details.add summary").click()
    head.locator("form.add-tag input[name=tag]").fill("bug-repro")
    head.locator("form.add-tag button").click()
    expect(head.locator(".annotation .tag", has_text="bug-repro")).to_be_visible()

    # A note on a frame, edited, shown in the timeline.
    page.locator("#timeline a.exchange-link", has_text="tools/call").first.click()
    page.locator("a.frame-link").first.click()
    page.locator("details.add summary").click()
    page.locator("form.add-note textarea").fill("the reply to this one is wrong")
    page.locator("form.add-note button").click()
    note = page.locator(".annotation.is-note")
    expect(note).to_contain_text("the reply to this one is wrong")
    note.locator("details.edit summary").click()
    note.locator("textarea[name=note]").fill("edited: the reply is wrong")
    note.locator("button", has_text="Save").click()
    expect(page.locator(".annotation.is-note")).to_contain_text("edited: the reply is wrong")

    page.goto(f"{base(dashboard_url)}/sessions")
    page.locator("select[name=tag]").select_option("bug-repro")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"tag=bug-repro"))
    rows = page.locator("table.sessions tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("demo-modern")
    rows.first.get_by_role("link", name="demo-modern").click()
    page.locator("input[name=annotated]").check()
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#timeline tbody tr")).to_have_count(1)
    expect(page.locator("#timeline .note-mark")).to_be_visible()


def test_hostile_content_renders_inert(page: Page, dashboard_url: str, recordings: Recordings):
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sid = recordings.ids["hostile"]
    echo = recordings.frame_seq("hostile", method="tools/call", kind="request")
    noise = recordings.frame_seq("hostile", kind="noise")
    page.goto(dashboard_url)
    urls = [
        f"{base(dashboard_url)}/sessions",
        f"{base(dashboard_url)}/sessions/{sid}",
        f"{base(dashboard_url)}/sessions/{sid}/exchanges/{echo}",
        f"{base(dashboard_url)}/sessions/{sid}/frames/{echo + 1}",
        f"{base(dashboard_url)}/sessions/{sid}/frames/{noise}",
    ]
    for url in urls:
        page.goto(url)
        page.wait_for_load_state("load")
        assert page.evaluate("window.__pwned") is None, url
        assert page.locator("script").count() == 1, url  # ours, /static/dashboard.js
        assert page.locator("img").count() == 0, url
        assert page.locator('a[href^="javascript:" i]').count() == 0, url
        text = page.locator("body").inner_text()
        assert "\u202e" not in text and "\u2066" not in text, url
    # The hostile text is there, readable, with the override shown for what it is.
    expect(page.locator("pre.rawtext")).to_contain_text("<script>window.__pwned=1")
    expect(page.locator("pre.rawtext .ctl", has_text="U+202E")).to_be_visible()
    page.goto(f"{base(dashboard_url)}/sessions")
    expect(page.locator("table.sessions")).to_contain_text("<script>window.__pwned=5</script>")
    assert dialogs == []


def test_live_session_updates_without_reload(browser: Browser, tmp_path: Path):
    """A session recorded while the page is open: rows arrive over SSE, then 'ended'."""
    db = tmp_path / "live.db"
    steps = {name: threading.Event() for name in ("connected", "go", "sent", "finish")}
    failure: list[BaseException] = []

    async def host() -> None:
        params = recorded_params(db, "live-demo", "basic")
        async with make_client(params, mode="legacy") as client:
            await client.call_tool("echo", {"text": "before the page"})
            steps["connected"].set()
            await asyncio.to_thread(steps["go"].wait, 30)
            await client.call_tool("echo", {"text": "live-marker-42"})
            steps["sent"].set()
            await asyncio.to_thread(steps["finish"].wait, 30)

    def run() -> None:
        try:
            asyncio.run(host())
        except BaseException as exc:
            failure.append(exc)
            steps["connected"].set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert steps["connected"].wait(30) and not failure, failure
        with dashboard_process(db) as url:
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(15_000)
            page.goto(url)
            page.get_by_role("link", name="live-demo").click()
            expect(page.locator("#session-status .badge")).to_have_text("live")
            expect(page.locator("#timeline")).not_to_contain_text("live-marker-42")
            steps["go"].set()
            assert steps["sent"].wait(30), failure
            fresh = page.locator("#timeline tr.fresh", has_text="live-marker-42")
            expect(fresh.first).to_be_visible()
            steps["finish"].set()
            thread.join(30)
            expect(page.locator("#session-status .badge")).to_have_text("ended", timeout=20_000)
            expect(page.locator("#live-note")).to_contain_text("ended")
            context.close()
    finally:
        for ev in steps.values():
            ev.set()
        thread.join(30)
    assert not failure, failure
