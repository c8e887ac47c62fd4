"""mcp_proxy.redact: what is redacted in the recorded copy, and what is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.redact import (
    ENV_REDACT,
    REDACTED,
    Redactor,
    is_sensitive_header,
    is_sensitive_key,
    redactor_from_env,
)
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

R = Redactor()


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "Set-Cookie",
        "X-API-Key",
        "api-key",
        "X-Auth-Token",
        "X-Client-Secret",
        "Mcp-Param-Api-Key",
        "X-Amz-Security-Token",
        "X-Db-Password",
    ],
)
def test_sensitive_headers(name: str) -> None:
    assert is_sensitive_header(name)


@pytest.mark.parametrize(
    "name",
    [
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Content-Type",
        "Accept",
        "WWW-Authenticate",
        "Last-Event-ID",
    ],
)
def test_plain_headers(name: str) -> None:
    assert not is_sensitive_header(name)


def test_header_values_keep_scheme_and_names() -> None:
    out = R.headers(
        [
            ["Authorization", "Bearer abc.def"],
            ["Authorization", "opaque"],
            ["Cookie", "a=1; b=2"],
            ["Set-Cookie", "sid=xyz; Path=/; HttpOnly"],
            ["Accept", "*/*"],
        ]
    )
    assert out == [
        ["Authorization", f"Bearer {REDACTED}"],
        ["Authorization", REDACTED],
        ["Cookie", f"a={REDACTED}; b={REDACTED}"],
        ["Set-Cookie", f"sid={REDACTED}; Path=/; HttpOnly"],
        ["Accept", "*/*"],
    ]
    extra = Redactor.from_options(headers=["X-Tenant"])
    assert extra.headers([["x-tenant", "t1"]]) == [["x-tenant", REDACTED]]
    off = Redactor(enabled=False)
    assert off.headers([["Authorization", "Bearer x"]]) == [["Authorization", "Bearer x"]]


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("access_token", True),
        ("refreshToken", True),
        ("id-token", True),
        ("client_secret", True),
        ("password", True),
        ("apiKey", True),
        ("github_token", True),
        ("progressToken", False),
        ("nextPageToken", False),
        ("maxTokens", False),
        ("cursor", False),
        ("code", False),
        ("name", False),
    ],
)
def test_sensitive_keys(key: str, sensitive: bool) -> None:
    assert is_sensitive_key(key) is sensitive


def body(doc: object, r: Redactor = R) -> tuple[object, bool]:
    raw, changed = r.body(json.dumps(doc).encode())
    return json.loads(raw), changed


def test_jsonrpc_bodies() -> None:
    doc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "t",
            "arguments": {"password": "p", "n": 3, "nested": [{"api_key": "k"}]},
            "_meta": {"progressToken": "tok"},
        },
    }
    out, changed = body(doc)
    assert changed
    assert out["params"]["arguments"] == {
        "password": REDACTED,
        "n": 3,
        "nested": [{"api_key": REDACTED}],
    }
    assert out["params"]["_meta"]["progressToken"] == "tok"


def test_code_only_in_oauth_context() -> None:
    err = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}}
    assert body(err) == (err, False)
    tool = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"arguments": {"code": "print(1)"}},
    }
    assert body(tool) == (tool, False)
    oauth_in_rpc = {"jsonrpc": "2.0", "id": 1, "result": {"code": "c0de", "state": "s"}}
    assert body(oauth_in_rpc)[0]["result"] == {"code": REDACTED, "state": "s"}
    token_doc = {"code": "c0de", "access_token": "at", "token_type": "Bearer", "expires_in": 10}
    assert body(token_doc)[0] == {
        "code": REDACTED,
        "access_token": REDACTED,
        "token_type": "Bearer",
        "expires_in": 10,
    }


def test_schema_properties_named_like_secrets_stay() -> None:
    listing = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "tools": [
                {
                    "name": "db",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "password": {"type": "string", "description": "the password"}
                        },
                    },
                }
            ]
        },
    }
    assert body(listing) == (listing, False)


def test_json_paths() -> None:
    r = Redactor.from_options(
        paths=["params.arguments.query", "result.content.*.text", "**.ssn_number"]
    )
    doc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "x",
        "params": {"arguments": {"query": {"deep": 1}, "other": "o"}},
    }
    assert body(doc, r)[0]["params"]["arguments"] == {"query": REDACTED, "other": "o"}
    res = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "x": {"y": {"ssn_number": 5}},
        },
    }
    out = body(res, r)[0]["result"]
    assert [c["text"] for c in out["content"]] == [REDACTED, REDACTED]
    assert out["x"]["y"]["ssn_number"] == REDACTED
    with pytest.raises(ValueError):
        Redactor.from_options(paths=[""])


def test_untouched_bodies_keep_their_bytes() -> None:
    raw = b'{ "jsonrpc":"2.0", "id":1, "result": {"a": 1} }'
    assert R.body(raw) == (raw, False)


def test_forms_urls_and_fallback() -> None:
    raw, changed = R.body(
        b"grant_type=authorization_code&code=abc&redirect_uri=x",
        "application/x-www-form-urlencoded",
    )
    assert changed and raw == b"grant_type=authorization_code&code=[REDACTED]&redirect_uri=x"
    assert R.url("https://h/cb?code=abc&state=s") == "https://h/cb?code=[REDACTED]&state=s"
    assert R.url("https://h/p?x=1") == "https://h/p?x=1"
    assert R.url("https://h/p?key=abc&alt=json") == "https://h/p?key=[REDACTED]&alt=json"
    broken = b'{"jsonrpc":"2.0","params":{"password":"hunter2","x":"y"'  # cut short: not JSON
    raw, changed = R.body(broken)
    assert changed and b"hunter2" not in raw and b'"x":"y"' in raw
    raw, changed = R.body(b"token=abc123 and Authorization: Bearer abcdefghijkl")
    assert changed and b"abc123" not in raw and b"abcdefghijkl" not in raw


def test_frames_marked_and_channels() -> None:
    f = Frame(
        Direction.C2S,
        Channel.STDIO,
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"password":"p"}}\n',
        1,
        1.0,
    )
    out = R.frame(f)
    assert out.extra["redacted"] is True and out.raw.endswith(b"\n") and b'"p"' not in out.raw
    same = Frame(Direction.S2C, Channel.SSE, b'{"jsonrpc":"2.0","id":1,"result":{}}', 1, 1.0)
    assert R.frame(same) is same
    err = Frame(Direction.S2C, Channel.STDERR, b"login password=hunter2 ok\n", 1, 1.0)
    assert b"hunter2" not in R.frame(err).raw


def test_policy_through_the_environment() -> None:
    r = Redactor.from_options(enabled=False, headers=["X-A"], paths=["a.b"])
    back = redactor_from_env({ENV_REDACT: r.to_env()})
    assert back is not None and back.enabled is False
    assert back.extra_headers == frozenset({"x-a"}) and back.paths == (("a", "b"),)
    assert redactor_from_env({}) is None
    garbled = redactor_from_env({ENV_REDACT: "{not json"})
    assert garbled is not None and garbled.enabled  # never silently off


@pytest.mark.parametrize("offset", [0, (1 << 20) - 3, (1 << 20) - 8, (1 << 20) + 5, (2 << 20) - 1])
def test_the_prefilter_sees_a_word_across_its_windows_in_a_huge_body(offset: int) -> None:
    """Bodies past 1 MiB are searched a window at a time: a word cut by a window edge counts."""
    body = bytearray(b"x" * ((2 << 20) + 100))
    body[offset : offset + 10] = b'"PassWord"'
    assert Redactor().needs_look(bytes(body))
    assert Redactor().needs_look(body)
    assert not Redactor().needs_look(b"x" * ((2 << 20) + 100))


def test_the_prefilter_of_a_read_matches_the_prefilter_of_its_lines() -> None:
    """What the recorder relies on: a read is clean exactly when every line of it is."""
    lines = [
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":%d}}\n' % i
        for i in range(200)
    ]
    r = Redactor()
    assert not any(r.needs_look(line) for line in lines) and not r.needs_look(b"".join(lines))
    for secret in (b'"API-Key"', b"client_SECRET", b'"\\u0070w"', b"Authorization", b"code="):
        dirty = [*lines[:100], lines[100].replace(b"data", secret), *lines[101:]]
        assert r.needs_look(dirty[100]) and r.needs_look(b"".join(dirty)), secret


def test_the_prefilter_lets_progress_tokens_pass_and_still_sees_real_tokens() -> None:
    """``_meta.progressToken`` (every 2026 request and progress notification) is plumbing the
    redactor never touches; it used to send every such frame to the parser. A key that only
    contains the word, or a real token beside it, still does (small bodies and big reads)."""
    r = Redactor()
    call = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "x", "arguments": {}, "_meta": {"progressToken": "p-1"}},
        }
    ).encode()
    progress = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}'
    for clean in (call, progress, (call + b"\n") * 200):
        assert not r.needs_look(clean)
    for dirty in (
        b'{"a":{"myProgressToken":"s3cr3t"}}',
        b'{"progressToken":1,"access_token":"y"}',
        (call + b"\n") * 200 + b'{"a":{"myProgressToken":"s3cr3t"}}\n',
    ):
        assert r.needs_look(dirty), dirty[-60:]
    assert r.json_value({"a": {"myProgressToken": "s3cr3t"}})[0] == {
        "a": {"myProgressToken": "[REDACTED]"}
    }


def test_every_prefilter_word_is_seen_in_a_relay_read_whatever_its_spelling() -> None:
    """The read-sized prefilter searches grouped words by a shared part first: each word,
    in upper case or with ``-``/``_`` inside, still sends the read to the parser."""
    from mcp_proxy.redact import _PREFILTER_WORDS

    r = Redactor()
    clean = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":1}}\n' * 60
    assert not r.needs_look(clean)
    for word in _PREFILTER_WORDS:
        for spelling in (word, word.upper(), word[:2] + b"_" + word[2:]):
            if spelling == word[:2] + b"_" + word[2:] and word[:1] == b"\\":
                continue  # "\_u" is no escape
            body = clean + b'{"x":"' + spelling + b'"}\n' + clean
            assert r.needs_look(body), spelling


#: Bodies the full redactor changes but the prefilter once let through in clear (session 5):
#: the fallback's ``Bearer``/``Basic`` and ``name=value`` rules had no word, a short body was
#: searched unfolded (``o_t_p`` is ``otp`` to the redactor), the plumbing key was cut out with
#: the quote a ``"code"`` field shared, KELVIN SIGN lower-cases to ``k``, and a form's names
#: may be percent-encoded.
MISSED = [
    (Channel.STDERR, b"retrying with Bearer abcdefghijklmnop1234\n", None),
    (Channel.STDERR, b"login as basic dXNlcjpwYXNzd29yZA==\n", None),
    (Channel.STDIO, b"pin=1234 otp=987654 ssn=123-45-6789 auth=xyz\n", None),
    (Channel.STDIO, b'{"progressToken"code":"abc123"}\n', None),
    (Channel.STDIO, b'{"jsonrpc":"2.0","id":1,"result":{"o_t_p":"123456"}}\n', None),
    (Channel.STDIO, '{"jsonrpc":"2.0","id":1,"result":{"to\u212aen":"s3"}}\n'.encode(), None),
    (Channel.HTTP, b"p%69n=1234&x=1", "application/x-www-form-urlencoded"),
]


@pytest.mark.parametrize("case", MISSED, ids=range(len(MISSED)))
def test_the_prefilter_never_lets_through_what_the_redactor_would_change(
    case: tuple[Channel, bytes, str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    channel, raw, ctype = case
    extra = {"content_type": ctype} if ctype else {}
    frame = Frame(Direction.C2S, channel, raw, 0, 0.0, extra=extra)
    r = Redactor()
    looked = r.frame(frame)
    assert looked.extra.get("redacted") and looked.raw != raw
    if channel != Channel.HTTP:
        # The same body among many clean ones: a relay's read, and an import's batch.
        clean = (
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7}}\n'
        )
        assert r.needs_look(clean * 100 + raw + clean * 100)
        assert r.suspects([clean] * 300 + [raw] + [clean] * 40) == [300]
    # What the redactor does with no prefilter at all: the same.
    monkeypatch.setattr(Redactor, "needs_look", lambda self, raw: True)
    assert Redactor().frame(frame).raw == looked.raw


# ----------------------------------------------------------- issue #22, defect 19: end to end
#: Secrets a server writes on stderr (one a line) and in a tool result's text, each a shape the
#: value rules must catch; ``api_key: VALUE`` is the one that reached the disk in clear.
PLANTED_STDERR = [
    "api_key: s3cr3t-A1",
    "API-KEY = s3cr3t-A2",
    "Authorization: Bearer s3cr3t-A3xyz",
    "login password=s3cr3t-A4 ok",
    "{'client_secret': 's3cr3t-A5'}",
    '{"access_token": "s3cr3t-A6"}',
    "pin : s3cr3t-A7",
    "retrying with token s3cr3t-A8-0123",
    "otp\t= s3cr3t-A9",
]
PLANTED_TEXT = "config: api_key: s3cr3t-B1, auth=s3cr3t-B2; Bearer s3cr3t-B3xyz"
LEAKY_SERVER = f"""
import json, sys
for line in {PLANTED_STDERR!r}:
    print(line, file=sys.stderr, flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    result = {{"content": [{{"type": "text", "text": {PLANTED_TEXT!r}}}]}}
    if msg["method"] == "initialize":
        result = {{"protocolVersion": "2025-11-25", "capabilities": {{"tools": {{}}}},
                  "serverInfo": {{"name": "leaky", "version": "1"}}}}
    print(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "result": result}}), flush=True)
