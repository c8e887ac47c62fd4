"""Take the dashboard screenshots in this folder from a demo-like recording.

    uv run python docs/screenshots/take_screenshots.py

Records a few sessions through the real ``mcptape record`` with the bundled test servers (both
protocol eras, an MRTR conversation, a hostile server), annotates one, starts ``mcptape
dashboard`` and photographs the main pages with Debian's Chromium driven by Playwright.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from mcp_proxy.testing.client import CallbackRecorder, make_client  # noqa: E402
from tests.dashboard.browser import dashboard_process, launch  # noqa: E402
from tests.dashboard.conftest import (  # noqa: E402
    record_demo,
    record_hostile,
    recorded_params,
)

OUT = Path(__file__).resolve().parent


async def record_mrtr(db: Path) -> None:
    rec = CallbackRecorder()
    params = recorded_params(db, "mrtr-confirm", "basic,mrtr")
    async with make_client(params, mode="auto", recorder=rec) as client:
        await client.call_tool("confirm", {"action": "delete the staging database"})
        await client.call_tool("countdown", {"rounds": 3})


def api(base: str, token: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
            "X-Mcptape-Token": token,
        },
        method="POST",
    )
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def get(base: str, token: str, path: str) -> dict:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"

        async def record() -> None:
            await record_hostile(db)
            await record_mrtr(db)
            await record_demo(db, "weather-agent", "auto")
            await record_demo(db, "fs-server repro", "legacy")

        asyncio.run(record())
        with dashboard_process(db) as url:
            base, token = url.split("/?token=")
            sessions = {s["name"]: s for s in get(base, token, "/sessions.json")["sessions"]}
            repro = sessions["fs-server repro"]["id"]
            api(base, token, f"/sessions/{repro}/annotations.json", {"tag": "bug-repro"})
            rows = get(base, token, f"/sessions/{repro}.json")["timeline"]
            fail = next(r for r in rows if r["exchange"] and r["exchange"]["name"] == "fail")
            slow = next(r for r in rows if r["exchange"] and r["exchange"]["name"] == "slow")
            api(
                base,
                token,
                f"/sessions/{repro}/annotations.json",
                {"note": "fail should not be an isError result here", "frame_seq": fail["seq"]},
            )
            hostile = sessions["hostile"]["id"]
            noise = next(
                r
                for r in get(base, token, f"/sessions/{hostile}.json")["timeline"]
                if r["kind"] == "noise"
            )
            mrtr = sessions["mrtr-confirm"]["id"]
            chain = next(
                r
                for r in get(base, token, f"/sessions/{mrtr}.json")["timeline"]
                if r["exchange"] and r["exchange"]["chain"] is not None
            )
            shots = {
                "sessions.png": "/sessions",
                "session.png": f"/sessions/{repro}",
                "exchange.png": f"/sessions/{repro}/exchanges/{slow['seq']}",
                "frame.png": f"/sessions/{repro}/frames/{fail['exchange']['response_seq']}",
                "mrtr.png": f"/sessions/{mrtr}/exchanges/{chain['seq']}",
                "stats.png": "/stats",
                "hostile.png": f"/sessions/{hostile}/frames/{noise['seq']}",
                "waterfall.png": f"/sessions/{repro}/waterfall",
                "split.png": f"/sessions/{repro}?x={slow['seq']}",
                "timeline.png": "/timeline?since=0",
            }
            with sync_playwright() as pw:
                browser = launch(pw)
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(url)
                for name, path in shots.items():
                    page.goto(base + path)
                    page.wait_for_load_state("networkidle")  # the split pane fetches its detail
                    page.screenshot(path=str(OUT / name))
                    print(OUT / name)
                page.goto(base + f"/sessions/{repro}")
                page.keyboard.press("?")  # the keyboard map
                page.screenshot(path=str(OUT / "keys.png"))
                print(OUT / "keys.png")
                browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
