"""``frames.classify``: whatever the bytes, it answers (never raises), the same way each time and
whatever buffer type holds them."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.frames import Channel, Kind, classify

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGES = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0")},
    optional={
        "id": st.integers() | st.text(max_size=6) | st.none() | st.floats(allow_nan=False),
        "method": st.text(max_size=12) | st.integers(),
        "params": JSON_VALUES,
        "result": JSON_VALUES,
        "error": st.fixed_dictionaries({"code": st.integers(), "message": st.text(max_size=8)})
        | JSON_VALUES,
    },
)
FRAMES = st.one_of(
    st.binary(max_size=200),
    MESSAGES.map(lambda m: json.dumps(m).encode() + b"\n"),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.lists(MESSAGES, max_size=3).map(lambda b: json.dumps(b).encode()),  # a batch
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),  # nesting past the parsers
    st.integers(20, 400).map(lambda n: b'{"id":' + b"9" * n + b"}"),  # long numbers
)
CHANNELS = st.sampled_from([*Channel, "stdio"])


@given(FRAMES, CHANNELS)
def test_classify_never_raises_and_is_deterministic(raw: bytes, channel: Channel | str) -> None:
    first = classify(raw, channel)
    assert isinstance(first.kind, Kind)
    assert classify(raw, channel) == first
    assert classify(bytearray(raw), channel) == first
    assert classify(memoryview(raw), channel) == first


@given(MESSAGES.map(lambda m: json.dumps(m).encode()))
def test_checked_changes_nothing_for_frames_without_long_numbers(raw: bytes) -> None:
    from mcp_proxy.frames import has_long_number

    if not has_long_number(raw):
        assert classify(raw, checked=True) == classify(raw)
