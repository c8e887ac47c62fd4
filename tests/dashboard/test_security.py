"""Security: Host/Origin checks (DNS rebinding, CSRF), the per-run token, and inert content."""

from __future__ import annotations

import re

import pytest
from aiohttp.test_utils import TestClient

from tests.dashboard.conftest import AUTH, HOSTILE_TEXT, TOKEN, Recordings, get_html

pytestmark = pytest.mark.timeout(60)


def _origin(client: TestClient) -> str:
    return f"http://127.0.0.1:{client.port}"


@pytest.mark.parametrize("path", ["/sessions", "/sessions.json", "/stats.json"])
async def test_every_page_needs_the_token(client: TestClient, path: str):
    r = await client.get(path)
    assert r.status == 401
    r = await client.get(path, headers={"Authorization": "Bearer wrong"})
    assert r.status == 401
    r = await client.get(path, headers={"X-Mcptape-Token": TOKEN})
    assert r.status == 200


async def test_url_token_becomes_a_strict_cookie_and_leaves_the_address(client: TestClient):
    r = await client.get(f"/sessions?q=demo&token={TOKEN}", allow_redirects=False)
    assert r.status == 303
    assert r.headers["Location"] == "/sessions?q=demo"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert f"mcptape_dashboard_{client.port}={TOKEN}" in cookie
    r = await client.get("/sessions?q=demo")  # the client's jar now holds the cookie
    assert r.status == 200


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost.evil.example:{port}"]
)
async def test_foreign_host_is_refused_even_with_the_token(client: TestClient, host: str):
    """DNS rebinding: the attacker's name resolves to 127.0.0.1 but stays in Host."""
    r = await client.get("/sessions.json", headers={**AUTH, "Host": host.format(port=client.port)})
    assert r.status == 421


async def test_own_host_names_are_accepted(client: TestClient):
    for host in (f"127.0.0.1:{client.port}", f"localhost:{client.port}"):
        r = await client.get("/sessions.json", headers={**AUTH, "Host": host})
        assert r.status == 200, host


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "https://127.0.0.1:{port}"])
async def test_foreign_origin_is_refused(client: TestClient, origin: str):
    r = await client.get(
        "/sessions.json", headers={**AUTH, "Origin": origin.format(port=client.port)}
    )
    assert r.status == 403


async def test_state_change_needs_the_token_in_the_request_not_just_the_cookie(
    client: TestClient, recordings: Recordings
):
    sid = recordings.ids["demo-legacy"]
    await client.get(f"/sessions?token={TOKEN}", allow_redirects=False)  # cookie set
    url = f"/sessions/{sid}/annotations"
    own = {"Origin": _origin(client)}
    # Cookie alone (what a cross-site form would carry): refused.
    r = await client.post(url, data={"tag": "csrf-attempt"}, headers=own, allow_redirects=False)
    assert r.status == 403
    # Wrong form token: refused. Right one from a foreign origin: refused.
    r = await client.post(
        url, data={"tag": "csrf-attempt", "_token": "nope"}, headers=own, allow_redirects=False
    )
    assert r.status == 403
    r = await client.post(
        url,
        data={"tag": "csrf-attempt", "_token": TOKEN},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
    )
    assert r.status == 403
    r = await client.post(
        url,
        data={"tag": "csrf-attempt", "_token": TOKEN},
        headers={"Sec-Fetch-Site": "cross-site"},
        allow_redirects=False,
    )
    assert r.status == 403
    assert recordings.rows("SELECT * FROM annotations WHERE tag = 'csrf-attempt'") == []
    # The page's own form: token field + own origin → stored, redirected back (local only).
    r = await client.post(
        url,
        data={"tag": "form-post", "_token": TOKEN, "next": "//evil.example/x"},
        headers=own,
        allow_redirects=False,
    )
    assert r.status == 303 and r.headers["Location"] == f"/sessions/{sid}"
    assert len(recordings.rows("SELECT * FROM annotations WHERE tag = 'form-post'")) == 1


async def test_security_headers(client: TestClient):
    r = await client.get("/sessions", headers=AUTH)
    csp = r.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["Referrer-Policy"] == "same-origin"
    assert r.headers["Cache-Control"] == "no-store"
    # The stylesheet is public (the refusal page uses it) but Host is still checked.
    assert (await client.get("/static/dashboard.css")).status == 200
    r = await client.get("/static/dashboard.css", headers={"Host": "evil.example"})
    assert r.status == 421


async def _hostile_pages(client: TestClient, recordings: Recordings) -> dict[str, str]:
    sid = recordings.ids["hostile"]
    echo = recordings.frame_seq("hostile", method="tools/call", kind="request")
    answer = echo + 1
    noise = recordings.frame_seq("hostile", kind="noise")
    stderr = recordings.frame_seq("hostile", channel="stderr")
    paths = [
        "/sessions",
        f"/sessions/{sid}",
        f"/sessions/{sid}/frames/{answer}",
        f"/sessions/{sid}/frames/{noise}",
        f"/sessions/{sid}/frames/{stderr}",
        f"/sessions/{sid}/exchanges/{echo}",
        f"/sessions/{sid}/stats",
        f"/sessions/{sid}/waterfall",
        f"/sessions/{sid}?x={echo}",
        "/timeline?since=0",
    ]
    return {p: await get_html(client, p) for p in paths}


async def test_hostile_content_is_escaped_and_visible(client: TestClient, recordings: Recordings):
    pages = await _hostile_pages(client, recordings)
    for path, html in pages.items():
        # Our own script tag is the only one; nothing recorded becomes markup.
        assert re.findall(r"<script\b[^>]*>", html) == [
            '<script src="/static/dashboard.js" defer>'
        ], path
        assert "<img" not in html, path
        assert 'href="javascript:' not in html.lower(), path
        # Direction overrides and escape characters never reach the page raw…
        for ch in ("\u202e", "\u2066", "\u2069", "\x1b"):
            assert ch not in html, (path, hex(ord(ch)))
    # …they are shown as visible badges where the hostile text appears.
    session_page = pages[f"/sessions/{recordings.ids['hostile']}"]
    assert 'class="ctl" title="RIGHT-TO-LEFT OVERRIDE">U+202E</span>' in session_page
    assert "&lt;script&gt;window.__pwned=1" in session_page
    assert HOSTILE_TEXT not in session_page
    sessions_page = pages["/sessions"]
    assert "evil&lt;script&gt;window.__pwned=5&lt;/script&gt;" in sessions_page


async def test_hostile_content_in_json_twins_is_data(client: TestClient, recordings: Recordings):
    sid = recordings.ids["hostile"]
    noise = recordings.frame_seq("hostile", kind="noise")
    r = await client.get(f"/sessions/{sid}/frames/{noise}.json", headers=AUTH)
    assert r.content_type == "application/json"
    data = await r.json()
    assert data["frame"]["text"] == HOSTILE_TEXT + "\n"  # exact, unmangled, as data
