"""Every fault kind on stdio, end to end: the SDK client through the real ``mcptape record``.

Each test makes the same call twice — through mcptape with a fault rule in front of the
well-behaved SDK test server, and directly against ``mcp_proxy.testing.faulty``, a server that
really misbehaves that way — and asserts the client saw the same thing (the same result, the
same ``MCPError``, the same timeout). Then it reads the recording: the frame the sender really
sent on its own channel, the bytes mcptape put on the wire on ``inject``, and the ``inject.*``
finding.

Speed: the faults that leave the connection usable share one relay (module-scoped, its rules
file rewritten per test — which is the "re-read when it changes" feature at work) and one
direct connection; only the faults that end a connection get their own.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mcp_proxy.testing.client import stdio_params
from mcp_proxy.testing.faulty import LiveClient, faulty_params, outcome
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 0.6  # the client's read timeout where a fault means "no answer"
PRESETS = "basic,slow,failing,crash"


def through_mcptape(
    params: StdioServerParameters, db: Path, name: str, *fault_args: str
) -> StdioServerParameters:
    """``params`` launched through ``mcptape record --db DB --name NAME <fault args> -- …``."""
    cmd = mcptape_cmd()
    args = [*cmd[1:], "record", "--db", str(db), "--name", name, *fault_args, "--"]
    return params.model_copy(
        update={"command": cmd[0], "args": [*args, params.command, *params.args]}
    )


def toml(*rules: dict[str, Any]) -> str:
    out = []
    for rule in rules:
        out.append("[[fault]]")
        out += [f"{k} = {json.dumps(v)}" for k, v in rule.items()]
    return "\n".join(out) + "\n"


class Rig:
    """The shared relay (rules from a file), the direct connection, and the recording."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "faults.sqlite"
        self.rules = tmp / "faults.toml"
        self.rules.write_text("")
        params = through_mcptape(
            stdio_params(PRESETS), self.db, "shared", "--faults", str(self.rules)
        )
        self.proxy = LiveClient(params)
        self.direct = LiveClient(faulty_params())
        self.baseline: dict[str, int] = {}

    def set_rules(self, *rules: dict[str, Any]) -> None:
        """New rules; the relay picks them up at the next message (re-read at most every
        0.25 s), and this first message is a ``ping`` no rule here matches."""
        self.rules.write_text(toml(*rules))
        time.sleep(0.3)
        self.proxy.run(lambda c: c.send_ping())
        time.sleep(0.1)  # what earlier tests caused is written by now (counted by `recorded`)
        self.baseline = (
            {
                str(r["code"]): int(r["n"])
                for r in rdb.rows(self.db, "SELECT code, COUNT(*) AS n FROM findings GROUP BY code")
            }
            if self.db.exists()
            else {}
        )

    def session_id(self) -> str:
        rows = [s for s in rdb.sessions(self.db) if s["name"] == "shared"]
        assert len(rows) == 1
        return str(rows[0]["id"])


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    r = Rig(tmp_path_factory.mktemp("faults"))
    # Start both connections side by side (each is a few seconds of interpreter start-up).
    opener = threading.Thread(target=r.direct.__enter__)
    opener.start()
    with r.proxy:
        opener.join(90)
        try:
            yield r
        finally:
            r.direct.__exit__(None, None, None)


def call(client: LiveClient, name: str, args: dict[str, Any], timeout: float = 10.0) -> Any:
    return client.run(lambda c: outcome(c.call_tool(name, args, read_timeout_seconds=timeout)))


def timed(client: LiveClient, name: str, args: dict[str, Any]) -> tuple[Any, float]:
    began = time.monotonic()
    result = call(client, name, args)
    return result, time.monotonic() - began


def recorded(rig: Rig, code: str) -> tuple[list[dict], list[dict]]:
    """The session's frames and its ``code`` findings, once this test's one is written."""
    found: list[dict] = []
    db, sid, count = rig.db, rig.session_id(), rig.baseline.get(code, 0) + 1

    def ready() -> bool:
        found[:] = rdb.rows(
            db, "SELECT * FROM findings WHERE session_id = ? AND code = ?", sid, code
        )
        return len(found) >= count

    assert rdb.wait_until(ready, timeout=15), f"no {code} finding recorded"
    time.sleep(0.2)  # the frames handed over with it
    return rdb.frames(db, sid), found


