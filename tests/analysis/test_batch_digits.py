"""The decoder looks for runs of 19+ digits once per batch of rows (``Decoder.feed_shaped``):
a batch with such a run anywhere still gets json's exact integers, and a clean batch orjson's
values (the same ones)."""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.analysis.facts import Decoder

BIG = 123456789012345678901234  # past 64 bits: orjson would read it as a float


def _shapes(_shape: int) -> tuple[str, str, str, str]:
    return ("c2s", "stdio", "request", "tools/call")


def _row(seq: int, params: dict[str, Any]) -> tuple[Any, ...]:
    body = {"jsonrpc": "2.0", "id": seq, "method": "tools/call", "params": params}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return (seq, 1.0, seq, 0, str(seq), None, len(raw), 1, 0, raw, None, None)


def test_a_long_integer_in_a_batch_keeps_its_exact_value() -> None:
    d = Decoder()
    d.feed_shaped([_row(1, {"name": "a"}), _row(2, {"n": BIG}), _row(3, {"n": 7})], _shapes)
    got = [m.params for m in d.msgs]
    assert got == [{"name": "a"}, {"n": BIG}, {"n": 7}]
    assert type(got[1]["n"]) is int


def test_a_clean_batch_parses_the_same() -> None:
    d = Decoder()
    d.feed_shaped([_row(1, {"n": 10**17}), _row(2, {"x": [1.5, "q12345"]})], _shapes)
    assert [m.params for m in d.msgs] == [{"n": 10**17}, {"x": [1.5, "q12345"]}]
