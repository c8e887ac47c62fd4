"""Secrets seeded in headers, URLs and bodies never reach the database file; the wire is unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.db import wait_until
from tests.relay.conftest import FakeUpstream, Proxy
from tests.relay.test_http_wire import H_JSON, http_raw

pytestmark = pytest.mark.timeout(60)

SECRETS = {
    "auth": "SECRET-AUTH-TOKEN-1",
    "cookie": "SECRET-COOKIE-2",
    "apikey": "SECRET-KEY-3",
    "param": "SECRET-PARAM-4",
    "password": "SECRET-PW-5",
    "arg": "SECRET-ARG-6",
    "url": "SECRET-URL-7",
    "code": "SECRET-CODE-8",
    "client_secret": "SECRET-CS-9",
    "verifier": "SECRET-CV-10",
    "sse": "SECRET-SSE-11",
    "custom": "SECRET-CUSTOM-12",
    "query": "SECRET-QUERY-13",
    "access": "AT-SECRET-123456",
    "refresh": "RT-SECRET-654321",
}


def seed(px: Proxy) -> None:
    headers: list[tuple[str, str | bytes]] = [
        *H_JSON,
        ("Authorization", f"Bearer {SECRETS['auth']}"),
        ("Cookie", f"sid={SECRETS['cookie']}; theme=dark"),
        ("X-Api-Key", SECRETS["apikey"]),
        ("Mcp-Param-Api-Key", SECRETS["param"]),
        ("X-Custom", SECRETS["custom"]),
    ]
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "login",
                "arguments": {
                    "user": "ada",
                    "password": SECRETS["password"],
                    "api_key": SECRETS["arg"],
                    "query": SECRETS["query"],
                },
                "_meta": {"progressToken": "keep-me"},
            },
        }
    ).encode()
    status, _, _ = http_raw(
        px.url, "POST", f"/rpc?access_token={SECRETS['url']}&x=1", headers, body
    )
    assert status == 200
    form = (
        f"grant_type=authorization_code&code={SECRETS['code']}"
        f"&client_secret={SECRETS['client_secret']}&code_verifier={SECRETS['verifier']}"
    ).encode()
    status, _, data = http_raw(
        px.url, "POST", "/token", [("Content-Type", "application/x-www-form-urlencoded")], form
    )
    assert status == 200 and json.loads(data)["access_token"] == SECRETS["access"]
    status, _, data = http_raw(
        px.url, "POST", "/sse-secret", H_JSON, b'{"jsonrpc":"2.0","id":1,"method":"x"}'
    )
    assert SECRETS["sse"].encode() in data  # the host got it in clear


def db_bytes(db: Path) -> bytes:
    out = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(str(db) + suffix)
        if p.exists():
            out += p.read_bytes()
    return out


def test_secrets_never_reach_the_database(proxy: Any, fake_upstream: FakeUpstream) -> None:
    extra = ("--redact-header", "X-Custom", "--redact-path", "params.arguments.query")
    with proxy(fake_upstream.origin + "/mcp", *extra) as px:
        seed(px)

        # Read the files while the proxy is still running (WAL not checkpointed yet) …
        def last_recorded() -> bool:
            return any("/sse-secret" in e["url"] and e["outcome"] for e in px.exchanges())

        assert wait_until(last_recorded)  # the recorder wrote the three exchanges
        live = db_bytes(px.db)
        assert px.stop() == 0
    # … and after it stopped.
    for blob in (live, db_bytes(px.db)):
        for name, secret in SECRETS.items():
            assert secret.encode() not in blob, name
    # The wire was not changed: the upstream got every secret as sent.
    # (The fake upstream is shared by the whole run: this test's request is the one with the
    # secret in its URL.)
    rpc_req = next(r for r in fake_upstream.seen if SECRETS["url"] in r["raw_path"])
    assert rpc_req["raw_path"].startswith("/rpc")
    assert ["Authorization", f"Bearer {SECRETS['auth']}"] in rpc_req["raw_headers"]
    assert SECRETS["password"].encode() in rpc_req["body"]
    token_req = next(r for r in fake_upstream.seen if r["raw_path"] == "/token")
    assert SECRETS["code"].encode() in token_req["body"]
    # What was recorded instead.
    ex = px.exchanges()
    rec = dict((k, v) for k, v in ex[0]["request_headers"])
    assert rec["Authorization"] == "Bearer [REDACTED]"
    assert rec["Cookie"] == "sid=[REDACTED]; theme=[REDACTED]"
    assert rec["X-Api-Key"] == rec["Mcp-Param-Api-Key"] == rec["X-Custom"] == "[REDACTED]"
    assert ex[0]["url"].endswith("/rpc?access_token=[REDACTED]&x=1")
    assert ex[1]["meta"]["request_body"]["redacted"] is True
    assert "&code=[REDACTED]&client_secret=[REDACTED]&" in ex[1]["meta"]["request_body"]["text"]
    assert json.loads(ex[1]["meta"]["response_body"]["text"])["token_type"] == "Bearer"
    frames = px.frames()
    call = json.loads(frames[0]["raw"])
    args = call["params"]["arguments"]
    assert args == {
        "user": "ada",
        "password": "[REDACTED]",
        "api_key": "[REDACTED]",
        "query": "[REDACTED]",
    }
    assert call["params"]["_meta"]["progressToken"] == "keep-me"
    assert frames[0]["redacted"] == 1 and frames[0]["kind"] == "request"
    sse = next(f for f in frames if f["channel"] == "sse")
    assert sse["redacted"] == 1
    assert json.loads(sse["raw"])["result"]["structuredContent"] == {
        "access_token": "[REDACTED]",
        "note": "fine",
    }
    plain = next(f for f in frames if f["raw"] == b'{"jsonrpc":"2.0","id":1,"method":"x"}')
    assert plain["redacted"] is None  # untouched frames keep their wire bytes


def test_no_redact_says_so_loudly(proxy: Any, fake_upstream: FakeUpstream) -> None:
    with proxy(fake_upstream.origin + "/mcp", "--no-redact") as px:
        seed(px)
        assert px.stop() == 0
    assert any("redaction is OFF" in line and "IN CLEAR TEXT" in line for line in px.stderr)
    blob = db_bytes(px.db)
    assert SECRETS["auth"].encode() in blob and SECRETS["password"].encode() in blob
    assert all("redaction" in s["meta"] for s in px.sessions())
