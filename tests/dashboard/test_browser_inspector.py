"""The inspector's pages in Chromium (Playwright): the waterfall, the split pane, the host
timeline, the keyboard and copy. A CSP violation or a script error fails the test."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from mcp_proxy.recording.jsonl import loads_recording
from mcp_proxy.testing.client import make_client
from tests.dashboard.browser import dashboard_process
from tests.dashboard.conftest import FIRST_DIALECT_ONLY, Recordings, recorded_params, run_async
from tests.helpers import db as rdb

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def page(browser: Browser, dashboard_url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on(
        "console",
        lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    pg.goto(dashboard_url)  # token → cookie
    yield pg
    context.close()
    assert errors == [], errors


def base(url: str) -> str:
    return url.split("/?", 1)[0]


@FIRST_DIALECT_ONLY
def test_waterfall_bars_show_their_timings_on_hover_and_focus(
    page: Page, dashboard_url: str, recordings: Recordings
):
    sid = recordings.ids["demo-legacy"]
    page.goto(f"{base(dashboard_url)}/sessions/{sid}")
    page.locator("#waterfall-link").click()
    expect(page).to_have_url(re.compile(r"/waterfall$"))
    rows = page.locator("#waterfall tbody tr")
    expect(rows.first).to_be_visible()
    n = rows.count()
    assert n > 3
    # Bars are drawn: each has a visible width, and later requests start further right.
    boxes = [rows.nth(i).locator("svg.wf").bounding_box() for i in range(n)]
    drawn = [[r.bounding_box() for r in rows.nth(i).locator("svg.wf rect").all()] for i in range(n)]
    assert all(sum(b["width"] for b in bars if b) >= 1 for bars in drawn)
    starts = [min(b["x"] for b in bars if b) for bars in drawn]
    assert starts == sorted(starts)
    assert all(b is not None for b in boxes)
    # Focus (the keyboard) shows the timings as text; hover does too.
    cell = rows.nth(1).locator("td.wf-cell")
    timings = cell.locator(".wf-timings")
    expect(timings).to_be_hidden()
    cell.focus()
    expect(timings).to_be_visible()
    expect(timings).to_contain_text("answered after")
    rows.nth(2).locator("td.wf-cell").hover()
    expect(rows.nth(2).locator(".wf-timings")).to_be_visible()
    # A bar with notifications has ticks.
    expect(page.locator("svg.wf line.tick").first).to_be_attached()


@FIRST_DIALECT_ONLY
def test_split_pane_opens_beside_the_list_with_its_own_url(
    page: Page, dashboard_url: str, recordings: Recordings
):
    sid = recordings.ids["demo-legacy"]
    page.goto(f"{base(dashboard_url)}/sessions/{sid}")
    link = page.locator("#timeline a.exchange-link", has_text="tools/call").first
    href = link.get_attribute("href")
    assert href is not None
    seq = href.rsplit("/", 1)[1]
    link.click()
    pane = page.locator("#detail")
    expect(pane.locator("h1")).to_contain_text("tools/call")
    expect(page).to_have_url(re.compile(rf"/sessions/{sid}\?x={seq}$"))
    # Beside the list, not instead of it: both are on screen side by side.
    table = page.locator("#split .master").bounding_box()
    box = pane.bounding_box()
    assert table and box and box["x"] > table["x"] + table["width"] - 5
    expect(page.locator(f"#f{seq}")).to_have_class(re.compile(r"\bopen\b"))
    # The URL is shareable: loaded afresh, it opens the same exchange beside the list.
    shared = page.url
    page.goto(f"{base(dashboard_url)}/sessions")
    page.goto(shared)
    expect(page.locator("#detail h1")).to_contain_text("tools/call")
    # Back closes it; the full page stays for a direct link.
    page.locator("#detail a.full-page").click()
    expect(page).to_have_url(re.compile(rf"/exchanges/{seq}$"))
    expect(page.locator("#detail")).to_have_count(0)
    expect(page.locator("h1")).to_contain_text("tools/call")


@FIRST_DIALECT_ONLY
def test_the_keyboard(page: Page, dashboard_url: str, recordings: Recordings):
    page.goto(f"{base(dashboard_url)}/sessions")
    page.keyboard.press("/")
    expect(page.locator("input[type=search]")).to_be_focused()
    page.keyboard.press("Escape")  # leaves the box
    page.keyboard.press("?")
    expect(page.locator("dialog#keys")).to_be_visible()
    expect(page.locator("dialog#keys")).to_contain_text("next / previous row")
    page.keyboard.press("Escape")
    expect(page.locator("dialog#keys")).to_be_hidden()
    page.keyboard.press("j")
    first = page.locator("table.sessions tbody tr").first
    expect(first).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"/sessions/[0-9a-f]{32}$"))
    # On a timeline: j/k walk the rows, Enter opens the exchange beside it, Esc closes it.
    sid = recordings.ids["demo-legacy"]
    page.goto(f"{base(dashboard_url)}/sessions/{sid}")
    rows = page.locator("#timeline tbody tr.row")
    requests = [i for i in range(rows.count()) if rows.nth(i).locator("a.exchange-link").count()]
    target = requests[1]
    for _ in range(target + 2):
        page.keyboard.press("j")
    page.keyboard.press("k")
    expect(rows.nth(target)).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("Enter")
    expect(page.locator("#detail h1")).to_be_visible()
    assert "?x=" in page.url
    page.keyboard.press("Escape")
    expect(page.locator("#detail")).to_have_count(0)
    assert "x=" not in page.url


@FIRST_DIALECT_ONLY
def test_copy_json_raw_and_a_jsonl_snippet(
    browser: Browser, dashboard_url: str, recordings: Recordings
):
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(dashboard_url)
        sid = recordings.ids["demo-legacy"]
        seq = recordings.frame_seq("demo-legacy", kind="request", method="tools/call")
        raw = recordings.rows("SELECT raw FROM frames WHERE session_id = ? AND seq = ?", sid, seq)[
            0
        ]["raw"]
        page.goto(f"{base(dashboard_url)}/sessions/{sid}/frames/{seq}")

        def clip() -> str:
            return str(page.evaluate("navigator.clipboard.readText()"))

        page.get_by_role("button", name="Copy raw bytes").click()
        expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert clip() == bytes(raw).decode()
        page.get_by_role("button", name="Copy JSON").first.click()
        assert json.loads(clip()) == json.loads(bytes(raw))
        page.goto(f"{base(dashboard_url)}/sessions/{sid}/exchanges/{seq}")
        page.locator("#copy-jsonl-box summary").click()
        page.locator("#copy-jsonl-box button.copy").click()
        snippet = clip()
        rec = loads_recording(snippet.encode())
        frames = rec.sessions[0].frames
        assert frames[0]["seq"] == seq and len(frames) == 2
        assert bytes(frames[0]["raw"]) == bytes(raw)
        # Hostile bytes (bidi override, ESC) copy exactly, though the page never holds them.
        hid = recordings.ids["hostile"]
        evil = next(
            r
            for r in recordings.rows(
                "SELECT seq, raw FROM frames WHERE session_id = ? ORDER BY seq", hid
            )
            if "\u202e".encode() in bytes(r["raw"]) and b"\x1b" in bytes(r["raw"])
        )
        sent = page.goto(f"{base(dashboard_url)}/sessions/{hid}/frames/{evil['seq']}")
        assert sent is not None and "\u202e" not in sent.text()
        expect(page.locator("pre.rawtext .ctl").first).to_be_visible()
        page.get_by_role("button", name="Copy raw bytes").click()
        expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert clip() == bytes(evil["raw"]).decode()
    finally:
        context.close()


def test_host_timeline_two_concurrent_servers_in_two_lanes(browser: Browser, tmp_path: Path):
    """Two servers of one host recorded at the same time: one lane each, overlapping, the
    slow call on its own server's lane."""
    db = tmp_path / "host.db"

    async def go() -> None:
        fast = recorded_params(db, "files", "basic", server_name="files-server")
        slow = recorded_params(db, "search", "slow", server_name="search-server")
        async with make_client(fast, mode="legacy") as a, make_client(slow, mode="legacy") as b:
            await a.call_tool("echo", {"text": "one"})
            await asyncio.gather(
                b.call_tool("slow", {"steps": 2, "delay": 0.8}),
                a.call_tool("echo", {"text": "meanwhile"}),
            )
            await a.call_tool("echo", {"text": "two"})

    run_async(go)
    client = {r["client_name"] for r in rdb.rows(db, "SELECT client_name FROM sessions")}
    assert len(client) == 1
    host = client.pop()
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        with dashboard_process(db) as url:
            page.goto(url)
            page.locator("header.top a", has_text="Timeline").click()
            page.locator("input[name=client]").fill(host)
            page.locator("input[name=since]").fill("1h")
            page.get_by_role("button", name="Show").click()
            lanes = page.locator("#lanes tbody tr.lane")
            expect(lanes).to_have_count(2)
            names = [lanes.nth(i).get_attribute("data-lane") for i in range(2)]
            assert names == ["files", "search"]
            spans = [lanes.nth(i).locator("rect.span").bounding_box() for i in range(2)]
            assert spans[0] and spans[1]
            # Concurrent: the two sessions' bands overlap in time.
            assert spans[0]["x"] < spans[1]["x"] + spans[1]["width"]
            assert spans[1]["x"] < spans[0]["x"] + spans[0]["width"]
            # The slow call is on the search lane, marked; the echo calls on files are not.
            # (initialize may be slow on a loaded machine: it is not what this test is about.)
            slow_calls = lanes.nth(1).locator("rect.req.slow", has_text="tools/call")
            expect(slow_calls).to_have_count(1)
            expect(lanes.nth(0).locator("rect.req.slow", has_text="tools/call")).to_have_count(0)
            expect(lanes.nth(0).locator("rect.req", has_text="tools/call")).to_have_count(3)
            expect(lanes.nth(1).locator("td.lat .badge")).to_contain_text("slow")
            twin = page.request.get(page.url.replace("/timeline?", "/timeline.json?")).json()
            assert [lane["name"] for lane in twin["lanes"]] == ["files", "search"]
            calls = [
                [r for s in lane["sessions"] for r in s["requests"] if r["method"] == "tools/call"]
                for lane in twin["lanes"]
            ]
            assert [r["slow"] for r in calls[1]] == [True]
            assert calls[1][0]["latency_ms"] >= 1600
            assert len(calls[0]) == 3 and not any(r["slow"] for r in calls[0])
    finally:
        context.close()
    assert errors == [], errors
