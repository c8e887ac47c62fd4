"""The stdlib-only echo server that benchmarks use as a zero-cost upstream."""

from __future__ import annotations

import json
import subprocess
import sys

RAWECHO = [sys.executable, "-m", "mcp_proxy.testing.rawecho"]


def run(stdin: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*RAWECHO, *args], input=stdin, capture_output=True, timeout=30)


def test_answers_requests_with_the_same_id_and_ignores_the_rest() -> None:
    stdin = b"".join(
        [
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n',
            b"not json at all\n",
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
            b'{"jsonrpc":"2.0","id":1,"result":{}}\n',
            b'{"jsonrpc":"2.0","id":"a \\"quoted\\" id","method":"x"}\n',
            b'{"jsonrpc": "2.0", "id": 9007199254740993, "method": "y"}\n',
            b"[1,2]\n",
        ]
    )
    proc = run(stdin)
    assert proc.returncode == 0  # stdin EOF ends it
    assert proc.stdout.splitlines() == [
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
        b'{"jsonrpc":"2.0","id":"a \\"quoted\\" id","result":{}}',
        b'{"jsonrpc":"2.0","id":9007199254740993,"result":{}}',
    ]


def test_burst_sends_notifications_before_the_response() -> None:
    proc = run(b'{"jsonrpc":"2.0","id":7,"method":"burst"}\n', "--burst", "1000")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 1001
    assert [m["params"]["data"] for m in lines[:-1]] == list(range(1, 1001))
    assert all(m["method"] == "notifications/message" for m in lines[:-1])
    assert lines[-1] == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_huge_response_carries_n_mib() -> None:
    proc = run(
        b'{"jsonrpc":"2.0","id":1,"method":"huge"}\n{"jsonrpc":"2.0","id":2,"method":"x"}\n',
        "--huge-mib",
        "3",
    )
    first, second = proc.stdout.split(b"\n")[:2]
    text = json.loads(first)["result"]["content"][0]["text"]
    assert len(text) == 3 * 1024 * 1024
    assert json.loads(second) == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_imports_nothing_but_the_standard_library() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *RAWECHO[1:]],
        input=b"",
        capture_output=True,
        timeout=30,
    )
    modules = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()}
    heavy = {m for m in modules if m.split(".")[0] in {"mcp", "mcp_types", "pydantic", "anyio"}}
    assert not heavy