def by_id(frames: list[dict], msg_id: Any, *, channel: str, direction: str) -> list[dict]:
    return [
        f
        for f in frames
        if f["channel"] == channel and f["direction"] == direction and f["msg_id"] == str(msg_id)
    ]


def last_call_id(frames: list[dict], tool: str) -> Any:
    calls = [
        json.loads(f["raw"])
        for f in frames
        if f["channel"] == "stdio" and f["method"] == "tools/call" and f["direction"] == "c2s"
    ]
    ids = [c["id"] for c in calls if c["params"]["name"] == tool]
    assert ids, f"no recorded call of {tool}"
    return ids[-1]


# ------------------------------------------------------------------ connection survives


def test_delay_holds_the_answer_like_a_slow_server(rig: Rig) -> None:
    rig.set_rules({"action": "delay", "ms": 400, "direction": "s2c", "name": "echo"})
    through, took = timed(rig.proxy, "echo", {"text": "hello"})
    direct, direct_took = timed(rig.direct, "misbehave", {"kind": "late", "ms": 400})
    assert through == direct == ("result", False, "hello")
    assert took >= 0.4 and direct_took >= 0.4
    frames, findings = recorded(rig, "inject.delay")
    detail = json.loads(findings[-1]["detail"])
    assert detail["direction"] == "s2c" and 399 <= detail["delay_ms"] <= 401
    assert findings[-1]["severity"] == "info"
    rid = last_call_id(frames, "echo")
    assert by_id(frames, rid, channel="stdio", direction="s2c")  # the server's answer, recorded


def test_throttle_slows_the_bytes_not_the_content(rig: Rig) -> None:
    text = "x" * 1000
    rig.set_rules({"action": "throttle", "bps": 4000, "direction": "s2c", "name": "echo"})
    through, took = timed(rig.proxy, "echo", {"text": text})
    direct = call(rig.direct, "echo", {"text": text})
    assert through == direct == ("result", False, text)
    assert took >= 0.45  # ≥ 2000 bytes (text + structured copy) at 4000 B/s
    _, findings = recorded(rig, "inject.throttle")
    assert json.loads(findings[-1]["detail"])["bps"] == 4000


def test_drop_request_is_a_server_that_never_answers(rig: Rig) -> None:
    rig.set_rules({"action": "drop", "direction": "c2s", "method": "tools/call", "name": "echo"})
    through = call(rig.proxy, "echo", {"text": "lost"}, TIMEOUT)
    direct = call(rig.direct, "misbehave", {"kind": "silent"}, TIMEOUT)
    assert through == direct
    assert through[:3] == ("raised", "MCPError", -32001)  # "timed out"
    frames, _ = recorded(rig, "inject.drop")
    rid = last_call_id(frames, "echo")
    assert by_id(frames, rid, channel="stdio", direction="c2s")  # the host sent it
    assert not by_id(frames, rid, channel="stdio", direction="s2c")  # the server never saw it


def test_drop_response_is_recorded_but_never_delivered(rig: Rig) -> None:
    rig.set_rules({"action": "drop", "direction": "s2c", "name": "echo"})
    through = call(rig.proxy, "echo", {"text": "answered, not delivered"}, TIMEOUT)
    direct = call(rig.direct, "misbehave", {"kind": "silent"}, TIMEOUT)
    assert through == direct
    frames, _ = recorded(rig, "inject.drop")
    rid = last_call_id(frames, "echo")
    sent = by_id(frames, rid, channel="stdio", direction="s2c")
    assert len(sent) == 1 and b"answered, not delivered" in sent[0]["raw"]
    assert not by_id(frames, rid, channel="inject", direction="s2c")


