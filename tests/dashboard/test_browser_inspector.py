"""The inspector's pages in Chromium (Playwright): the waterfall, the split pane, the host
timeline, the keyboard and copy. A CSP violation or a script error fails the test."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.dashboard.browser import dashboard_process, launch
from tests.dashboard.conftest import FIRST_DIALECT_ONLY, Recordings

pytestmark = [pytest.mark.timeout(90), FIRST_DIALECT_ONLY]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = launch(pw)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def dashboard_url(recordings: Recordings) -> Iterator[str]:
    with dashboard_process(recordings.db) as url:
        yield url


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