"""


@pytest.mark.timeout(90)
def test_secrets_on_stderr_and_in_tool_text_never_reach_the_disk(tmp_path: Path) -> None:
    """Through the real stdio relay into SQLite: no planted value in the database file, its
    WAL (looked at while the relay still runs, then after) or ``mcptape export``."""
    (tmp_path / "rec").mkdir()
    db = tmp_path / "rec" / "leak.sqlite"
    # The script is a file: on the command line its text would be the session's ``command``.
    server = tmp_path / "leaky_server.py"
    server.write_text(LEAKY_SERVER)
    argv = [*mcptape_cmd(), "record", "--db", str(db), "--name", "leaky", "--"]
    proc = subprocess.Popen(
        [*argv, sys.executable, str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "h"}}
    call = {"name": "show_config", "arguments": {}}
    for i, (method, params) in enumerate([("initialize", init), ("tools/call", call)], 1):
        msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        proc.stdin.write(json.dumps(msg).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == i
    want = len(PLANTED_STDERR) + 4  # the stderr lines, two requests, two responses

    def recorded() -> bool:
        return len(rdb.rows(db, "SELECT seq FROM frames")) >= want

    try:
        assert rdb.wait_until(recorded, timeout=30)
        live = {p.name: p.read_bytes() for p in db.parent.iterdir()}  # db, -wal, -shm
        assert f"{db.name}-wal" in live or db.name in live
    finally:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()
    after = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    exported = run_mcptape("export", "leaky", "--db", str(db), "-o", "-", "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    for where, data in [*live.items(), *after.items(), ("export", exported.stdout.encode())]:
        assert b"s3cr3t" not in data, (where, data[data.find(b"s3cr3t") - 60 :][:120])
    stored = [bytes(r["raw"]) for r in rdb.rows(db, "SELECT raw FROM frames ORDER BY seq")]
    assert b"api_key: [REDACTED]\n" in stored
    assert any(b"api_key: [REDACTED], auth=[REDACTED]; Bearer [REDACTED]" in r for r in stored)


@pytest.mark.parametrize("unit", [b"a:", b"token:", b'pin: "', b"x=", b"token aaaaaaaaa1 "])
def test_the_value_rules_take_linear_time_on_hostile_text(unit: bytes) -> None:
    """A name's value is read only for a credential's name, and once: 256 KiB of ``a:a:a:…``
    after a ``token`` (a stderr line a hostile server may write) took minutes when every name
    read its value up to the end of the run; it takes well under a second."""
    import time

    raw = b"token " + unit * ((256 << 10) // len(unit))
    started = time.process_time()
    Redactor().frame(Frame(Direction.S2C, Channel.STDERR, raw + b"\n", 0, 0.0))
    assert time.process_time() - started < 15.0