def test_error_answers_the_request_in_the_servers_place(rig: Rig) -> None:
    rig.set_rules(
        {"action": "error", "code": -32001, "message": "down", "direction": "c2s", "name": "echo"}
    )
    through = call(rig.proxy, "echo", {"text": "x"})
    direct = call(rig.direct, "protocol_error", {"code": -32001, "message": "down"})
    assert through == direct == ("raised", "MCPError", -32001, "down")
    frames, _ = recorded(rig, "inject.error")
    rid = last_call_id(frames, "echo")
    injected = by_id(frames, rid, channel="inject", direction="s2c")
    assert len(injected) == 1 and injected[0]["kind"] == "error"
    assert not by_id(frames, rid, channel="stdio", direction="s2c")  # the server was spared


def test_a_jsonpath_test_on_the_body_picks_the_message(rig: Rig) -> None:
    """``path=``: the rule fires only on a message where the JSONPath finds a node — one
    matching language for faults and intercepts (``--intercept 'path=…'`` alike)."""
    rig.set_rules(
        {
            "action": "error",
            "code": -32003,
            "message": "not that one",
            "direction": "c2s",
            "path": "$[?@.arguments.text == 'secret']",
        }
    )
    assert call(rig.proxy, "echo", {"text": "public"})[0] == "result"
    through = call(rig.proxy, "echo", {"text": "secret"})
    assert through == ("raised", "MCPError", -32003, "not that one")
    frames, _ = recorded(rig, "inject.error")
    rid = last_call_id(frames, "echo")
    assert by_id(frames, rid, channel="inject", direction="s2c")
    assert not by_id(frames, rid, channel="stdio", direction="s2c")  # the server was spared


def test_error_replaces_the_servers_response(rig: Rig) -> None:
    rig.set_rules(
        {"action": "error", "code": -32002, "message": "gone", "direction": "s2c", "name": "add"}
    )
    through = call(rig.proxy, "add", {"a": 1, "b": 2})
    direct = call(rig.direct, "protocol_error", {"code": -32002, "message": "gone"})
    assert through == direct == ("raised", "MCPError", -32002, "gone")
    frames, _ = recorded(rig, "inject.error")
    rid = last_call_id(frames, "add")
    real = by_id(frames, rid, channel="stdio", direction="s2c")
    fake = by_id(frames, rid, channel="inject", direction="s2c")
    assert real[0]["kind"] == "response" and fake[0]["kind"] == "error"


def test_tool_error_is_an_is_error_result(rig: Rig) -> None:
    text = "Error executing tool fail: boom"
    rig.set_rules({"action": "tool-error", "text": text, "direction": "s2c", "name": "echo"})
    through = call(rig.proxy, "echo", {"text": "fine"})
    direct = call(rig.direct, "fail", {"message": "boom"})
    assert through == direct == ("result", True, text)
    frames, _ = recorded(rig, "inject.tool_error")
    rid = last_call_id(frames, "echo")
    assert json.loads(by_id(frames, rid, channel="inject", direction="s2c")[0]["raw"])["result"][
        "isError"
    ]


@pytest.mark.parametrize("mode", ["truncate", "invalid-json"])
def test_corrupt_response_is_unreadable_like_a_broken_server(rig: Rig, mode: str) -> None:
    rig.set_rules({"action": "corrupt", "mode": mode, "direction": "s2c", "name": "echo"})
    through = call(rig.proxy, "echo", {"text": "hello"}, TIMEOUT)
    direct = call(rig.direct, "misbehave", {"kind": mode}, TIMEOUT)
    assert through == direct
    assert through[:3] == ("raised", "MCPError", -32001)
    # and the connection goes on, for both
    assert call(rig.proxy, "add", {"a": 1, "b": 1}) == call(rig.direct, "add", {"a": 1, "b": 1})
    frames, _ = recorded(rig, "inject.corrupt")
    rid = last_call_id(frames, "echo")
    real = by_id(frames, rid, channel="stdio", direction="s2c")
    assert real and real[0]["kind"] == "response"
    fake = [f for f in frames if f["channel"] == "inject" and f["raw"] != real[0]["raw"]]
    assert fake and fake[-1]["kind"] in ("noise", "undecodable", "invalid")


