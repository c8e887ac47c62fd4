"""Fault injection against a stateless SDK server answering JSON (``--stateless
--json-response``), initialize era: no ``Mcp-Session-Id``, every answer a JSON body.

The same comparison as ``test_http_faults.py``: the SDK client through the relay under a rule,
and directly against a server that really misbehaves, must observe the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.faults.http_rig import Rig, both, rig

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def g(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig(tmp_path_factory.mktemp("fhttp-stateless"), "--stateless", "--json-response") as r:
        yield r


CASES = [
    ("error method=tools/call code=-32002 message=nope", "error",
     {"code": "-32002", "message": "nope"}, "inject.error"),
    ("http status=503 method=tools/call", "status", {"status": "503"}, "inject.http"),
    ("corrupt mode=truncate direction=s2c method=tools/call", "corrupt", {"mode": "truncate"},
     "inject.corrupt"),
    ("drop direction=s2c method=tools/call", "hang", {}, "inject.drop"),
    ("disconnect mode=reset direction=s2c method=tools/call", "reset", {}, "inject.disconnect"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "behaviour", "params", "code"), CASES, ids=[c[0].split()[0] for c in CASES]
)
def test_stateless_json(
    g: Rig, rule: str, behaviour: str, params: dict[str, str], code: str
) -> None:
    relayed, direct, mark = both(g, rule, behaviour, params, mode="legacy", within=1.0)
    assert relayed == direct
    frames, findings, exchanges = g.relay.wait_recorded(mark, code)
    call_frame = next(f for f in frames if f["method"] == "tools/call")
    session = next(f["session_id"] for f in findings if f["code"] == code)
    assert session == call_frame["session_id"]
    ex = next(e for e in exchanges if e["id"] == call_frame["http_exchange_id"])
    assert "mcp-session-id" not in {h[0].lower() for h in ex["response_headers"] or []}
    assert json.loads(next(f["detail"] for f in findings if f["code"] == code))["direction"]
    if code == "inject.corrupt":
        real = [f for f in frames if f["direction"] == "s2c" and f["channel"] == "http"]
        inj = [f for f in frames if f["channel"] == "inject"]
        assert len(inj) == 1 and any(r["raw"].startswith(inj[0]["raw"]) for r in real)
