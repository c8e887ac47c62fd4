import random

from mcp_proxy.framing import LineFramer, SSEParser


def _chunks(data: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 9)
        out.append(data[i : i + n])
        i += n
    return out


def test_line_framer_is_byte_exact_for_any_chunking() -> None:
    data = b'{"a":1}\nnoise\r\n\n\xff\xfe bad utf8\n' + b"x" * 1000 + b"\npartial tail"
    rng = random.Random(7)
    for _ in range(200):
        f = LineFramer()
        lines: list[bytes] = []
        for c in _chunks(data, rng):
            lines += f.feed(c)
        rest = f.flush()
        assert b"".join(lines) + (rest or b"") == data
        assert rest == b"partial tail"
        assert all(line.endswith(b"\n") for line in lines)
        assert lines[1] == b"noise\r\n"


def test_line_framer_cuts_only_at_lf_for_any_read_size() -> None:
    """Reads with and without CR (the splitlines path) give the lines of a split at LF alone:
    CR, CRLF, vertical tab, form feed and NEL stay inside their line."""
    data = (
        b"".join(b'{"jsonrpc":"2.0","method":"n","params":{"i":%d}}\n' % i for i in range(300))
        + b"a\rb\r\nc\x0bd\x0c\x1c\x1d\x1e\x85e\n\n\n"
        + b"z" * 5000
        + b"\ntail"
    )
    want = [part + b"\n" for part in data.split(b"\n")[:-1]]
    rng = random.Random(3)
    for _ in range(100):
        f = LineFramer()
        lines: list[bytes | bytearray] = []
        i = 0
        while i < len(data):
            n = rng.choice([1, 2, 50, 700, 4096, 65536])
            lines += f.feed(data[i : i + n])
            i += n
        assert lines == want and f.flush() == b"tail"


def test_line_framer_big_line_in_one_piece() -> None:
    f = LineFramer()
    big = b"y" * (5 << 20)
    out = []
    for i in range(0, len(big), 65536):
        out += f.feed(big[i : i + 65536])
    assert out == []
    assert f.pending == len(big)
    assert f.feed(b"\n") == [big + b"\n"]
    assert f.flush() is None


SSE = (
    b": ping - 2026-11-30\r\n\r\n"
    b'id: 1\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\r\n\r\n'
    b"id: prime\r\ndata:\r\nretry: 3000\r\n\r\n"
    b"data: line1\ndata: line2\n\n"
    b"event: endpoint\rdata: /messages/?session_id=abc\r\r"
    b"data: cut"
)


def test_sse_parser_events_and_raw_bytes_for_any_chunking() -> None:
    rng = random.Random(3)
    for _ in range(300):
        p = SSEParser()
        events = []
        for c in _chunks(SSE, rng):
            events += p.feed(c)
        tail = p.flush()
        assert tail is not None
        assert b"".join(e.raw for e in events) + tail.raw == SSE
        assert [e.comment_only for e in events] == [True, False, False, False, False]
        assert events[1].id == "1" and events[1].event == "message"
        assert events[1].data == b'{"jsonrpc":"2.0","id":1,"result":{}}'
        assert events[2].retry == 3000 and events[2].data == b""
        assert events[3].data == b"line1\nline2"
        assert events[4].event == "endpoint" and events[4].data == b"/messages/?session_id=abc"
        assert tail.data == b"cut"


def test_sse_crlf_split_across_chunks_keeps_every_byte() -> None:
    p = SSEParser()
    ev = p.feed(b"data: a\r\n\r")
    assert len(ev) == 1
    ev2 = p.feed(b"\ndata: b\r\n\r\n")
    assert len(ev2) == 1 and ev2[0].data == b"b"
    assert ev[0].raw + ev2[0].raw == b"data: a\r\n\r\ndata: b\r\n\r\n"