def test_duplicate_response_is_harmless_like_a_server_answering_twice(rig: Rig) -> None:
    rig.set_rules({"action": "duplicate", "direction": "s2c", "name": "echo"})
    through = call(rig.proxy, "echo", {"text": "hello"})
    direct = call(rig.direct, "misbehave", {"kind": "duplicate"})
    assert through == direct == ("result", False, "hello")
    assert call(rig.proxy, "add", {"a": 2, "b": 2}) == call(rig.direct, "add", {"a": 2, "b": 2})
    frames, _ = recorded(rig, "inject.duplicate")
    rid = last_call_id(frames, "echo")
    real = by_id(frames, rid, channel="stdio", direction="s2c")
    copy = by_id(frames, rid, channel="inject", direction="s2c")
    assert len(real) == 1 and len(copy) == 1 and copy[0]["raw"] == real[0]["raw"]


def test_reorder_swaps_two_answers(rig: Rig) -> None:
    rig.set_rules({"action": "reorder", "direction": "s2c", "name": "echo", "times": 1})

    async def two(client: Client) -> list[Any]:
        first = outcome(client.call_tool("echo", {"text": "first"}))
        await asyncio.sleep(0.05)
        second = outcome(client.call_tool("add", {"a": 1, "b": 1}))
        return list(await asyncio.gather(first, second))

    through = rig.proxy.run(two)

    async def two_direct(client: Client) -> list[Any]:
        first = outcome(client.call_tool("misbehave", {"kind": "late", "ms": 300, "text": "first"}))
        await asyncio.sleep(0.05)
        second = outcome(client.call_tool("add", {"a": 1, "b": 1}))
        return list(await asyncio.gather(first, second))

    assert through == rig.direct.run(two_direct)
    frames, _ = recorded(rig, "inject.reorder")
    rid = last_call_id(frames, "echo")
    late = by_id(frames, rid, channel="inject", direction="s2c")
    add_id = last_call_id(frames, "add")
    other = by_id(frames, add_id, channel="stdio", direction="s2c")
    assert len(late) == 1 and other and late[0]["mono_ns"] > other[0]["mono_ns"]


def test_no_rule_no_finding_and_the_relay_stays_exact(rig: Rig) -> None:
    rig.set_rules()
    before = len(rdb.rows(rig.db, "SELECT id FROM findings WHERE code LIKE 'inject.%'"))
    text = f"plain-{time.monotonic_ns()}"
    assert call(rig.proxy, "echo", {"text": text}) == ("result", False, text)

    def answer_recorded() -> bool:
        frames = rdb.frames(rig.db, rig.session_id())
        return any(f["direction"] == "s2c" and text.encode() in bytes(f["raw"]) for f in frames)

    # Once the answer is recorded, so would an inject finding be (one batch).
    assert rdb.wait_until(answer_recorded), "the answer was never recorded"
    after = len(rdb.rows(rig.db, "SELECT id FROM findings WHERE code LIKE 'inject.%'"))
    assert after == before


def test_check_reports_the_hosts_reaction_or_ignores_the_faults(rig: Rig) -> None:
    rig.set_rules({"action": "drop", "direction": "c2s", "name": "lookup"})
    call(rig.proxy, "lookup", {"key": "a"}, TIMEOUT)  # the SDK cancels a timed-out request
    call(rig.proxy, "echo", {"text": "next"})
    recorded(rig, "inject.drop")

    def check(*args: str) -> list[dict[str, Any]]:
        done = run_mcptape(  # in-process through the real entry point
            "check", "shared", "--db", str(rig.db), "--format", "json", "--fail-on", "never", *args
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)[0]["findings"]

    reported = check()
    lookup = [f for f in reported if f["code"] == "inject.reaction" and "lookup" in f["title"]]
    assert lookup and "cancelled the request" in lookup[-1]["title"], lookup
    assert any(f["code"] == "inject.drop" for f in reported)
    ignored = check("--injected", "ignore")
    assert not [f for f in ignored if f["code"].startswith("inject.")]
    frames = rdb.frames(rig.db, rig.session_id())
    rid = last_call_id(frames, "lookup")
    touched = {f["seq"] for f in frames if f["msg_id"] == str(rid) or f["channel"] == "inject"}
    for f in ignored:
        assert not f["frame_seqs"] or not set(f["frame_seqs"]) <= touched, f
