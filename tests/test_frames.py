import json

import pytest

from mcp_proxy.frames import FULL_PARSE_LIMIT, Channel, Kind, classify, id_key, strip_line_end


@pytest.mark.parametrize(
    ("raw", "kind", "method", "msg_id"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n', Kind.REQUEST, "tools/list", "1"),
        (b'{"jsonrpc":"2.0","id":"1","method":"ping"}\n', Kind.REQUEST, "ping", '"1"'),
        (
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
            Kind.NOTIFICATION,
            "notifications/initialized",
            None,
        ),
        (b'{"jsonrpc":"2.0","id":7,"result":{}}\n', Kind.RESPONSE, None, "7"),
        (
            b'{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"x"}}\n',
            Kind.ERROR,
            None,
            "7",
        ),
        (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}',
            Kind.ERROR,
            None,
            None,
        ),
        (b'[{"jsonrpc":"2.0","id":1,"method":"a"}]\n', Kind.BATCH, None, None),
        (b'{"id":1,"method":"a"}\n', Kind.INVALID, None, None),
        (b'{"jsonrpc":"2.0","id":1}\n', Kind.INVALID, None, "1"),
        (b'{"jsonrpc":"2.0","id":true,"method":"a"}\n', Kind.INVALID, None, None),
        (
            b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}',
            Kind.INVALID,
            None,
            "1",
        ),
        (b"42\n", Kind.INVALID, None, None),
        (b"hello world\n", Kind.NOISE, None, None),
        (b'{"jsonrpc":"2.0","method":"x","params":"\xff\xfe"}\n', Kind.NOISE, None, None),
        (b"\n", Kind.EMPTY, None, None),
        (b"  \r\n", Kind.EMPTY, None, None),
    ],
)
def test_classify(raw: bytes, kind: Kind, method: str | None, msg_id: str | None) -> None:
    c = classify(raw)
    assert c.kind == kind
    assert c.method == method
    assert c.msg_id == msg_id


def test_error_code_is_extracted() -> None:
    c = classify(b'{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"Unknown tool: x"}}')
    assert c.error_code == -32602


def test_stderr_channel_is_never_parsed() -> None:
    assert classify(b'{"jsonrpc":"2.0","id":1,"method":"a"}\n', Channel.STDERR).kind == Kind.STDERR


def test_string_and_number_ids_stay_distinct() -> None:
    assert id_key(1) != id_key("1")
    assert id_key(1) == "1"
    assert json.loads(id_key("a\u00e9")) == "a\u00e9"


def test_strip_line_end() -> None:
    assert strip_line_end(b"x\r\n") == b"x"
    assert strip_line_end(b"x\n") == b"x"
    assert strip_line_end(b"x") == b"x"


def _huge(prefix: bytes, suffix: bytes) -> bytes:
    return prefix + b"a" * (FULL_PARSE_LIMIT + 10) + suffix


def test_huge_frames_are_classified_from_head_and_tail() -> None:
    resp = classify(
        _huge(b'{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"', b'"}]}}\n')
    )
    assert (resp.kind, resp.msg_id, resp.partial) == (Kind.RESPONSE, "5", True)
    req = classify(
        _huge(b'{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{"x":"', b'"}}\n')
    )
    assert (req.kind, req.method, req.msg_id) == (Kind.REQUEST, "tools/call", '"r"')
    note = classify(
        _huge(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"x":"', b'"}}')
    )
    assert note.kind == Kind.NOTIFICATION
    err = classify(_huge(b'{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"', b'"}}'))
    assert (err.kind, err.error_code) == (Kind.ERROR, -32603)
    assert classify(_huge(b"not json ", b" at all\n")).kind == Kind.NOISE
    # a nested "method" key after "result" must not turn a response into a request
    tricky = classify(_huge(b'{"jsonrpc":"2.0","id":9,"result":{"method":"x","v":"', b'"}}'))
    assert tricky.kind == Kind.RESPONSE


# --------------------------------------------------------------------------------------------
# The fast path (orjson) must classify exactly as json does: the recorder relies on one answer.
TRICKY = [
    b'{"jsonrpc":"2.0","id":8,"error":{"code":%d,"message":"big"}}\n' % (2**70),
    b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % (2**64),
    b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % (2**63 - 1),
    b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % (-(2**63)),
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":7,"method":"tools/\\udfff"}\n',
    b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":-0,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}\n',
    b'{"jsonrpc":"2.0","method":"m","params":[Infinity]}\n',
    b'{"jsonrpc":"2.0","id":"a\\"b","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":"caf\xc3\xa9","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":"tab\\there","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":"del\x7f","method":"ping"}\n',
    b'{"jsonrpc":"2.0","id":"raw\ttab","method":"ping"}\n',
    b'{"jsonrpc":"2.0","method":"\xed\xa0\x80"}\n',
    b'{"jsonrpc":"2.0","method":"x"} trailing\n',
    b'{"jsonrpc":"2.0","method":"x"}\r\n',
    b'{"jsonrpc":"2.0","method":"x"}\x0c\n',
    b"[" * 2000 + b"]" * 2000 + b"\n",
    b'{"a":' * 1100 + b"1" + b"}" * 1100 + b"\n",
    b'{"jsonrpc":"2.0","id":1,"error":{"code":true,"message":"m"}}\n',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":1.0,"message":"m"}}\n',
    b'{"jsonrpc":"2.0","id":{"a":1},"method":"x"}\n',
    b'{"jsonrpc":"2.0","method":1}\n',
    b'{"jsonrpc":2.0,"method":"x"}\n',
    b"[]\n",
    b"{}\n",
    b'"just a string"\n',
]


