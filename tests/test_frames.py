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
