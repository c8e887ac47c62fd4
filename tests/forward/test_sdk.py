"""The official SDK over HTTPS through ``mcptape record --forward``: both eras, recorded alike.

The same scripted conversation runs directly against a real TLS server and through the real
forward proxy (mitmproxy in-process), with identical results. The recording is checked with the
reverse proxy's own expectations (one session per conversation, grouping rule, frames in wire
order — ``tests.relay.test_http_sdk.check_recording``) and byte for byte against what the client
saw (``tests.forward.tee``).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp.test_utils import TestClient, TestServer
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from mcp_proxy.redact import Redactor
from mcp_proxy.testing.client import CallbackRecorder, make_client, run_scripted_session
from tests.forward.conftest import (
    Forward,
    TLSFiles,
    TLSServer,
    direct_client,
    frames_of,
    run_forward,
    wait_exchanges,
)
from tests.forward.tee import TeeTransport
from tests.helpers import db as rdb
from tests.helpers.db import PgServer
from tests.relay.test_http_sdk import check_recording

pytestmark = pytest.mark.timeout(
    240
)  # a hang guard: the heaviest case takes ~85 s on a busy machine


async def scripted(client: httpx2.AsyncClient, url: str, mode: str) -> dict[str, Any]:
    rec = CallbackRecorder()
    async with client:
        transport = streamable_http_client(url, http_client=client)
        async with make_client(transport, mode=mode, recorder=rec) as c:
            return await run_scripted_session(c, rec)


def assert_recorded_as_seen(fw: Forward, tee: TeeTransport) -> None:
    """Every exchange the client made is recorded, each message byte-equal (after redaction)."""
    red = Redactor()
    exchanges = fw.exchanges()
    frames = fw.frames()
    by_ex: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for f in frames:
        by_ex[f["http_exchange_id"]].append(f)
    for fs in by_ex.values():
        fs.sort(key=lambda f: f["seq"])
    assert len(exchanges) == len(tee.seen), (
        [(e["method"], e["status"]) for e in exchanges],
        [(s.method, s.status) for s in tee.seen],
    )
    unmatched = list(exchanges)
    for seen in tee.seen:
        want_c2s = [red.body(seen.request_body, "application/json")[0]] if seen.request_body else []
        want_s2c = [red.body(m, "application/json")[0] for m in seen.messages()]
        for e in unmatched:
            fs = by_ex.get(e["id"], [])
            c2s = [bytes(f["raw"]) for f in fs if f["direction"] == "c2s"]
            if e["method"] == seen.method and c2s == want_c2s and e["status"] == seen.status:
                s2c = [bytes(f["raw"]) for f in fs if f["direction"] == "s2c"]
                if s2c == want_s2c:
                    unmatched.remove(e)
                    break
        else:
            raise AssertionError(f"no recorded exchange equals what the client saw: {seen}")
    assert not unmatched


# Every server and era on the default (lean) engine; the mitmproxy engine on one of each era.
MODES = [
    ("stateful", "legacy", "lean"),
    ("stateful", "auto", "lean"),
    ("stateless", "legacy", "lean"),
    ("stateless", "auto", "lean"),
    ("stateful", "legacy", "mitmproxy"),
    ("stateless", "auto", "mitmproxy"),
]
#: The mitmproxy engine's one test in the default run (the others run under --full).
SMOKE = ("stateful", "legacy", "mitmproxy")
#: The lean engine's cells in the default run: each server and each era once (the other two
#: cells cross the same paths; --full runs them).
LEAN_KEPT = {("stateful", "legacy", "lean"), ("stateless", "auto", "lean")}


def _marks(m: tuple[str, str, str]) -> list[pytest.MarkDecorator]:
    if m == SMOKE:
        return [pytest.mark.smoke]
    return [] if m in LEAN_KEPT or m[2] != "lean" else [pytest.mark.full]


@pytest.mark.parametrize(
    ("server", "mode", "engine"),
    [pytest.param(*m, id="-".join(m), marks=_marks(m)) for m in MODES],
)
async def test_sdk_over_https_identical_and_recorded(
    server: str,
    mode: str,
    engine: str,
    tmp_path: Path,
    confdir: Path,
    tls_files: TLSFiles,
    tls_stateful: TLSServer,
    tls_stateless: TLSServer,
) -> None:
    up = tls_stateful if server == "stateful" else tls_stateless
    direct = await scripted(direct_client(tls_files), up.url, mode)
    with run_forward(tmp_path / "rec.db", confdir, "--name", "fwd-rec", "--engine", engine) as fw:
        client, tee = fw.tee_client()
        relayed = await scripted(client, up.url, mode)
        assert fw.stop() == 0
    assert relayed == direct
    era = "2026-07-28" if mode == "auto" else "initialize"
    check_recording(fw, direct, era=era, stateless=server == "stateless")
    assert_recorded_as_seen(fw, tee)
    session = fw.sessions()[0]
    assert session["meta"]["relay"] == {"mode": "forward", "upstream": up.url.rsplit("/", 1)[0]}
    assert all(e["url"] == up.url for e in fw.exchanges())
    assert all(e["meta"]["forward"] for e in fw.exchanges())
    if (server, mode) == ("stateful", "legacy"):
        await dashboard_shows(fw, "fwd-rec")


@pytest.mark.smoke
async def test_a_forward_recording_on_postgresql(
    confdir: Path, tls_files: TLSFiles, tls_stateful: TLSServer, pg_server: PgServer
) -> None:
    """The forward proxy's end-to-end recording on PostgreSQL, in the default run (the other
    forward tests record into SQLite; the store's dialects are tests/store's subject)."""
    db = pg_server.create_database()
    try:
        direct = await scripted(direct_client(tls_files), tls_stateful.url, "legacy")
        with run_forward(db, confdir, "--name", "fwd-pg") as fw:  # type: ignore[arg-type]
            client, _ = fw.tee_client()
            relayed = await scripted(client, tls_stateful.url, "legacy")
            assert fw.stop() == 0
        assert relayed == direct
        [session] = [s for s in rdb.sessions(db) if s["name"] == "fwd-pg"]
        frames = rdb.frames(db, session["id"])
        methods = {f["method"] for f in frames if f["direction"] == "c2s"}
        assert {"initialize", "tools/call"} <= methods, methods
        exchanges = rdb.rows(
            db, "SELECT url, status FROM http_exchanges WHERE session_id = ?", session["id"]
        )
        assert exchanges and all(e["url"] == tls_stateful.url for e in exchanges)
    finally:
        pg_server.drop_database(db)


async def dashboard_shows(fw: Forward, name: str) -> None:
    """The dashboard lists the session and shows its HTTP exchanges (a page fetch suffices)."""
    from dashboard.app import create_app

    sid = fw.sessions()[0]["id"]
    post = next(e for e in fw.exchanges() if e["method"] == "POST")
    app = create_app("sqlite:///" + str(fw.db), token="t")
    async with TestClient(TestServer(app, host="127.0.0.1")) as tc:
        auth = {"Authorization": "Bearer t"}
        page = await (await tc.get("/", headers=auth)).text()
        assert name in page
        timeline = await (await tc.get(f"/sessions/{sid}.json", headers=auth)).json()
        assert any(r["http"] for r in timeline["timeline"])
        detail = await (
            await tc.get(f"/sessions/{sid}/http/{post['id']}.json", headers=auth)
        ).json()
        assert detail["http"]["method"] == "POST" and detail["http"]["status"] == 200
        html = await (await tc.get(f"/sessions/{sid}", headers=auth)).text()
        assert f'id="h{post["id"]}"' in html or "POST" in html


async def test_legacy_sse_transport(tmp_path: Path, confdir: Path, tls_sse: TLSServer) -> None:
    """Legacy HTTP+SSE: the GET stream is recognised by its endpoint event, the POSTs by body."""
    with run_forward(tmp_path / "rec.db", confdir) as fw:
        _, tee = fw.tee_client()
        inner = tee.inner

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                transport=tee,
                headers=headers,
                timeout=timeout or httpx2.Timeout(30, read=300),
                auth=auth,
                trust_env=False,
            )

        rec = CallbackRecorder()
        async with make_client(
            sse_client(tls_sse.url, httpx_client_factory=factory), mode="legacy", recorder=rec
        ) as c:
            out = await run_scripted_session(c, rec)
        await inner.aclose()
        assert fw.stop() == 0
    assert out["echo"] == "hello, wire"
    sessions = fw.sessions()
    assert len(sessions) == 1, sessions
    s = sessions[0]
    assert s["transport"] == "sse"
    assert s["meta"]["grouping"]["rule"] == "legacy-sse-session-id"
    exchanges = fw.exchanges()
    get = [e for e in exchanges if e["method"] == "GET"]
    assert len(get) == 1
    frames = fw.frames()
    endpoint = [f for f in frames if f["sse_event"] == "endpoint"]
    assert len(endpoint) == 1 and endpoint[0]["http_exchange_id"] == get[0]["id"]
    requests = [f for f in frames if f["direction"] == "c2s" and f["kind"] == "request"]
    responses = [f for f in frames if f["direction"] == "s2c" and f["kind"] in ("response",)]
    assert sorted(f["msg_id"] for f in requests) == sorted(f["msg_id"] for f in responses)
    # Responses ride the GET stream: every one recorded on it, in the order the client got them.
    got = [m for seen in tee.seen if seen.method == "GET" for m in seen.messages()]
    on_stream = [bytes(f["raw"]) for f in frames if f["http_exchange_id"] == get[0]["id"]]
    assert on_stream == got


async def test_sse_events_reach_the_client_one_by_one(
    shared_fw: Forward, tls_stateful: TLSServer
) -> None:
    """Each event arrives as the upstream writes it (not when the stream ends), and is recorded.

    On the shared proxy: only this test's exchange (its URL) is looked at."""
    fw = shared_fw
    origin = tls_stateful.url.rsplit("/", 1)[0]
    gap = 0.5
    client, tee = fw.tee_client()
    arrivals: list[tuple[int, dict[str, Any]]] = []
    async with client:
        body = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
        async with client.stream(
            "POST",
            f"{origin}/timed?n=4&gap={gap}&by=sdk-test",
            content=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        ) as resp:
            buf = b""
            async for chunk in resp.aiter_raw():
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    data = next(ln[6:] for ln in event.split(b"\n") if ln.startswith(b"data: "))
                    arrivals.append((time.monotonic_ns(), json.loads(data)))
    notes = [(t, m) for t, m in arrivals if m.get("method") == "notifications/message"]
    assert len(notes) == 4
    for i, (t, m) in enumerate(notes):
        written = m["params"]["data"]["t"]
        delay_ms = (t - written) / 1e6
        # Before the next event is even written: the proxy did not hold the stream (a held
        # event would wait for the next write). Not half the gap: a loaded 2-core run of the
        # whole suite delayed one event 226 ms past a 150 ms bound (2026-12-02).
        assert delay_ms < gap * 1000, (i, delay_ms)
    (ex,) = wait_exchanges(fw, f"/timed?n=4&gap={gap}&by=sdk-test")
    sse = [f for f in frames_of(fw, ex["id"]) if f["channel"] == "sse"]
    assert [bytes(f["raw"]) for f in sse] == tee.seen[0].messages()
    assert [f["sse_id"] for f in sse][:4] == ["0", "1", "2", "3"]
