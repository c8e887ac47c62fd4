"""Fast unit tests of ``mcp_proxy.bounded``'s inflater: the limit holds whatever the body says.

For any data, coding and limit: the output is at most ``limit`` bytes and is the head of the
body's full decompression; a truncated or garbage body returns what decoded before the break or
raises :class:`InflateError`, nothing else.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import brotli
import pytest
from backports import zstd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_proxy.bounded import InflateError, inflate
from mcp_proxy.limits import INFLATE_STEP, MAX_INFLATED_BODY, MAX_RECORDED_BODY


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def _two_gzip_members(data: bytes) -> bytes:
    half = len(data) // 2
    return gzip.compress(data[:half]) + gzip.compress(data[half:])


def _two_zstd_frames(data: bytes) -> bytes:
    half = len(data) // 2
    return zstd.compress(data[:half]) + zstd.compress(data[half:])


#: (coding, compress) — every way a body arrives that ``inflate`` must decode.
ENCODERS: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("gzip", gzip.compress),
    ("x-gzip", gzip.compress),
    ("gzip", _two_gzip_members),
    ("deflate", zlib.compress),
    ("deflate", _raw_deflate),
    ("br", brotli.compress),
    ("zstd", zstd.compress),
    ("zstd", _two_zstd_frames),
]

#: Encoders of more than one stream: cut between two, the body ends cleanly after the first.
MULTI = (_two_gzip_members, _two_zstd_frames)

bodies = st.one_of(
    st.binary(max_size=4096),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=16), st.integers(1, 3000)),
)
limits = st.integers(0, 5000)
encoders = st.sampled_from(ENCODERS)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_recording_limit_is_the_inflate_limit() -> None:
    assert MAX_INFLATED_BODY == MAX_RECORDED_BODY
    assert 0 < INFLATE_STEP <= MAX_INFLATED_BODY


@FAST
@given(data=bodies, limit=limits, enc=encoders)
def test_output_is_at_most_limit_and_a_prefix(
    data: bytes, limit: int, enc: tuple[str, Callable[[bytes], bytes]]
) -> None:
    coding, compress = enc
    got = inflate(compress(data), coding, limit)
    assert len(got.data) <= limit
    assert got.data == data[:limit]
    assert got.cut == (len(data) > limit)
    assert got.ended == (not got.cut)


@FAST
@given(data=bodies, limit=limits, enc=encoders, cut_at=st.floats(0, 1))
def test_truncated_body_gives_a_prefix_or_a_defined_error(
    data: bytes, limit: int, enc: tuple[str, Callable[[bytes], bytes]], cut_at: float
) -> None:
    coding, compress = enc
    packed = compress(data)
    short = packed[: int(len(packed) * cut_at)]
    try:
        got = inflate(short, coding, limit)
    except InflateError:
        return
    assert len(got.data) <= limit
    assert got.data == data[: len(got.data)]
    if len(short) < len(packed) and compress not in MULTI:
        # One stream cut anywhere (its trailer included) never reads as a clean end.
        assert not got.ended


@FAST
@given(junk=st.binary(max_size=2048), coding=st.sampled_from(["gzip", "deflate", "br", "zstd"]))
def test_garbage_never_raises_beyond_inflate_error(junk: bytes, coding: str) -> None:
    try:
        got = inflate(junk, coding, 1000)
    except InflateError:
        return
    assert len(got.data) <= 1000


@FAST
@given(data=bodies, enc=encoders, junk=st.binary(min_size=1, max_size=64))
def test_garbage_after_a_good_head_keeps_what_decoded(
    data: bytes, enc: tuple[str, Callable[[bytes], bytes]], junk: bytes
) -> None:
    coding, compress = enc
    try:
        got = inflate(compress(data) + junk, coding, 10_000)
    except InflateError:
        return
    assert got.data == data[: len(got.data)]


def test_unknown_coding_is_an_inflate_error() -> None:
    with pytest.raises(InflateError, match="compress"):
        inflate(b"abc", "compress")
    with pytest.raises(InflateError):
        inflate(b"not gzip at all", "gzip")


def test_exactly_the_limit_is_not_cut() -> None:
    body = b"x" * 1000
    for coding, compress in ENCODERS:
        got = inflate(compress(body), coding, 1000)
        assert (got.data, got.cut, got.ended) == (body, False, True), coding
        got = inflate(compress(body), coding, 999)
        assert (got.data, got.cut, got.ended) == (body[:999], True, False), coding


def _bomb(coding: str, size: int) -> bytes:
    """``size`` zeros compressed a MiB at a time (never held whole)."""
    zeros = bytes(1 << 20)
    if coding == "gzip":
        z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return b"".join(z.compress(zeros) for _ in range(size >> 20)) + z.flush()
    if coding == "br":
        b = brotli.Compressor(quality=1)
        return b"".join(b.process(zeros) for _ in range(size >> 20)) + b.finish()
    c = zstd.ZstdCompressor()
    return b"".join(c.compress(zeros) for _ in range(size >> 20)) + c.flush()


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_a_bomb_inflates_only_to_the_limit(coding: str) -> None:
    """256 MiB of zeros, compressed to well under a MiB, cost a 1 MiB limit and no more."""
    bomb = _bomb(coding, 256 << 20)
    assert len(bomb) < 1 << 20
    got = inflate(bomb, coding, 1 << 20)
    assert got.data == bytes(1 << 20) and got.cut and not got.ended
