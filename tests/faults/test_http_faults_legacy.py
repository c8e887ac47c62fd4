"""Fault injection on the legacy HTTP+SSE transport (``GET /sse`` + ``POST /messages``).

Answers of a legacy server ride its GET event stream, so an ``error``/``tool-error`` rule on a
call acknowledges the POST ``202 Accepted`` (as the server would) and puts the answer on the
session's GET stream; the server never sees the call. The reference for the answers is the SDK
test server's own failing tools (``protocol_error``: a JSON-RPC error; ``fail``: an ``isError``
result) — a server really answering that way, over the same transport.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import anyio
import pytest

from tests.faults.http_rig import Rig, call, rig, rules_toml

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def g(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig(tmp_path_factory.mktemp("fhttp-sse"), transport="sse") as r:
        yield r


def run(g: Rig, rule: str, **kw: object) -> tuple[tuple[object, ...], tuple[int, int, int]]:
    g.relay.set_rules(rules_toml(rule))
    mark = g.relay.mark()
    out = anyio.run(lambda: call(g.relay.url, mode="legacy", **kw))  # type: ignore[arg-type]
    g.relay.set_rules("")
    return out, mark


@pytest.mark.parametrize(
    ("rule", "tool", "code"),
    [
        ('error code=-32000 "message=deliberate protocol error" method=tools/call name=count',
         "protocol_error", "inject.error"),
        ('tool-error "text=Error executing tool fail: deliberate failure" method=tools/call'
         " name=count", "fail",
         "inject.tool_error"),
    ],
    ids=["error", "tool-error"],
)  # fmt: skip
def test_answer_on_the_get_stream(g: Rig, rule: str, tool: str, code: str) -> None:
    t = uuid.uuid4().hex[:12]
    relayed, mark = run(g, rule, tool="count", args={"tag": t})
    real = anyio.run(lambda: call(g.up.url, mode="legacy", tool=tool, args={}))
    assert relayed == real
    assert g.up.count(f"COUNT {t}") == 0  # the server never saw the call
    frames, findings, exchanges = g.relay.wait_recorded(mark, code)
    post = next(f for f in frames if f["method"] == "tools/call")
    (inj,) = [f for f in frames if f["channel"] == "inject"]
    get = next(e for e in exchanges if e["method"] == "GET")
    assert inj["http_exchange_id"] == get["id"] and inj["sse_event"] == "message"
    assert json.loads(inj["raw"])["id"] == json.loads(post["raw"])["id"]
    ex = next(e for e in exchanges if e["id"] == post["http_exchange_id"])
    assert ex["status"] == 202 and ex["meta"]["response_body"]["text"] == "Accepted"
    assert next(f for f in findings if f["code"] == code)["session_id"] == post["session_id"]


def test_corrupt_event_on_the_get_stream(g: Rig) -> None:
    """The SDK's legacy client cannot parse the answer and keeps waiting (as with a server
    that sends it broken); the recording has the server's answer and the broken one."""
    out, mark = run(g, "corrupt mode=invalid-json direction=s2c method=tools/call", within=1.5)
    assert out == ("timeout",)
    frames, _, _ = g.relay.wait_recorded(mark, "inject.corrupt")
    (inj,) = [f for f in frames if f["channel"] == "inject"]
    real = [f for f in frames if f["channel"] == "sse" and f["kind"] == "response"]
    assert inj["raw"] in [f["raw"].replace(b"{", b"{,", 1) for f in real]
    assert b'"id":2' in inj["raw"]  # the call's answer (1 was initialize)


def test_reset_the_get_stream(g: Rig) -> None:
    out, mark = run(g, "disconnect mode=reset direction=s2c method=tools/call")
    assert out == ("error", "MCPError", -32000, "Connection closed")
    _, _, exchanges = g.relay.wait_recorded(mark, "inject.disconnect")
    get = next(e for e in exchanges if e["method"] == "GET")
    assert get["outcome"] == "injected_reset"


def test_duplicate_event(g: Rig) -> None:
    out, mark = run(
        g, "duplicate direction=s2c method=tools/call"
    )  # the SDK ignores the second answer
    assert out == ("result", False, "héllo")
    frames, _, _ = g.relay.wait_recorded(mark, "inject.duplicate")
    assert len([f for f in frames if f["channel"] == "inject"]) == 1


def test_reorder_with_nothing_after_waits(g: Rig) -> None:
    """A held answer with no event after it on the GET stream goes out alone after ``wait``."""
    import time

    t0 = time.monotonic()
    out, mark = run(g, "reorder wait=400 direction=s2c method=tools/call")
    assert out == ("result", False, "héllo")
    assert time.monotonic() - t0 >= 0.4
    frames, _, _ = g.relay.wait_recorded(mark, "inject.reorder")
    (inj,) = [f for f in frames if f["channel"] == "inject"]
    assert inj["kind"] == "response" and b"h\xc3\xa9llo" in inj["raw"]