def _random_messages(n: int) -> list[bytes]:
    import random

    rnd = random.Random(12)
    values: list[object] = [
        None, True, False, 0, -1, 2**53, 2**63, 2**64 + 1, -(2**70), 1.5, -0.0, 1e-300,
        "", "x", "a\"b", "\\", "é", "\u2028", "\U0001f600", "\x00", "\x7f",
    ]  # fmt: skip

    def value(depth: int) -> object:
        r = rnd.random()
        if depth > 2 or r < 0.5:
            return rnd.choice(values)
        if r < 0.75:
            return [value(depth + 1) for _ in range(rnd.randint(0, 3))]
        return {rnd.choice(["a", "id", "code", "method"]): value(depth + 1) for _ in range(2)}

    out = []
    for _ in range(n):
        msg: dict[str, object] = {"jsonrpc": rnd.choice(["2.0", "2.0", "1.0"])}
        for key in ("id", "method", "result", "error", "params"):
            if rnd.random() < 0.5:
                msg[key] = value(0)
        if rnd.random() < 0.3:
            msg["error"] = {"code": rnd.choice(values), "message": "m"}
        if rnd.random() < 0.2:
            msg["method"] = rnd.choice(["ping", "tools/call", "é/x"])
        text = json.dumps(msg, ensure_ascii=rnd.random() < 0.5)
        out.append(text.encode("utf-8", "surrogatepass") + b"\n")
    return out


def _facts(c: object) -> tuple[object, ...]:
    return (
        c.kind,  # type: ignore[attr-defined]
        c.method,  # type: ignore[attr-defined]
        c.msg_id,  # type: ignore[attr-defined]
        c.error_code,  # type: ignore[attr-defined]
        c.partial,  # type: ignore[attr-defined]
        c.problem,  # type: ignore[attr-defined]
        repr(c.message),  # type: ignore[attr-defined]  # repr: 1 and 1.0, -0.0 and 0 differ
    )


def test_the_fast_parser_classifies_exactly_as_json_does(monkeypatch: pytest.MonkeyPatch) -> None:
    import mcp_proxy.frames as frames

    corpus = TRICKY + _random_messages(3000)
    fast = [_facts(classify(raw)) for raw in corpus]
    checked = [
        _facts(classify(raw, checked=True)) for raw in corpus if not frames.has_long_number(raw)
    ]

    def refuse(_data: bytes) -> object:
        raise ValueError("json only")

    monkeypatch.setattr(frames, "_orjson_loads", refuse)
    slow = [_facts(classify(raw)) for raw in corpus]
    assert [f for f, s in zip(fast, slow, strict=True) if f != s] == []
    assert checked == [
        s for raw, s in zip(corpus, slow, strict=True) if not frames.has_long_number(raw)
    ]
    # the corpus reaches every kind the fast path can answer
    assert {f[0] for f in fast} >= {Kind.REQUEST, Kind.NOTIFICATION, Kind.RESPONSE, Kind.ERROR,
                                    Kind.INVALID, Kind.BATCH, Kind.NOISE, Kind.UNDECODABLE}  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"jsonrpc":"2.0","method":"x"}'.encode("utf-16-le"), "not JSON"),
        ('["x"]\n'.encode("utf-16-le"), "not JSON"),
        (b'{\x00"a":1}', "not JSON"),
        (b"[\x00\xed\xa0\x80]", "not valid UTF-8"),  # a lone surrogate
        (b"{\x00\xff}", "not valid UTF-8"),
    ],
)
def test_a_nul_after_an_opening_bracket_is_never_json(raw: bytes, problem: str) -> None:
    # A NUL is JSON nowhere: such bytes are noise, never sniffed as UTF-16/32 JSON.
    c = classify(raw)
    assert (c.kind, c.problem, c.message) == (Kind.NOISE, problem, None)


def test_a_long_digit_run_is_found_within_a_line_never_across() -> None:
    from mcp_proxy.frames import has_long_number

    assert has_long_number(b'{"id":1234567890123456789}')
    assert not has_long_number(b'{"id":123456789012345678}')
    assert not has_long_number(b"123456789\n1234567890\n")


@pytest.mark.parametrize(
    "value",
    [0, -5, 2**63, 2**80, "", "abc", 'a"b', "a\\b", "tab\t", "del\x7f", "é", "\ud800", "😀", 1.5],
)
def test_id_key_shortcuts_write_what_json_writes(value: object) -> None:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"))
    assert id_key(value) == text


def test_a_frame_survives_pickling_whole() -> None:
    import copy
    import pickle

    from mcp_proxy.frames import Direction, Frame

    for channel in Channel:
        f = Frame(Direction.S2C, channel, bytearray(b"x\n"), 5, 1.5, False, 7, "i", "e", {"a": [1]})
        back = pickle.loads(pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == f and back.direction is Direction.S2C and back.channel is channel
        assert type(back.raw) is bytearray
        deep = copy.deepcopy(f)
        assert deep == f and deep.extra is not f.extra
