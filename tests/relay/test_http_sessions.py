"""Session grouping rules (pure) and the schema the relay writes into."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from mcp_proxy.recorder import Recorder
from mcp_proxy.relay.http.sessions import (
    RULE_CLIENT,
    RULE_MCP_SESSION,
    SessionRouter,
    body_facts,
    query_session_id,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_body_facts() -> None:
    modern = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "_meta": {"io.modelcontextprotocol/clientInfo": {"name": "ide", "version": "2"}}
            },
        }
    ).encode()
    f = body_facts(modern)
    assert (f.method, f.client_name, f.client_version, f.is_jsonrpc, f.is_initialize) == (
        "tools/call",
        "ide",
        "2",
        True,
        False,
    )
    init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":"c","version":"1"}}}'
    f = body_facts(init)
    assert f.is_initialize and f.client_name == "c"
    assert body_facts(b"not json").method is None
    assert body_facts(b"").is_jsonrpc is False
    big = modern[:-2] + b',"pad":"' + b"x" * 300_000 + b'"}}'
    f = body_facts(big)
    assert f.client_name == "ide" and f.method == "tools/call"
    f = body_facts(init[:60], partial=True)
    assert f.is_initialize and f.is_jsonrpc
    batch = b"[" + init + b"]"
    assert body_facts(batch).is_initialize


def test_query_session_id() -> None:
    assert query_session_id("session_id=abc") == "abc"
    assert query_session_id("x=1&sessionId=Q") == "Q"
    assert query_session_id("x=1") is None


def test_idle_cut_and_credentials() -> None:
    clock = Clock()
    r = SessionRouter(None, name=None, upstream="u", idle_cut=10, clock=clock)
    k1 = r.client_key("ide", "1", "Bearer a")
    k2 = r.client_key("ide", "1", "Bearer b")
    assert k1 != k2 and "Bearer" not in k1  # credentials told apart, never kept
    e1 = r.get(k1, RULE_CLIENT)
    r.begin(e1)
    clock.now += 100
    assert r.get(k1, RULE_CLIENT) is e1  # in flight: never cut
    r.done(e1)
    clock.now += 11
    e2 = r.get(k1, RULE_CLIENT)
    assert e2 is not e1 and e1.ended and e2.session_id != e1.session_id
    clock.now += 11
    assert r.sweep() == 1 and e2.ended
    # Explicit keys are not cut on idle.
    m = r.get(r.mcp_key("S"), RULE_MCP_SESSION)
    clock.now += 10_000
    assert r.sweep() == 0 and r.get(r.mcp_key("S"), RULE_MCP_SESSION) is m


def test_keyless_joins_the_last_client_of_its_credential() -> None:
    clock = Clock()
    r = SessionRouter(None, name=None, upstream="u", idle_cut=10, clock=clock)
    assert r.keyless(None)[0] == "unattributed"
    k = r.client_key("c", "1", None)
    r.get(k, RULE_CLIENT)
    assert r.keyless(None)[0] == k
    assert r.keyless("Bearer other")[0] == "unattributed"
    clock.now += 11
    assert r.keyless(None)[0] == "unattributed"


def test_grouping_rule_is_in_session_meta(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    rec = Recorder("sqlite:///" + str(db))
    rec.start()
    r = SessionRouter(
        rec, name="n", upstream="http://u/mcp", idle_cut=5, base_meta={"relay": {"x": 1}}
    )
    e = r.get(
        r.client_key("ide", "9", None),
        RULE_CLIENT,
        grouping={"client": {"name": "ide", "version": "9"}},
    )
    r.close_all()
    rec.close()
    con = sqlite3.connect(db)
    transport, status, meta, name, upstream = con.execute(
        "SELECT transport, status, meta, name, upstream FROM sessions WHERE id = ?", (e.session_id,)
    ).fetchone()
    cols = [row[1] for row in con.execute("PRAGMA table_info(frames)")]
    con.close()
    meta = json.loads(meta)
    assert (transport, status, name, upstream) == ("http", "ended", "n", "http://u/mcp")
    assert meta["relay"] == {"x": 1}
    g: dict[str, Any] = meta["grouping"]
    assert g["rule"] == RULE_CLIENT and g["idle_cut_s"] == 5 and g["client"]["name"] == "ide"
    assert g["ended_by"] == "relay stopped" and "sessionless" in g["doc"]
    assert "redacted" in cols  # migration 0002
