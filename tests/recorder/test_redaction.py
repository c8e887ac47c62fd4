"""Redaction is on by default for stdio too, through the real relay (issue 10, "Redaction on by
default, for every transport"): a password never reaches the database file or its WAL, the
server still gets the original bytes, and the opt-outs work and are visible.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import db as rdb
from tests.recorder.util import ECHO, record, session

SECRET_LINES = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"login",'
    b'"arguments":{"user":"ann","password":"hunter2"}}}\n',
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":'
    b'{"pass":"p-hunter2","passwd":"w-hunter2","credentials":"c-hunter2","auth":"a-hunter2",'
    b'"secret":"s-hunter2","client_secret":"cs-hunter2","private_key":"pk-hunter2",'
    b'"access_token":"at-hunter2","refresh_token":"rt-hunter2"}}}\n',
    b'{"jsonrpc":"2.0","id":3,"method":"ping"}\n',
    # A key spelt with a JSON escape is "password" once parsed: no prefilter word sees it.
    b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","arguments":'
    b'{"\\u0070assword":"e-hunter2"}}}\n',
]
PAYLOAD = b"".join(SECRET_LINES)


def _files(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def _run(db: Path, name: str, **kw: object) -> tuple[bytes, str]:
    proc = record(db, ECHO, name=name, **kw)  # type: ignore[arg-type]
    out, err = proc.communicate(PAYLOAD, timeout=60)
    assert proc.returncode == 0, err
    return out, err.decode()


@pytest.fixture(scope="module")
def redacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    db = tmp_path_factory.mktemp("red") / "rec.db"
    out, _ = _run(db, "default")
    return db, out


def test_a_stdio_password_never_reaches_the_database_or_its_wal(
    redacted: tuple[Path, bytes],
) -> None:
    db, out = redacted
    assert out == PAYLOAD  # the server got (and echoed) the original bytes
    assert b"hunter2" not in _files(db)
    s = session(db, "default")
    frames = rdb.frames(db, s["id"])
    assert len(frames) == 8
    marked = [(f["direction"], f["redacted"]) for f in frames]
    assert marked.count(("c2s", 1)) == 3 and marked.count(("s2c", 1)) == 3
    assert [f["redacted"] for f in frames if b'"ping"' in f["raw"]] == [None, None]
    args = json.loads(frames[0]["raw"])["params"]["arguments"]
    assert args == {"user": "ann", "password": "[REDACTED]"}  # what is not secret stays


def test_a_key_spelt_with_escapes_is_redacted(redacted: tuple[Path, bytes]) -> None:
    db, _ = redacted
    s = session(db, "default")
    escaped = [f for f in rdb.frames(db, s["id"]) if b'"id":4' in f["raw"]]
    assert len(escaped) == 2 and all(f["redacted"] == 1 for f in escaped)
    assert json.loads(escaped[0]["raw"])["params"]["arguments"] == {"password": "[REDACTED]"}


def test_every_listed_field_name_is_redacted(redacted: tuple[Path, bytes]) -> None:
    db, _ = redacted
    s = session(db, "default")
    second = next(f for f in rdb.frames(db, s["id"]) if b'"id":2' in f["raw"])
    args = json.loads(second["raw"])["params"]["arguments"]
    assert set(args.values()) == {"[REDACTED]"}
    assert len(args) == 9


@pytest.mark.parametrize(
    ("how", "kw"),
    [
        ("flag", {"options": ("--no-redact",)}),
        ("env", {"env": {"MCPTAPE_REDACT": "0"}}),
    ],
)
def test_opting_out_records_in_clear_and_says_so(
    tmp_path: Path, how: str, kw: dict[str, object]
) -> None:
    db = tmp_path / "rec.db"
    out, err = _run(db, how, **kw)
    assert out == PAYLOAD
    assert b"hunter2" in _files(db)
    assert "redaction is OFF" in err
    s = session(db, how)
    assert "off" in json.loads(s["meta"])["redaction"]
    assert all(f["redacted"] is None for f in rdb.frames(db, s["id"]))


def test_a_credential_on_the_server_command_line_never_reaches_the_database(
    tmp_path: Path,
) -> None:
    """``mcptape record -- server --api-key X`` stored X in ``sessions.command`` (the frames
    were redacted, the command line was not)."""
    db = tmp_path / "argv.db"
    argv = [
        *ECHO,
        "--api-key",
        "argv-hunter2",
        "--token=tok-hunter2",
        "API_KEY=env-hunter2",
        "--verbose",
        "plain-arg",
    ]
    proc = record(db, argv, name="argv")
    _, err = proc.communicate(PAYLOAD, timeout=60)
    assert proc.returncode == 0, err
    assert b"hunter2" not in _files(db)
    command = session(db, "argv")["command"]
    if isinstance(command, str):
        command = json.loads(command)
    assert command[-6:] == [
        "--api-key",
        "[REDACTED]",
        "--token=[REDACTED]",
        "API_KEY=[REDACTED]",
        "--verbose",
        "plain-arg",
    ]


def test_described_headers_follow_each_policy_for_the_same_pairs() -> None:
    """The recorder describes a header set once per policy (httpraw's memo): the same pairs
    described under another policy, then the first again, get each policy's own columns."""
    from mcp_proxy.recorder.httpraw import describe
    from mcp_proxy.redact import Redactor

    pairs = ((b"Authorization", b"Bearer s3cret"), (b"X-Team", b"blue"))
    policies = [
        Redactor(enabled=True),
        Redactor(enabled=False),
        Redactor.from_options(headers=["X-Team"]),
    ]
    want = [
        [["Authorization", "Bearer [REDACTED]"], ["X-Team", "blue"]],
        [["Authorization", "Bearer s3cret"], ["X-Team", "blue"]],
        [["Authorization", "Bearer [REDACTED]"], ["X-Team", "[REDACTED]"]],
    ]
    for i in (0, 1, 2, 0, 2, 1):
        fields: dict[str, object] = {}
        describe(
            ("http://u", "http://l", "/mcp", list(pairs), False, pairs), fields, {}, policies[i]
        )
        assert fields["request_headers"] == want[i] and fields["response_headers"] == want[i]


def test_a_large_header_set_is_described_each_time_not_kept() -> None:
    """A peer's headers are not trusted to be small: a set past ``HEADER_MEMO_SET_BYTES`` is
    described (and redacted) as any other, but the memo does not keep it."""
    from mcp_proxy.limits import HEADER_MEMO_SET_BYTES
    from mcp_proxy.recorder.httpraw import describe, memo_sets
    from mcp_proxy.redact import Redactor

    red = Redactor(enabled=True)
    big = ((b"Authorization", b"Bearer s3cret"), (b"X-Big", b"x" * HEADER_MEMO_SET_BYTES))
    small = ((b"X-Small", b"y"),)
    fields: dict[str, object] = {}
    before = memo_sets()
    describe(("http://u", "http://l", "/mcp", big, False, small), fields, {}, red)
    assert fields["request_headers"] == [
        ["Authorization", "Bearer [REDACTED]"],
        ["X-Big", "x" * HEADER_MEMO_SET_BYTES],
    ]
    assert memo_sets() in (before + 1, 1)  # the small set only (or a memo emptied when full)
