"""Real SDK clients and servers through the real ``mcptape record`` subprocess, both eras."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
    stdio_params,
    tool_text,
)
from tests.conftest import matrix
from tests.helpers import db as rdb
from tests.helpers.proxy import proxied

pytestmark = [pytest.mark.timeout(90), pytest.mark.both_dialects]


def _session(db: Path, name: str) -> dict:
    rows = [s for s in rdb.sessions(db) if s["name"] == name]
    assert len(rows) == 1
    return rows[0]


def _pairs_complete(frames: list[dict]) -> None:
    """Every request in either direction has exactly one response with the same id."""
    for req_dir, resp_dir in (("c2s", "s2c"), ("s2c", "c2s")):
        reqs = [f["msg_id"] for f in frames if f["direction"] == req_dir and f["kind"] == "request"]
        resps = [
            f["msg_id"]
            for f in frames
            if f["direction"] == resp_dir and f["kind"] in ("response", "error")
        ]
        assert sorted(reqs) == sorted(resps), (req_dir, reqs, resps)


# The default run: the initialize era (the 2026-07-28 era's scripted session goes through the
# stdio relay in tests/analysis/test_real_sessions.py); --full: both eras.
@pytest.mark.parametrize("mode", matrix(["legacy", "auto"], keep={"legacy"}))
async def test_scripted_session_is_identical_through_the_proxy(mode: str, db_path: Path) -> None:
    params = stdio_params(SCRIPTED_PRESETS, name="scripted")
    rec_direct, rec_proxy = CallbackRecorder(), CallbackRecorder()
    async with make_client(params, mode=mode, recorder=rec_direct) as client:
        direct = await run_scripted_session(client, rec_direct)
    async with make_client(
        proxied(params, db_path, "scripted"), mode=mode, recorder=rec_proxy
    ) as client:
        through = await run_scripted_session(client, rec_proxy)
    assert through == direct

    s = _session(db_path, "scripted")
    frames = rdb.frames(db_path, s["id"])
    stdio = [f for f in frames if f["channel"] == "stdio"]
    assert all(f["kind"] in ("request", "response", "notification") for f in stdio), [
        (f["kind"], f["raw"][:80])
        for f in stdio
        if f["kind"] not in ("request", "response", "notification")
    ]
    _pairs_complete(stdio)
    methods = [f["method"] for f in stdio if f["direction"] == "c2s" and f["kind"] == "request"]
    for m in ("tools/list", "tools/call", "resources/list", "resources/read", "prompts/get"):
        assert m in methods
    assert sum(m == "tools/call" for m in methods) >= 5
    progress = [f for f in stdio if f["method"] == "notifications/progress"]
    assert len(progress) == 3
    logs = [f for f in stdio if f["method"] == "notifications/message"]
    assert logs, "log notifications must be recorded"
    assert s["server_name"] == "scripted"
    assert s["protocol_version"] == direct["protocol_version"]
    meta = json.loads(s["meta"])
    if mode == "legacy":
        assert s["era"] == "initialize"
        assert methods[0] == "initialize"
        assert meta["initialize_result"]["serverInfo"]["name"] == "scripted"
        assert "notifications/initialized" in [
            f["method"] for f in stdio if f["direction"] == "c2s"
        ]
    else:
        assert s["era"] == "2026-07-28"
        assert methods[0] == "server/discover"
        assert "initialize" not in methods
        assert "2026-07-28" in meta["discover"]["supportedVersions"]
        assert meta["envelope"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert s["status"] == "ended"


async def test_server_to_client_requests_are_recorded_in_their_own_id_space(db_path: Path) -> None:
    params = stdio_params("basic,sampling,elicitation")
    rec = CallbackRecorder()
    async with make_client(proxied(params, db_path, "s2c"), mode="legacy", recorder=rec) as client:
        r = await client.call_tool("sample", {"prompt": "hi"})
        assert "sampled reply" in tool_text(r)
        await client.call_tool("ask", {})
        await client.call_tool("roots", {})
    frames = rdb.frames(db_path, _session(db_path, "s2c")["id"])
    s2c_reqs = [f["method"] for f in frames if f["direction"] == "s2c" and f["kind"] == "request"]
    assert s2c_reqs == ["sampling/createMessage", "elicitation/create", "roots/list"]
    _pairs_complete(frames)


async def test_mrtr_rounds_are_recorded(db_path: Path) -> None:
    params = stdio_params("basic,mrtr")
    rec = CallbackRecorder()
    async with make_client(proxied(params, db_path, "mrtr"), recorder=rec) as client:
        r = await client.call_tool("confirm", {"action": "deploy"})
        assert not r.is_error
    frames = rdb.frames(db_path, _session(db_path, "mrtr")["id"])
    calls = [json.loads(f["raw"]) for f in frames if f["method"] == "tools/call"]
    assert len(calls) == 2
    assert "inputResponses" in calls[1]["params"]
    results = [
        json.loads(f["raw"])["result"]
        for f in frames
        if f["direction"] == "s2c" and f["kind"] == "response"
    ]
    assert any(r.get("resultType") == "input_required" for r in results)


async def test_misbehaving_server_output_is_relayed_and_classified(db_path: Path) -> None:
    params = stdio_params("basic,noise,badutf8", encoding_error_handler="replace")
    async with make_client(proxied(params, db_path, "bad"), mode="legacy") as client:
        await client.call_tool("noise", {"text": "stray text", "count": 2})
        await client.call_tool("badutf8", {"kind": "raw"})
        await client.call_tool("badutf8", {"kind": "json"})
        assert tool_text(await client.call_tool("echo", {"text": "still alive"})) == "still alive"
    frames = rdb.frames(db_path, _session(db_path, "bad")["id"])
    noise = [f for f in frames if f["kind"] == "noise" and f["direction"] == "s2c"]
    assert [f["raw"] for f in noise[:2]] == [b"stray text\n", b"stray text\n"]
    bad = [f["raw"] for f in noise[2:]]
    assert len(bad) == 2
    assert all(b"\xff" in r or b"\xfe" in r or b"\x80" in r or b"\xc3\x28" in r for r in bad), bad


async def test_server_crash_mid_call_is_recorded(db_path: Path) -> None:
    params = stdio_params("basic,crash")
    with pytest.raises(Exception):  # noqa: B017 — the SDK reports the lost connection its own way
        async with make_client(proxied(params, db_path, "crash"), mode="legacy") as client:
            await client.call_tool("crash", {"code": 3})
    s = _session(db_path, "crash")
    assert (s["status"], s["exit_code"]) == ("crashed", 3)
    frames = rdb.frames(db_path, s["id"])
    calls = [f for f in frames if f["method"] == "tools/call"]
    assert len(calls) == 1
    assert not [
        f
        for f in frames
        if f["direction"] == "s2c" and f["msg_id"] == calls[0]["msg_id"] and f["kind"] == "response"
    ]


async def test_burst_of_notifications_loses_nothing(db_path: Path) -> None:
    params = stdio_params("basic,burst")
    async with make_client(proxied(params, db_path, "burst"), mode="legacy") as client:
        await client.call_tool("burst", {"count": 3000, "kind": "log"})
    s = _session(db_path, "burst")
    frames = rdb.frames(db_path, s["id"])
    logs = [f for f in frames if f["method"] == "notifications/message"]
    assert len(logs) == 3000
    assert s["gap_count"] == 0 and s["frame_count"] == len(frames)
