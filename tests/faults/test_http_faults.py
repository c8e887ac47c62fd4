"""Fault injection in the HTTP relay, end to end with the official SDK client.

Each test calls a tool twice: through the relay with a fault rule against a well-behaved SDK
server, and directly against :class:`~mcp_proxy.testing.misbehave_http.MisbehavingServer`
that really fails that way. The client must observe the same thing both times (same result, or
same exception type, code and message). Then the recording is read: the message the peer
really sent on its usual channel, what mcptape put on the wire instead on the ``inject``
channel, and the ``inject.*`` finding.

One SDK server, one misbehaving server and one relay serve the whole module (the relay re-reads
its rules file, so each test writes its own rules). ``legacy`` is the initialize era (the
stateful SDK server answers calls with an event stream); ``auto`` settles on 2026-07-28
(JSON bodies).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.faults.http_rig import Rig, both, call, rig, rules_toml
from tests.helpers.cli import run_mcptape

pytestmark = pytest.mark.timeout(120)

MODES = ["legacy", "auto"]


@pytest.fixture(scope="module")
def g(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig(tmp_path_factory.mktemp("fhttp")) as r:
        yield r


def the_call(frames: list[dict[str, Any]], marker: str = "") -> dict[str, Any]:
    """The test's ``tools/call`` frame (the one carrying ``marker``, when given)."""
    return next(
        f
        for f in frames
        if f["direction"] == "c2s"
        and f["method"] == "tools/call"
        and f["channel"] != "inject"
        and marker.encode() in f["raw"]
    )


def injected(frames: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["channel"] == "inject" and f["direction"] == direction]


def finding(findings: list[dict[str, Any]], code: str) -> dict[str, Any]:
    found = [f for f in findings if f["code"] == code]
    assert len(found) == 1, findings
    f = found[0]
    assert f["severity"] == "info" and f["source"] == "recorder"
    return f


def tag() -> str:
    return uuid.uuid4().hex[:12]


# ----------------------------------------------------------------------------- in the server's place
ANSWERS = [
    ("error", "error method=tools/call code=-32001 message=boom", "error",
     {"code": "-32001", "message": "boom"}, "inject.error"),
    ("tool-error", "tool-error method=tools/call text=nope", "tool-error", {"text": "nope"},
     "inject.tool_error"),
    ("429", 'http status=429 "header=Retry-After: 7" method=tools/call', "status",
     {"status": "429", "header": "Retry-After: 7"}, "inject.http"),
    ("401", 'http status=401 "header=WWW-Authenticate: Bearer realm=\\"mcp\\"" method=tools/call',
     "status", {"status": "401", "header": 'WWW-Authenticate: Bearer realm="mcp"'}, "inject.http"),
    ("404", "http status=404 method=tools/call", "status", {"status": "404"}, "inject.http"),
    ("503", "http status=503 method=tools/call", "status", {"status": "503"}, "inject.http"),
]  # fmt: skip


#: Both eras where the client's reaction differs by era; one era for plain statuses.
ANSWER_CASES = [
    (mode, *a)
    for a in ANSWERS
    for mode in MODES
    if a[0] in ("error", "tool-error", "404") or (a[0] in ("429", "503")) == (mode == "legacy")
]


