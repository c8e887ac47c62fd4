"""Every preset works directly (no proxy) with a real SDK client, in both protocol eras.

The same assertions run over stdio, Streamable HTTP (stateful, stateless, JSON-response) and
legacy HTTP+SSE; the misbehaving presets are checked byte for byte with a raw stdio peer,
because the SDK client hides or chokes on exactly those bytes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    ProgressRecorder,
    make_client,
    run_scripted_session,
    stdio_params,
    tool_text,
)
from mcp_proxy.testing.presets import (
    BAD_UTF8_JSON,
    BAD_UTF8_RAW,
    HUGE_PATTERN,
    PRESETS,
    README_TEXT,
    parse_preset_names,
)
from mcp_proxy.testing.process import ServerStartError, server_argv, start_http_server
from mcp_proxy.testing.server import build_server
from tests.conftest import matrix
from tests.testing.conftest import HTTP_PRESETS, RawStdio

MODES = ["legacy", "auto"]
VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}
ROOT = "file:///tmp/mcptape-root"


def expected_script(mode: str, *, notifications: bool = True) -> dict[str, Any]:
    """What :func:`run_scripted_session` must return against a server with all presets."""
    steps = [[float(k), 3.0, f"step {k}/3"] for k in (1, 2, 3)]
    return {
        "protocol_version": VERSION[mode],
        "server_name": "mcptape-test",
        "echo": "hello, wire",
        "add": {"result": 5.0},
        "resources": ["test://readme"],
        "resource_templates": ["test://items/{item_id}"],
        "readme": README_TEXT,
        "item": {"id": "42", "name": "item 42"},
        "prompts": ["greet"],
        "greet": ["Please greet Ada warmly."],
        "slow": "done after 3 steps",
        "progress": steps if notifications else [],
        "fail": {"is_error": True, "text": "Error executing tool fail: scripted failure"},
        "log": "logged at warning",
        "logs": (
            ["slow: step 1/3", "slow: step 2/3", "slow: step 3/3", "scripted log"]
            if notifications
            else []
        ),
    }


def check_script(out: dict[str, Any], mode: str, *, notifications: bool = True) -> None:
    tools = out.pop("tools")
    assert {"echo", "add", "lookup", "slow", "hang", "log", "fail", "protocol_error"} <= set(tools)
    assert out == expected_script(mode, notifications=notifications)


async def check_interactive(client: Client, rec: CallbackRecorder, mode: str) -> None:
    """Sampling, roots, elicitation and the MRTR tools, on a connection with a back-channel."""

    async def call(name: str, args: dict[str, Any] | None = None) -> tuple[bool, str]:
        result = await client.call_tool(name, args or {})
        return result.is_error, tool_text(result)

    both_eras = {
        "confirm": (False, "ship: accept: Ada"),
        "interview": (False, f"accept: Ada | sampled: sampled reply | roots: {ROOT}"),
    }
    assert await call("confirm", {"action": "ship"}) == both_eras["confirm"]
    assert await call("interview", {"topic": "tapes"}) == both_eras["interview"]
    if mode == "legacy":
        assert await call("sample", {"prompt": "hi"}) == (False, "sampled reply")
        assert await call("roots") == (False, ROOT)
        assert await call("ask", {"question": "Name?"}) == (False, "accept: Ada")
        assert await call("countdown", {"rounds": 3}) == (
            False,
            "liftoff after 0 of 3 rounds (initialize era: no MRTR)",
        )
        assert (len(rec.sampling_requests), len(rec.elicitation_requests)) == (2, 3)
        assert rec.roots_requests == 2
    else:
        for name in ("sample", "roots", "ask"):
            is_error, text = await call(name)
            assert is_error and "back-channel" in text
        assert await call("countdown", {"rounds": 3}) == (False, "liftoff after 3 rounds")
        assert (len(rec.sampling_requests), len(rec.elicitation_requests)) == (1, 2)
        assert rec.roots_requests == 1
    assert rec.elicitation_requests[0].message == "Really ship?"
    prompts = [r.messages[0].content.text for r in rec.sampling_requests]  # type: ignore[union-attr]
    assert "Summarise tapes" in prompts


async def check_burst_and_huge(client: Client, rec: CallbackRecorder, mib: float) -> None:
    rec.logs.clear()
    progress = ProgressRecorder()
    burst = await client.call_tool(
        "burst", {"count": 300, "kind": "both"}, progress_callback=progress
    )
    assert tool_text(burst) == "sent 300 both notification(s)"
    assert rec.log_data() == list(range(1, 301))
    assert [p[0] for p in progress.updates] == [float(k) for k in range(1, 301)]

    huge = tool_text(await client.call_tool("huge", {"mib": mib}))
    size = int(mib * 1024 * 1024)
    assert len(huge) == size
    assert huge == (HUGE_PATTERN * (size // len(HUGE_PATTERN) + 1))[:size]


# ---------------------------------------------------------------------------------------------
# stdio


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_every_preset_but_crash(mode: str) -> None:
    # "replace": with the default "strict" the SDK client's reader dies on the badutf8 line
    # and every later call hangs.
    params = stdio_params(HTTP_PRESETS + ",noise,badutf8", encoding_error_handler="replace")
    rec = CallbackRecorder()
    async with make_client(params, mode=mode, recorder=rec) as client:
        assert client.protocol_version == VERSION[mode]
        check_script(await run_scripted_session(client, rec), mode)
        await check_interactive(client, rec, mode)
        await check_burst_and_huge(client, rec, mib=2)
        lookup = await client.call_tool("lookup", {"region": "eu-west", "query": "q"})
        assert tool_text(lookup) == "q@eu-west"
        failed = None
        try:
            await client.call_tool("protocol_error", {"code": -32042, "message": "nope"})
        except MCPError as exc:
            failed = exc
        assert failed is not None and failed.error.code == -32042
        # A cancelled call (notifications/cancelled, or closing the POST on 2026) leaves the
        # server healthy.
        with anyio.move_on_after(0.3) as scope:
            await client.call_tool("hang", {"seconds": 30})
        assert scope.cancelled_caught
        # The SDK client logs and skips the stray lines; the connection carries on.
        noise = await client.call_tool("noise", {"count": 3})
        assert tool_text(noise) == "wrote 3 noise line(s)"
        await client.call_tool("badutf8", {"kind": "raw"})
        await client.call_tool("badutf8", {"kind": "json"})
        assert tool_text(await client.call_tool("echo", {"text": "after"})) == "after"


@pytest.mark.parametrize("mode", MODES)
async def test_scripted_presets_alone_satisfy_the_script_in_process(mode: str) -> None:
    """``SCRIPTED_PRESETS`` is all a proxy test has to start for the scripted session."""
    rec = CallbackRecorder()
    server = build_server(SCRIPTED_PRESETS)
    async with make_client(server, mode=mode, recorder=rec) as client:
        out = await run_scripted_session(client, rec)
    if mode == "auto":  # in-process "auto" dispatches directly at the newest version
        assert out["protocol_version"] == VERSION["auto"]
    check_script(out, mode)


async def test_tool_schemas_carry_defaults_and_the_header_annotation() -> None:
    server = build_server("all,huge,burst,noise,badutf8,crash")
    async with Client(server, mode="auto") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) >= {"huge", "burst", "noise", "stderr_noise", "badutf8", "crash", "confirm"}
    assert tools["huge"].input_schema["properties"]["mib"]["default"] == 20.0
    assert tools["huge"].output_schema is None  # no structured copy doubling 20 MiB
    assert tools["burst"].input_schema["properties"]["count"]["default"] == 5000
    assert tools["lookup"].input_schema["properties"]["region"]["x-mcp-header"] == "Region"


# ---------------------------------------------------------------------------------------------
# HTTP


@pytest.mark.parametrize("mode", MODES)
async def test_streamable_http(mode: str, http_servers: dict[str, str]) -> None:
    url = http_servers["http"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        check_script(await run_scripted_session(client, rec), mode)
        await check_interactive(client, rec, mode)
        # The SDK client caps one SSE event at 1 MiB; stay below it.
        await check_burst_and_huge(client, rec, mib=0.5)
        lookup = await client.call_tool("lookup", {"region": "ünïcode", "query": "q"})
        assert tool_text(lookup) == "q@ünïcode"  # Mcp-Param-Region as =?base64?…?= on 2026


# Both eras run over stdio and Streamable HTTP above; legacy HTTP+SSE (a 2025 transport) keeps
# its 2025-11-25 cell in the default run, its 2026-07-28 cell under --full.
@pytest.mark.parametrize("mode", matrix(MODES, keep={"legacy"}))
async def test_legacy_sse(mode: str, http_servers: dict[str, str]) -> None:
    url = http_servers["sse"]
    assert url.endswith("/sse")
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        check_script(await run_scripted_session(client, rec), mode)
        await check_interactive(client, rec, mode)
        await check_burst_and_huge(client, rec, mib=0.5)


@pytest.mark.parametrize("mode", MODES)
async def test_stateless_http(mode: str, http_servers: dict[str, str]) -> None:
    url = http_servers["stateless"]
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        check_script(await run_scripted_session(client, rec), mode)
        confirm = tool_text(await client.call_tool("confirm", {"action": "ship"}))
        sample = await client.call_tool("sample", {"prompt": "hi"})
    # No back-channel without a session: MRTR carries it on 2026, nothing does before.
    assert sample.is_error and "back-channel" in tool_text(sample)
    if mode == "auto":
        assert confirm == "ship: accept: Ada"
    else:
        assert "back-channel" in confirm


@pytest.mark.parametrize("mode", MODES)
async def test_json_response_http(mode: str, http_servers: dict[str, str]) -> None:
    """Plain JSON replies have nowhere to put notifications: progress and logs are dropped."""
    url = http_servers["json"]
    rec = CallbackRecorder()
    async with make_client(url, mode=mode, recorder=rec) as client:
        check_script(await run_scripted_session(client, rec), mode, notifications=False)
        if mode == "auto":
            confirm = await client.call_tool("confirm", {"action": "ship"})
            assert tool_text(confirm) == "ship: accept: Ada"


# ---------------------------------------------------------------------------------------------
# misbehaviour, byte for byte


async def test_stdout_noise_and_bad_utf8_reach_the_wire_exactly() -> None:
    raw = await RawStdio.start(
        "basic,noise,badutf8", startup_noise="stray startup text", log_level="WARNING"
    )
    try:
        assert await raw.line() == b"stray startup text\n"  # before any request
        await raw.initialize()

        rid = await raw.request(
            "tools/call", {"name": "noise", "arguments": {"text": "junk, not JSON", "count": 2}}
        )
        lines = await raw.lines_until_response(rid)
        assert lines[:2] == [b"junk, not JSON\n", b"junk, not JSON\n"] and len(lines) == 3

        for kind, expected in (("raw", BAD_UTF8_RAW), ("json", BAD_UTF8_JSON)):
            rid = await raw.request("tools/call", {"name": "badutf8", "arguments": {"kind": kind}})
            lines = await raw.lines_until_response(rid)
            assert lines[0] == expected and len(lines) == 2
            with pytest.raises(UnicodeDecodeError):
                lines[0].decode("utf-8")

        rid = await raw.request(
            "tools/call", {"name": "stderr_noise", "arguments": {"text": "to stderr", "count": 3}}
        )
        lines = await raw.lines_until_response(rid)
        assert len(lines) == 1  # nothing extra on stdout

        rid = await raw.request("tools/call", {"name": "echo", "arguments": {"text": "still ok"}})
        (reply,) = await raw.lines_until_response(rid)
        assert json.loads(reply)["result"]["content"][0]["text"] == "still ok"
    finally:
        code = await raw.close()
    assert code == 0
    assert (await raw.stderr_text()).count("to stderr\n") == 3


async def test_crash_exits_mid_call_after_notifications() -> None:
    raw = await RawStdio.start("crash")
    try:
        await raw.initialize()
        rid = await raw.request(
            "tools/call",
            {"name": "crash", "arguments": {"code": 3}, "_meta": {"progressToken": "p1"}},
        )
        seen: list[dict[str, Any]] = []
        while line := await raw.line():
            seen.append(json.loads(line))
    finally:
        code = await raw.close()
    assert code == 3
    assert [m.get("method") for m in seen] == ["notifications/progress", "notifications/message"]
    assert all(m.get("id") != rid for m in seen)


# A server that dies mid-call closes the connection whatever the era: both stdio cells under
# --full; the default run keeps a 2026-07-28 client over HTTP
# (test_crash_over_http_ends_the_server_process) and an SDK client seeing the crash through
# the stdio relay (tests/faults/test_stdio_disconnect.py test_kill_is_a_server_crashing_mid_call).
@pytest.mark.parametrize("mode", matrix(MODES, keep=set()))
async def test_crash_seen_by_an_sdk_client(mode: str) -> None:
    failures: list[BaseException] = []
    try:
        async with make_client(stdio_params("crash"), mode=mode) as client:
            with anyio.fail_after(15):
                await client.call_tool("crash", {})
    except BaseException as exc:  # the call fails, then the session's task group re-raises
        failures.append(exc)
    assert failures, "the call must not succeed"
    assert "Connection closed" in repr(failures[0])


def test_crash_over_http_ends_the_server_process() -> None:
    async def call(url: str) -> None:
        async with make_client(url, mode="auto") as client:
            await client.call_tool("crash", {"code": 7})

    with start_http_server("crash", "http") as (url, proc):
        with pytest.raises(BaseException, match=r"stream ended|Connection closed|unhandled"):
            anyio.run(call, url)
        assert proc.wait(10) == 7


# ---------------------------------------------------------------------------------------------
# composition, CLI and harness


def test_parse_preset_names() -> None:
    assert parse_preset_names("basic, slow,basic") == ["basic", "slow"]
    assert parse_preset_names(["basic", "crash,huge"]) == ["basic", "crash", "huge"]
    assert parse_preset_names("all") == [
        "basic",
        "slow",
        "failing",
        "sampling",
        "elicitation",
        "mrtr",
    ]
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        parse_preset_names("basic,nope")
    assert set(PRESETS) == {
        "basic",
        "slow",
        "failing",
        "sampling",
        "elicitation",
        "mrtr",
        "noise",
        "badutf8",
        "crash",
        "huge",
        "burst",
        "tasks",
        "tasks-failed",
        "tasks-cancelled",
        "tasks-input",
        "extension-strict",
    }


def test_every_preset_composes_into_one_server() -> None:
    server = build_server(list(PRESETS), name="everything")
    assert server.name == "everything"


def test_unknown_preset_is_a_clean_error(python: str) -> None:
    argv = server_argv("basic,nope", "stdio", python=python)
    proc = subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert b"unknown preset 'nope'" in proc.stderr and b"Traceback" not in proc.stderr
    with pytest.raises(ServerStartError, match="exited with 2"):
        with start_http_server("nope"):
            pass


async def test_mrtr_request_state_survives_a_restart_with_a_fixed_key() -> None:
    """``--state-key`` lets a recorded requestState be answered by a new server process."""
    key = "k" * 40
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }
    call = {"name": "confirm", "arguments": {"action": "ship"}, "_meta": meta}
    # Two processes sharing nothing but the key, started together to save time: the first
    # answers input_required, the second (which never saw the first round) completes it.
    first, second = await asyncio.gather(
        RawStdio.start("mrtr", state_key=key), RawStdio.start("mrtr", state_key=key)
    )
    try:
        rid = await first.request("tools/call", call)
        (reply,) = await first.lines_until_response(rid)
        result = json.loads(reply)["result"]
        assert result["resultType"] == "input_required"
        assert set(result["inputRequests"]) == {"confirm"}
        assert result["requestState"].startswith("v1.")  # sealed by the SDK: opaque on the wire

        retry = {
            **call,
            "requestState": result["requestState"],
            "inputResponses": {"confirm": {"action": "accept", "content": {"answer": "yes"}}},
        }
        rid = await second.request("tools/call", retry)
        (reply,) = await second.lines_until_response(rid)
    finally:
        await asyncio.gather(first.close(), second.close())
    final = json.loads(reply)["result"]
    assert final["resultType"] == "complete"
    assert final["content"][0]["text"] == "ship: accept: yes"
