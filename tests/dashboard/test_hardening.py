"""What was recorded must always be viewable: hostile frames through the real relay, every page.

A raw peer (``tests.helpers.wire``) behind the real ``mcptape record`` sends what a hostile or
broken server sends — JSON nested 1,200 levels deep (recordable), invalid UTF-8 inside JSON
and on its own line — and a real SDK session runs an MRTR conversation. The dashboard then
answers every page and every ``.json`` twin without a 5xx (issue 10, items 11, 12, 13, 20).
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import event

from dashboard.app import STORE, create_app
from mcp_proxy.testing.client import make_client, stdio_params
from tests.conftest import DIALECTS, fresh_db, mcptape_cmd
from tests.dashboard.conftest import AUTH, TOKEN, Recordings, session_ids
from tests.helpers import db as rdb
from tests.helpers.proxy import proxied

pytestmark = pytest.mark.timeout(120)

DEPTH = 1200
DEEP = "[" * DEPTH + "]" * DEPTH
C2S = [
    (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deep","arguments":'
        + '{"x":'
        + DEEP
        + "}}}\n"
    ).encode(),
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":'
    b'{"t":"\xff\xfe"}}}\n',
]
S2C = [
    ('{"jsonrpc":"2.0","id":1,"result":{"content":[],"deep":' + DEEP + "}}\n").encode(),
    b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"\xc3\x28"}]}}\n',
    b"\xff\xfe not utf-8 at all\n",
]


#: What a fuzzer sends (issue 10): lone surrogates in ids, methods and messages, integers past
#: 64 bits, an id of 400 characters, bidi and control characters, a batch, a frame without its
#: end, CRLF, wrong types, infinities, binary bytes.
FUZZ_C2S = [
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/call\\ud800","params":{"name":"\\udfff"}}\n',
    b'{"jsonrpc":"2.0","id":' + b"9" * 40 + b',"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":"' + b"i" * 400 + b'","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":7,"method":"x\xe2\x80\xaey\\u0000\\u001b[31m","params":[]}\n',
    b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"a"}}\r\n',
    b'[{"jsonrpc":"2.0","id":9,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]\n',
    b'{"jsonrpc":"2.0","id":10,"method":"ping"',
]
FUZZ_S2C = [
    b'{"jsonrpc":"2.0","id":"\\ud800","error":{"code":' + b"9" * 30 + b',"message":"\\ud800"}}\n',
    b'{"jsonrpc":"2.0","id":' + b"9" * 40 + b',"result":{}}\n',
    b'{"jsonrpc":"2.0","id":"' + b"i" * 400 + b'","result":{}}\n',
    b'{"jsonrpc":"2.0","id":7,"error":{"code":-9223372036854775809,"message":"m"}}\n',
    b'{"jsonrpc":"2.0","id":8,"result":{"content":[],"isError":"yes"}}\n',
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":[1],'
    b'"progress":1e999}}\n',
    b'{"jsonrpc":"2.0","id":[1,2],"result":null}\n',
    b"\x00\x01\x02 binary\n",
]


@dataclass
class Hostile:
    db: Path | str
    sid: str  # the raw session
    mrtr: str  # an SDK session with an MRTR chain
    seqs: list[int]
    fuzz: str  # the fuzzer's frames
    fuzz_seqs: list[int]
    dialect: str


def record_raw(
    db: Path | str,
    tmp: Path,
    name: str = "hostile-frames",
    c2s: list[bytes] = C2S,
    s2c: list[bytes] = S2C,
) -> None:
    """Host → mcptape record → raw peer; the peer answers with the ``s2c`` bytes."""
    script = {
        "capture": str(tmp / f"{name}.bin"),
        "write": [base64.b64encode(x).decode() for x in s2c],
        "delay": 0.05,
    }
    (tmp / f"{name}.json").write_text(json.dumps(script))
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", name, "--"]
    argv += [sys.executable, "-m", "tests.helpers.wire", str(tmp / f"{name}.json")]
    done = subprocess.run(argv, input=b"".join(c2s), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


async def record_mrtr(db: Path | str) -> None:
    params = proxied(stdio_params("basic,mrtr"), db, "mrtr")
    async with make_client(params, mode="auto") as client:
        await client.call_tool("countdown", {"rounds": 2})


@pytest.fixture(scope="module", params=DIALECTS)
def hostile(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hostile]:
    """The hostile sessions, recorded once per dialect (SQLite file, PostgreSQL database)."""
    tmp = tmp_path_factory.mktemp("hostile")
    with fresh_db(request.param, request, tmp, "hostile.db") as db:
        record_raw(db, tmp)
        record_raw(db, tmp, "fuzz", FUZZ_C2S, FUZZ_S2C)
        asyncio.run(record_mrtr(db))
        ids = session_ids(db)
        seqs, fuzz_seqs = (
            [
                r["seq"]
                for r in rdb.rows(
                    db, "SELECT seq FROM frames WHERE session_id = ? ORDER BY seq", ids[name]
                )
            ]
            for name in ("hostile-frames", "fuzz")
        )
        assert len(seqs) == len(C2S) + len(S2C), seqs
        assert len(fuzz_seqs) >= len(FUZZ_S2C) + len(FUZZ_C2S) - 1, fuzz_seqs
        yield Hostile(
            db=db,
            sid=ids["hostile-frames"],
            mrtr=ids["mrtr"],
            seqs=seqs,
            fuzz=ids["fuzz"],
            fuzz_seqs=fuzz_seqs,
            dialect=request.param,
        )


@pytest.fixture
async def client(hostile: Hostile) -> AsyncIterator[TestClient]:
    app = create_app(rdb.url_of(hostile.db), token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c


async def status_of(client: TestClient, path: str) -> tuple[int, str]:
    r = await client.get(path, headers=AUTH)
    return r.status, await r.text()


async def test_every_frame_page_of_hostile_frames_answers(client: TestClient, hostile: Hostile):
    """Items 11 and 12: non-UTF-8 frames (500 before: ``body.invisible`` undefined) and
    frames nested 1,200 levels deep (500 before: RecursionError in the JSON tree)."""
    sid = hostile.sid
    failures = []
    for seq in hostile.seqs:
        for path in (f"/sessions/{sid}/frames/{seq}", f"/sessions/{sid}/frames/{seq}.json"):
            status, body = await status_of(client, path)
            if status != 200:
                failures.append((path, status, body[:200]))
    assert not failures, failures
    # The bytes are still shown: base64 for the invalid UTF-8 line, the text for the deep one.
    status, body = await status_of(client, f"/sessions/{sid}/frames/{hostile.seqs[-1]}")
    assert base64.b64encode(S2C[2].rstrip(b"\n")).decode() in body
    status, body = await status_of(client, f"/sessions/{sid}/frames/{hostile.seqs[0]}")
    assert "nested deeper than" in body and "[[[[[[[[" in body


async def test_exchange_session_and_diff_pages_of_deep_frames(client: TestClient, hostile: Hostile):
    sid = hostile.sid
    paths = [
        f"/sessions/{sid}",
        f"/sessions/{sid}.json",
        f"/sessions/{sid}/exchanges/{hostile.seqs[0]}",
        f"/sessions/{sid}/exchanges/{hostile.seqs[0]}.json",
        f"/sessions/{sid}/stats",
        f"/diff?a={sid}&b={sid}",
        f"/diff.json?a={sid}&b={sid}",
    ]
    for path in paths:
        status, body = await status_of(client, path)
        assert status < 500, (path, status, body[:300])
        assert "Traceback" not in body


async def test_every_page_of_fuzzed_frames_answers(client: TestClient, hostile: Hostile):
    """A fuzzer's frames (lone surrogates, 64-bit overflows, long ids, batches, cut frames):
    every page and twin answers without a 5xx. Before: the analysis could not store findings
    quoting a lone surrogate (UnicodeEncodeError) and every page of the session answered 500."""
    sid = hostile.fuzz
    paths = [f"/sessions/{sid}", f"/sessions/{sid}/stats", "/stats", "/sessions"]
    for seq in hostile.fuzz_seqs:
        paths += [f"/sessions/{sid}/frames/{seq}", f"/sessions/{sid}/exchanges/{seq}"]
    failures = []
    for path in paths:
        for twin in ("", ".json"):
            status, body = await status_of(client, path + twin)
            if status >= 500 or status not in (200, 404):
                failures.append((path + twin, status, body[:200]))
    assert not failures, failures
    data = json.loads((await status_of(client, f"/sessions/{sid}.json"))[1])
    assert data["analysis"]["current"] and data["findings"]  # analysed and stored


async def test_huge_numbers_in_urls_are_not_server_errors(
    client: TestClient, hostile: Hostile, request: pytest.FixtureRequest
):
    """Item 13: integers ≥ 2^63 in a path or a form reach SQLite as OverflowError (500 before)."""
    if hostile.dialect == "postgresql":
        # Known defect (reported by session 3's suite helper): the live stream clamps
        # Last-Event-ID to 10**12, PostgreSQL's frames.seq is a 32-bit integer, the query fails
        # after the stream has started and the response never ends. Strict: passes → remove.
        request.applymarker(
            pytest.mark.xfail(
                raises=TimeoutError,
                strict=True,
                reason="live stream hangs on PostgreSQL for a Last-Event-ID past 2**31",
            )
        )
    sid, big = hostile.sid, str(2**64)
    for path in (
        f"/sessions/{sid}/frames/{big}",
        f"/sessions/{sid}/frames/{big}.json",
        f"/sessions/{sid}/frames/{big}/raw",
        f"/sessions/{sid}/exchanges/{big}",
        f"/sessions/{sid}/http/{big}.json",
    ):
        status, body = await status_of(client, path)
        assert status == 404, (path, status, body[:300])
    r = await client.post(f"/annotations/{big}/delete.json", headers=AUTH)
    assert r.status == 404, await r.text()
    r = await client.post(
        f"/sessions/{sid}/annotations.json", headers=AUTH, json={"frame_seq": big, "tag": "x"}
    )
    assert r.status == 400 and "out of range" in (await r.json())["error"]["message"]
    r = await client.get(f"/sessions/{sid}/live", headers={**AUTH, "Last-Event-ID": big})
    assert r.status == 200  # a stream of an ended session: one status event, then the end
    # (bounded: an ended session's stream ends at once; a stream that never ends is the bug)
    assert "event: status" in await asyncio.wait_for(r.text(), 30)


async def test_first_mrtr_round_is_round_1(client: TestClient, hostile: Hostile):
    """Item 20: the timeline said "round 2" for the first round (the CLI and .json say 1)."""
    data = json.loads((await status_of(client, f"/sessions/{hostile.mrtr}.json"))[1])
    rounds = [
        r["exchange"]["round"]
        for r in data["timeline"]
        if r.get("exchange") and r["exchange"]["chain"] is not None
    ]
    assert rounds[:3] == [1, 2, 3], rounds
    status, html = await status_of(client, f"/sessions/{hostile.mrtr}")
    assert status == 200
    assert "chain 0 · round 1<" in html and "round 4" not in html


async def test_the_exchange_page_reads_related_frames_in_one_query(recordings: Recordings):
    """Issue 11: the exchange page issued one query per related frame (N+1): a call with six
    progress and log notifications costs at most one statement more than one with none."""
    name = "demo-modern"
    sid = recordings.ids[name]
    calls = recordings.rows(
        "SELECT seq, raw FROM frames WHERE session_id = ? AND method = 'tools/call'"
        " AND kind = 'request' ORDER BY seq",
        sid,
    )
    by_tool = {json.loads(c["raw"])["params"]["name"]: c["seq"] for c in reversed(calls)}
    app = create_app(recordings.url, token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        seen: list[str] = []
        event.listen(
            app[STORE].engine.sync_engine,
            "before_cursor_execute",
            lambda conn, cur, stmt, params, ctx, many: seen.append(stmt),
        )
        counts = {}
        for tool in ("echo", "slow"):
            await c.get(f"/sessions/{sid}/exchanges/{by_tool[tool]}.json", headers=AUTH)
            seen.clear()  # (the first visit also analyses the session: count the second)
            r = await c.get(f"/sessions/{sid}/exchanges/{by_tool[tool]}.json", headers=AUTH)
            data = await r.json()
            assert r.status == 200, data
            counts[tool] = (len(seen), len(data["related"]))
    assert counts["slow"][1] >= 6 and counts["echo"][1] == 0, counts
    # One statement for all the related frames (none when there are none), not one each.
    assert counts["slow"][0] <= counts["echo"][0] + 1, counts
