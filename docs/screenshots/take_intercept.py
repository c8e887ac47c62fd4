"""Take ``intercept.png``: the Intercepted page with a real held ``tools/call``.

    uv run python docs/screenshots/take_intercept.py

A real SDK client calls ``echo`` through ``mcptape record --intercept 'method=tools/call'``;
``mcptape dashboard`` shows the held call; Debian's Chromium (Playwright) photographs the page,
then forwards the call from the page so the client finishes.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from mcp_proxy.store.intercepts import InterceptTable  # noqa: E402
from mcp_proxy.testing.client import make_client, stdio_params  # noqa: E402
from tests.conftest import mcptape_cmd  # noqa: E402
from tests.dashboard.browser import dashboard_process, launch  # noqa: E402

OUT = Path(__file__).resolve().parent


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "intercept.db"
        InterceptTable(f"sqlite:///{db}").close()
        base = stdio_params("basic")
        argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", "fs-demo"]
        argv += ["--intercept", "method=tools/call", "--"]
        params = base.model_copy(
            update={"command": argv[0], "args": [*argv[1:], base.command, *base.args]}
        )

        async def host() -> None:
            async with make_client(params, mode="legacy") as client:
                await client.call_tool("lookup", {"region": "eu-west", "query": "invoices 2026"})

        thread = threading.Thread(target=lambda: asyncio.run(host()), daemon=True)
        thread.start()
        with dashboard_process(db) as url, sync_playwright() as pw:
            browser = launch(pw)
            page = browser.new_page(viewport={"width": 1200, "height": 620})
            page.goto(url)
            page.goto(url.split("/?", 1)[0] + "/intercepts")
            expect(page.locator("section.held")).to_have_count(1, timeout=30_000)
            page.screenshot(path=str(OUT / "intercept.png"))
            page.get_by_role("button", name="Forward as it was").click()
            browser.close()
        thread.join(30)


if __name__ == "__main__":
    main()