@pytest.mark.parametrize(
    ("mode", "name", "rule", "behaviour", "params", "code"),
    ANSWER_CASES,
    ids=[f"{c[1]}-{c[0]}" for c in ANSWER_CASES],
)
def test_answer_in_the_servers_place(
    g: Rig, mode: str, name: str, rule: str, behaviour: str, params: dict[str, str], code: str
) -> None:
    """error / tool-error / HTTP status: the host gets exactly what a failing server sends;
    the server never sees the call."""
    t = tag()
    relayed, direct, mark = both(
        g, rule, behaviour, params, mode=mode, tool="count", args={"tag": t}
    )
    assert relayed == direct
    assert relayed[0] == ("result" if behaviour == "tool-error" else "error")
    assert g.up.count(f"COUNT {t}") == 0  # neither server ran the tool
    frames, findings, exchanges = g.relay.wait_recorded(mark, code)
    call_frame = the_call(frames, t)  # what the host really sent, on its usual channel
    assert call_frame["channel"] == "http" and t.encode() in call_frame["raw"]
    ex = next(e for e in exchanges if e["id"] == call_frame["http_exchange_id"])
    assert ex["meta"]["injected"][0]["rule"].split()[0] == rule.split()[0]
    f = finding(findings, code)
    assert f["session_id"] == call_frame["session_id"]
    assert json.loads(f["detail"])["direction"] == "c2s"
    headers = {k.lower(): v for k, v in ex["response_headers"]}
    if behaviour == "status":
        assert ex["status"] == int(params["status"])
        for line in [params["header"]] if "header" in params else []:
            name, _, value = line.partition(":")
            assert headers[name.lower()] == value.strip()
        assert not injected(frames, "s2c")  # no body: nothing put on the wire but the head
    else:
        assert ex["status"] == 200
        (inj,) = injected(frames, "s2c")
        msg = json.loads(inj["raw"])
        assert msg["id"] == json.loads(call_frame["raw"])["id"]
        assert inj["http_exchange_id"] == ex["id"]


# ----------------------------------------------------------------------------- corrupt
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["truncate", "cut-utf8", "invalid-json"])
def test_corrupt_response(g: Rig, mode: str, how: str) -> None:
    """A JSON body (2026-07-28) or an SSE event (initialize era) broken on its way to the host:
    the SDK fails to parse it exactly as it fails on a server that sends it broken."""
    rule = f"corrupt mode={how} direction=s2c method=tools/call"
    relayed, direct, mark = both(g, rule, "corrupt", {"mode": how}, mode=mode)
    assert relayed == direct
    assert relayed[:3] == ("error", "MCPError", -32700)
    frames, findings, _ = g.relay.wait_recorded(mark, "inject.corrupt")
    call_id = json.loads(the_call(frames)["raw"])["id"]
    real = [f for f in frames if f["direction"] == "s2c" and f["msg_id"] == str(call_id)]
    assert real and real[0]["channel"] == ("sse" if mode == "legacy" else "http")
    assert json.loads(real[0]["raw"])["result"]  # the server's answer, intact
    (inj,) = injected(frames, "s2c")
    assert inj["raw"] != real[0]["raw"]
    with pytest.raises(ValueError):
        json.loads(inj["raw"])
    finding(findings, "inject.corrupt")


def test_corrupt_request(g: Rig) -> None:
    """The server gets the broken request and answers as it answers any broken request."""
    t = tag()
    g.relay.set_rules(rules_toml("corrupt mode=invalid-json direction=c2s method=tools/call"))
    mark = g.relay.mark()
    out = anyio.run(lambda: call(g.relay.url, mode="auto", tool="count", args={"tag": t}))
    g.relay.set_rules("")
    assert out[0] == "error" and out[2] == -32700  # the SDK server's parse error
    assert g.up.count(f"COUNT {t}") == 0
    frames, _findings, exchanges = g.relay.wait_recorded(mark, "inject.corrupt")
    real = the_call(frames, t)
    (inj,) = injected(frames, "c2s")
    assert inj["raw"] == real["raw"].replace(b"{", b"{,", 1)
    ex = next(e for e in exchanges if e["id"] == real["http_exchange_id"])
    assert ex["status"] == 400


