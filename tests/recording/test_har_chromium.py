"""A HAR exported by a real browser imports into a session equal to the one mcptape recorded.

Chromium (Debian's, driven by Playwright with ``record_har_path``) talks MCP to a real SDK
server through the real HTTP relay (``mcptape record --upstream``) with ``fetch()`` POSTs from
a page: initialize, initialized, tools/list, tools/call, DELETE. The browser's HAR, which also
holds the page load (not MCP, skipped), is imported with ``mcptape import`` and diffed with
``mcptape diff`` against the relay's own recording of the same traffic: no differences.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from mcp_proxy.testing.process import start_http_server
from tests.dashboard.browser import launch
from tests.recording.conftest import run_cli
from tests.relay.conftest import local_url, run_proxy

pytestmark = pytest.mark.timeout(240)

SCRIPT = """
async (url) => {
  const post = async (body, sid) => {
    const headers = {
      "content-type": "application/json",
      "accept": "application/json, text/event-stream",
    };
    if (sid) {
      headers["mcp-session-id"] = sid;
      headers["mcp-protocol-version"] = "2025-11-25";
    }
    const r = await fetch(url, {method: "POST", headers, body: JSON.stringify(body)});
    return [r.status, r.headers.get("mcp-session-id"), await r.text()];
  };
  const init = await post({jsonrpc: "2.0", id: 1, method: "initialize", params: {
    protocolVersion: "2025-11-25", capabilities: {},
    clientInfo: {name: "chromium-har", version: "1.0"}}});
  const sid = init[1];
  await post({jsonrpc: "2.0", method: "notifications/initialized"}, sid);
  await post({jsonrpc: "2.0", id: 2, method: "tools/list"}, sid);
  const call = await post({jsonrpc: "2.0", id: 3, method: "tools/call",
    params: {name: "echo", arguments: {text: "from chromium"}}}, sid);
  await fetch(url, {method: "DELETE", headers: {"mcp-session-id": sid,
    "mcp-protocol-version": "2025-11-25"}});
  return [init[0], sid, call[2]];
}
"""


def test_a_chromium_har_imports_and_diffs_equal_to_the_relays_recording(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    har = tmp_path / "chromium.har"
    with start_http_server("basic", "http") as (upstream, _proc):
        with run_proxy(upstream, db) as px:
            url = local_url(px, upstream)
            with sync_playwright() as pw:
                browser = launch(pw)
                context = browser.new_context(record_har_path=str(har))
                page = context.new_page()
                page.goto(px.origin + "/")  # a page of the relay's origin: fetch() is same-origin
                status, sid, answer = page.evaluate(SCRIPT, url)
                context.close()  # writes the HAR
                browser.close()
            px.stop()
            # The page load is a session of its own (no Mcp-Session-Id): take the MCP one.
            recorded = max(px.sessions(), key=lambda r: r["frame_count"])
    assert status == 200 and sid and "from chromium" in answer
    doc = json.loads(har.read_bytes())
    assert doc["log"]["creator"]["name"] == "Playwright"
    assert any(e["request"]["method"] == "GET" for e in doc["log"]["entries"])  # the page

    imported = run_cli("import", str(har), "--db", str(db))
    assert imported.returncode == 0, imported.stderr
    assert "imported 1 session(s)" in imported.stderr
    new_id = imported.stdout.split()[0]
    diff = run_cli("diff", recorded["id"], new_id, "--db", str(db), "--format", "json")
    assert diff.returncode == 0, diff.stdout + diff.stderr
    report = json.loads(diff.stdout)
    assert report["equal"] and report["counts"]["same"] >= 4
    shown = run_cli("sessions", "--db", str(db))
    assert shown.returncode == 0
    rows = run_cli("show", new_id, "--db", str(db), "--format", "json")
    assert rows.returncode == 0 and "from chromium" in rows.stdout
