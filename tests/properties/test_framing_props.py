"""The line and SSE framers: any split of the bytes gives the frames of the bytes fed whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.framing import LineFramer, SSEEvent, SSEParser

#: Bytes rich in what framers cut on: LF, CR, blank lines, field names, colons.
_PIECES = st.sampled_from(
    [b"\n", b"\r", b"\r\n", b"data:", b"data: ", b"event: message", b"id: 7", b"retry: 10", b":"]
)
STREAMS = st.lists(st.one_of(_PIECES, st.binary(max_size=12)), max_size=40).map(b"".join)


def splits(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """``data`` cut at any set of offsets, or between every two bytes."""
    cuts = st.lists(st.integers(0, len(data)), max_size=12).map(sorted)
    anywhere = cuts.map(
        lambda c: [data[a:b] for a, b in zip([0, *c], [*c, len(data)], strict=True)]
    )
    return st.one_of(anywhere, st.just([data[i : i + 1] for i in range(len(data))]))


def line_frames(chunks: list[bytes]) -> tuple[list[bytes], bytes | None]:
    framer = LineFramer()
    lines = [bytes(line) for chunk in chunks for line in framer.feed(chunk)]
    rest = framer.flush()
    return lines, None if rest is None else bytes(rest)


def sse_events(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    last = parser.flush()
    return [*events, last] if last is not None else events


@given(st.data(), STREAMS)
def test_line_framer_any_split_gives_the_whole_feeds_lines(data: st.DataObject, raw: bytes) -> None:
    whole = line_frames([raw])
    assert line_frames(data.draw(splits(raw))) == whole
    lines, rest = whole
    assert b"".join(lines) + (rest or b"") == raw  # byte-exact
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)


def messages(events: list[SSEEvent]) -> list[tuple[bytes, str | None, str | None, int | None]]:
    return [(e.data, e.event, e.id, e.retry) for e in events if not e.comment_only]


@given(st.data(), STREAMS)
def test_sse_parser_any_split_gives_the_whole_feeds_events(data: st.DataObject, raw: bytes) -> None:
    """Same events, fields and bytes. Not the same ``raw`` per event in one case, by design
    (framing.py): a blank line's CRLF cut between CR and LF ends its event at the CR, and the LF
    leads the next event (or, at the end of the stream, comes out of ``flush`` alone)."""
    whole = sse_events([raw])
    split = sse_events(data.draw(splits(raw)))
    assert messages(split) == messages(whole)
    assert b"".join(e.raw for e in split) == b"".join(e.raw for e in whole) == raw
    if b"\r" not in raw:
        assert split == whole