# ----------------------------------------------------------------------------- disconnect
@pytest.mark.parametrize("mode", MODES)
def test_reset_before_the_response(g: Rig, mode: str) -> None:
    relayed, direct, mark = both(g, "disconnect mode=reset method=tools/call", "reset", mode=mode)
    assert relayed == direct
    assert relayed[1] == "RemoteProtocolError"
    frames, _findings, exchanges = g.relay.wait_recorded(mark, "inject.disconnect")
    request = the_call(frames)
    ex = next(e for e in exchanges if e["id"] == request["http_exchange_id"])
    assert ex["outcome"] == "injected_reset"
    assert not injected(frames, "s2c")
    # The analysis does not blame the server for mcptape's reset (no http.upstream_error).
    sid = request["session_id"]
    out = run_mcptape(
        "check", "--db", str(g.relay.db), sid, "--format", "json", "--fail-on", "never",
        "--recompute",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    blamed = [
        f
        for f in json.loads(out.stdout)[0]["findings"]
        if f["code"] == "http.upstream_error" and request["seq"] in (f.get("frame_seqs") or [])
    ]
    assert not blamed, blamed


def test_reset_mid_stream(g: Rig) -> None:
    """An event stream cut abruptly just before the response event."""
    relayed, direct, mark = both(
        g, "disconnect mode=reset direction=s2c method=tools/call", "cut-stream", mode="legacy"
    )
    assert relayed == direct
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.disconnect")
    call_id = json.loads(the_call(frames)["raw"])["id"]
    # The server's answer is recorded although the host never got it.
    assert [f for f in frames if f["direction"] == "s2c" and f["msg_id"] == str(call_id)]


def test_end_stream_before_the_response(g: Rig) -> None:
    relayed, direct, mark = both(
        g, "disconnect mode=end-stream direction=s2c method=tools/call", "end-stream", mode="legacy"
    )
    assert relayed == direct
    assert relayed[:3] == ("error", "MCPError", -32000)  # "SSE stream ended without a response"
    _frames, findings, _ = g.relay.wait_recorded(mark, "inject.disconnect")
    assert json.loads(finding(findings, "inject.disconnect")["detail"])["mode"] == "end-stream"


def test_end_stream_after_n_events(g: Rig) -> None:
    """``after=4`` on the first progress event: four events (progress 1, its log line,
    progress 2, its log line) reach the host, then the stream ends before the response —
    as from a server that ends its stream there."""
    got_relayed: list[float] = []
    got_direct: list[float] = []
    g.relay.set_rules(
        rules_toml("disconnect mode=end-stream after=4 direction=s2c method=notifications/progress")
    )
    mark = g.relay.mark()
    args = {"steps": 2, "delay": 0.05}
    relayed = anyio.run(
        lambda: call(g.relay.url, mode="legacy", tool="slow", args=args, progress=got_relayed)
    )
    g.relay.set_rules("")
    direct = anyio.run(
        lambda: call(
            g.bad.url("end-stream"), mode="legacy", tool="slow", args=args, progress=got_direct
        )
    )
    assert relayed == direct and relayed[:3] == ("error", "MCPError", -32000)
    assert got_relayed == got_direct == [1.0, 2.0]
    _, findings, _ = g.relay.wait_recorded(mark, "inject.disconnect")
    assert json.loads(finding(findings, "inject.disconnect")["detail"])["after"] == 4


# ----------------------------------------------------------------------------- drop
@pytest.mark.parametrize("mode", MODES)
def test_drop_request(g: Rig, mode: str) -> None:
    """The server never sees the call; the host waits as for a server that lost it."""
    t = tag()
    relayed, direct, mark = both(
        g, "drop direction=c2s method=tools/call", "hang", mode=mode, tool="count",
        args={"tag": t}, within=1.0,
    )  # fmt: skip
    assert relayed == direct == ("timeout",)
    assert g.up.count(f"COUNT {t}") == 0
    frames, _findings, exchanges = g.relay.wait_recorded(mark, "inject.drop")
    assert not injected(frames, "s2c") and not injected(frames, "c2s")
    ex = next(e for e in exchanges if e["id"] == the_call(frames)["http_exchange_id"])
    assert ex["outcome"] == "host_aborted"


@pytest.mark.parametrize("mode", MODES)
def test_drop_response(g: Rig, mode: str) -> None:
    """The server ran the call and answered; the answer never reaches the host."""
    t = tag()
    behaviour = "drop-event" if mode == "legacy" else "hang"  # an SSE event vs a JSON body
    relayed, direct, mark = both(
        g, "drop direction=s2c method=tools/call", behaviour, mode=mode, tool="count",
        args={"tag": t}, within=1.0,
    )  # fmt: skip
    assert relayed == direct
    # The server ran it through the relay (and, for an event stream, behind the misbehaving
    # server, which drops only the event; a JSON answer is withheld before the server runs).
    expected = 2 if mode == "legacy" else 1
    deadline = time.monotonic() + 5  # the server's stderr is read by a thread: a moment late
    while g.up.count(f"COUNT {t}") < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert g.up.count(f"COUNT {t}") == expected
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.drop")
    call_id = json.loads(the_call(frames)["raw"])["id"]
    answer = [f for f in frames if f["direction"] == "s2c" and f["msg_id"] == str(call_id)]
    assert answer and t.encode() in answer[0]["raw"]  # what the server sent is kept
    assert not injected(frames, "s2c")


# ----------------------------------------------------------------------------- duplicate / reorder
def test_duplicate_response_event(g: Rig) -> None:
    relayed, direct, mark = both(g, "duplicate direction=s2c method=tools/call", "duplicate",
                                 mode="legacy")  # fmt: skip
    assert relayed == direct == ("result", False, "héllo")
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.duplicate")
    call_id = json.loads(the_call(frames)["raw"])["id"]
    real = [f for f in frames if f["channel"] == "sse" and f["msg_id"] == str(call_id)]
    (inj,) = injected(frames, "s2c")
    assert len(real) == 1 and inj["raw"] == real[0]["raw"] and inj["sse_event"] == "message"
    assert inj["id"] > real[0]["id"]


def test_duplicate_request(g: Rig) -> None:
    """The server runs the call twice; the host gets one answer."""
    t = tag()
    g.relay.set_rules(rules_toml("duplicate direction=c2s method=tools/call"))
    mark = g.relay.mark()
    out = anyio.run(lambda: call(g.relay.url, mode="auto", tool="count", args={"tag": t}))
    g.relay.set_rules("")
    assert out == ("result", False, t)
    deadline = time.monotonic() + 5
    while g.up.count(f"COUNT {t}") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert g.up.count(f"COUNT {t}") == 2
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.duplicate")
    (inj,) = injected(frames, "c2s")
    assert inj["raw"] == the_call(frames, t)["raw"]


def test_reorder_events(g: Rig) -> None:
    """The event before the response (the last log line of a slow tool) swapped with the
    response, as from a server that sends them in that order."""
    args = {"steps": 3, "delay": 0.01}
    g.relay.set_rules(rules_toml("reorder direction=s2c method=notifications/message nth=3"))
    mark = g.relay.mark()
    relayed = anyio.run(lambda: call(g.relay.url, mode="legacy", tool="slow", args=args))
    g.relay.set_rules("")
    direct = anyio.run(lambda: call(g.bad.url("reorder"), mode="legacy", tool="slow", args=args))
    assert relayed == direct == ("result", False, "done after 3 steps")
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.reorder")
    (inj,) = injected(frames, "s2c")
    assert json.loads(inj["raw"])["method"] == "notifications/message"
    # Recorded as the server sent them (the log line, then the response) and, on the inject
    # channel, the log line again where the host got it: after the response.
    exchange = the_call(frames)["http_exchange_id"]
    sse = [f for f in frames if f["channel"] == "sse" and f["http_exchange_id"] == exchange]
    assert [f["kind"] for f in sse][-2:] == ["notification", "response"]
    assert sse[-2]["raw"] == inj["raw"] and inj["id"] > sse[-1]["id"]


# ----------------------------------------------------------------------------- delay / throttle
@pytest.mark.parametrize("mode", MODES)
def test_delay_response(g: Rig, mode: str) -> None:
    t0 = time.monotonic()
    g.relay.set_rules(rules_toml("delay ms=600 direction=s2c method=tools/call"))
    mark = g.relay.mark()
    t0 = time.monotonic()
    relayed = anyio.run(lambda: call(g.relay.url, mode=mode))
    took_relayed = time.monotonic() - t0
    g.relay.set_rules("")
    t0 = time.monotonic()
    direct = anyio.run(lambda: call(g.bad.url("delay", ms="600"), mode=mode))
    took_direct = time.monotonic() - t0
    assert relayed == direct == ("result", False, "héllo")
    assert took_relayed >= 0.6 and took_direct >= 0.6
    frames, _findings, _ = g.relay.wait_recorded(mark, "inject.delay")
    assert not injected(frames, "s2c")


def test_delay_request(g: Rig) -> None:
    g.relay.set_rules(rules_toml("delay ms=500 direction=c2s method=tools/call"))
    mark = g.relay.mark()
    t0 = time.monotonic()
    out = anyio.run(lambda: call(g.relay.url, mode="auto"))
    assert time.monotonic() - t0 >= 0.5
    g.relay.set_rules("")
    assert out == ("result", False, "héllo")
    g.relay.wait_recorded(mark, "inject.delay")


def test_throttle_stream(g: Rig) -> None:
    """A 4 KB answer at 8000 bytes/s takes half a second longer to arrive."""
    text = "x" * 4000
    g.relay.set_rules(rules_toml("throttle bps=8000 direction=s2c method=tools/call"))
    mark = g.relay.mark()
    t0 = time.monotonic()
    out = anyio.run(lambda: call(g.relay.url, mode="legacy", args={"text": text}))
    assert time.monotonic() - t0 >= 0.5
    g.relay.set_rules("")
    assert out == ("result", False, text)
    _, findings, _ = g.relay.wait_recorded(mark, "inject.throttle")
    assert json.loads(finding(findings, "inject.throttle")["detail"])["bps"] == 8000


def test_no_rule_no_trace(g: Rig) -> None:
    """Rules that match nothing change nothing: same answer, no inject frame, no finding."""
    g.relay.set_rules(rules_toml("error method=prompts/get"))
    mark = g.relay.mark()
    out = anyio.run(lambda: call(g.relay.url, mode="legacy"))
    g.relay.set_rules("")
    assert out == ("result", False, "héllo")
    # Once the exchange is recorded, so would an inject frame or finding be (one batch).
    g.relay.wait_finished(mark)
    frames = g.relay.query("SELECT * FROM frames WHERE id > ?", mark[0])
    assert frames and not [f for f in frames if f["channel"] == "inject"]
    assert not g.relay.query(
        "SELECT * FROM findings WHERE id > ? AND code LIKE 'inject.%'", mark[1]
    )


def test_host_leaving_during_an_injected_delay_is_recorded(g: Rig) -> None:
    """The host gives up while a delay rule holds its call: the exchange is still recorded,
    ended ``host_aborted`` (it used to stay open in the recording, without an outcome)."""
    t = tag()
    g.relay.set_rules(rules_toml("delay ms=5000 direction=c2s method=tools/call"))
    mark = g.relay.mark()
    out = anyio.run(
        lambda: call(g.relay.url, mode="auto", tool="count", args={"tag": t}, within=0.5)
    )
    g.relay.set_rules("")
    assert out == ("timeout",)
    frames, _, exchanges = g.relay.wait_recorded(mark, "inject.delay")
    ex = next(e for e in exchanges if e["id"] == the_call(frames, t)["http_exchange_id"])
    assert ex["outcome"] == "host_aborted"
    assert g.up.count(f"COUNT {t}") == 0  # it never left the relay


def test_reorder_requests(g: Rig) -> None:
    """A call held by ``reorder`` reaches the server after the call the host sent next."""
    from mcp_proxy.testing.client import make_client, tool_text

    first, second = tag(), tag()
    g.relay.set_rules(
        rules_toml("reorder direction=c2s method=tools/call name=count nth=1 wait=5000")
    )
    mark = g.relay.mark()

    async def two() -> dict[str, str]:
        got: dict[str, str] = {}
        with anyio.fail_after(40):
            async with make_client(g.relay.url, mode="auto") as client:

                async def one(t: str) -> None:
                    got[t] = tool_text(await client.call_tool("count", {"tag": t}))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(one, first)
                    await anyio.sleep(0.3)
                    tg.start_soon(one, second)
        return got

    got = anyio.run(two)
    g.relay.set_rules("")
    assert got == {first: first, second: second}
    lines = list(g.up.lines)
    assert lines.index(f"COUNT {second}") < lines.index(f"COUNT {first}")
    frames, _, _ = g.relay.wait_recorded(mark, "inject.reorder")
    (inj,) = injected(frames, "c2s")
    assert inj["raw"] == the_call(frames, first)["raw"]
    assert inj["id"] > the_call(frames, second)["id"]


def test_reorder_holds_until_the_server_has_taken_the_next_call(g: Rig) -> None:
    """The held call goes once the call that overtakes it has been answered with a response
    head — not as soon as that call was handed to a connection, which let the held one, on a
    second connection, reach the server first (seen in CI). In the 2026-07-28 era the head of
    a JSON answer comes when the tool is done, so the held ``count`` runs after ``watch`` ends.
    """
    from mcp_proxy.testing.client import make_client, tool_text

    first, second = tag(), tag()
    g.relay.set_rules(
        rules_toml("reorder direction=c2s method=tools/call name=count nth=1 wait=8000")
    )

    async def two() -> dict[str, str]:
        got: dict[str, str] = {}
        with anyio.fail_after(40):
            async with make_client(g.relay.url, mode="auto") as client:

                async def held() -> None:
                    got[first] = tool_text(await client.call_tool("count", {"tag": first}))

                async def overtaking() -> None:
                    r = await client.call_tool("watch", {"tag": second, "seconds": 0.6})
                    got[second] = tool_text(r)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(held)
                    await anyio.sleep(0.3)
                    tg.start_soon(overtaking)
        return got

    got = anyio.run(two)
    g.relay.set_rules("")
    assert got == {first: first, second: f"watched {second}"}
    lines = [line for line in g.up.lines if first in line or second in line]
    assert lines == [f"WATCH START {second}", f"WATCH DONE {second}", f"COUNT {first}"]


@pytest.mark.parametrize("mode", MODES)
def test_status_on_the_answer(g: Rig, mode: str) -> None:
    """``http`` on the server's answer: the server ran the call; the host gets the status
    (a JSON answer, 2026-07-28) — or, once an event stream's head is out (initialize era), the
    connection is cut, which is all a server can still do then."""
    t = tag()
    behaviour, params = ("status", {"status": "503"}) if mode == "auto" else ("cut-stream", {})
    relayed, direct, mark = both(
        g, "http status=503 direction=s2c method=tools/call", behaviour, params, mode=mode,
        tool="count", args={"tag": t},
    )  # fmt: skip
    assert relayed == direct
    frames, _findings, exchanges = g.relay.wait_recorded(mark, "inject.http")
    call_frame = the_call(frames, t)
    ex = next(e for e in exchanges if e["id"] == call_frame["http_exchange_id"])
    answer = [f for f in frames if f["direction"] == "s2c" and t.encode() in f["raw"]]
    assert answer and answer[0]["channel"] in ("http", "sse")  # what the server really said
    note = ex["meta"]["injected"][0]
    if mode == "auto":
        assert ex["status"] == 503 and note["upstream_status"] == 200
    else:
        assert ex["outcome"] == "injected_reset" and note["applied"] is False
