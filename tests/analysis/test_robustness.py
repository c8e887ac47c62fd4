"""The analysis never raises, whatever a peer put on the wire: it judges, it does not trust."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mcp_proxy.analysis.core import analyze
from mcp_proxy.frames import classify
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import CASES

WEIRD: list[Any] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "x",
    [],
    [1, "a"],
    {},
    {"a": {"b": []}},
    "=?base64?!?=",
]


def test_hostile_shapes_do_not_raise() -> None:
    w = Wire.initialized()
    odd: list[Any] = [
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [1, 2]},
        {"jsonrpc": "2.0", "id": 2, "result": "not an object"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 5, "_meta": [1]}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": "x", "message": None}},
        {"jsonrpc": "2.0", "id": {"o": 1}, "method": "x"},
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": {"a": 1}, "progress": "lots"},
        },
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": None},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": 7}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": 12}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "result": {
                "tools": ["a", {"name": 1}, {"name": "t", "inputSchema": [1]}],
                "nextCursor": 3,
            },
        },
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "t", "requestState": 9, "inputResponses": "x", "_meta": envelope()},
        },
        {
            "jsonrpc": "2.0",
            "id": 5,
            "result": {"resultType": "input_required", "inputRequests": ["x"], "requestState": {}},
        },
        {"jsonrpc": "2.0", "id": 6, "method": "sampling/createMessage", "params": {"tools": 1}},
        [],
        [1, 2, "three"],
        "a JSON string",
    ]
    for msg in odd:
        w.frame("c2s" if "method" in str(msg)[:40] else "s2c", msg)
    w.frame("s2c", b"\x00\x01binary\n")
    w.frame("s2c", b"", channel="stderr")
    hid = w.exchange(
        request_headers=[["x"], ["mcp-method"]], response_headers=None, status=None, outcome=None
    )
    w.request(
        "tools/call", 7, {"name": "t", "arguments": {"region": "x"}, "_meta": envelope()}, http=hid
    )
    a = w.end("crashed", exit_code=None, exit_signal=9).analyze()
    assert a.findings  # plenty to say, and no exception


@pytest.mark.parametrize("seed", range(12))
def test_mutated_sessions_do_not_raise(seed: int) -> None:
    rng = random.Random(seed)
    for code in sorted(CASES)[seed::12]:
        w = CASES[code][0]()
        for _ in range(10):
            if not w.frames:
                break
            row = rng.choice(w.frames)
            try:
                value = json.loads(row["raw"])
            except ValueError:
                continue
            _mutate(value, rng)
            raw = json.dumps(value).encode() + b"\n"
            c = classify(raw, row["channel"])
            row.update(
                raw=raw,
                kind=c.kind.value,
                method=c.method,
                msg_id=c.msg_id,
                error_code=c.error_code,
                size=len(raw),
            )
        analyze(w.frames, session=w.session, http_exchanges=w.http_exchanges)


def _mutate(value: Any, rng: random.Random) -> None:
    """Replace one value somewhere inside ``value`` (a dict or list) with something odd."""
    node = value
    for _ in range(6):
        if isinstance(node, dict) and node:
            key = rng.choice(list(node))
            if rng.random() < 0.4 or not isinstance(node[key], (dict, list)):
                node[key] = rng.choice(WEIRD)
                return
            node = node[key]
        elif isinstance(node, list) and node:
            i = rng.randrange(len(node))
            if rng.random() < 0.4 or not isinstance(node[i], (dict, list)):
                node[i] = rng.choice(WEIRD)
                return
            node = node[i]
        else:
            return
