"""The context-cost estimate (pure)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy import tokens


def test_four_bytes_a_token_rounded_up():
    assert [tokens.estimate(n) for n in (0, 1, 4, 5, 400)] == [0, 1, 1, 2, 100]
    assert tokens.estimate(-3) == 0
    assert tokens.estimate_value("é") == 1  # '"é"': 4 bytes of UTF-8


def test_tools_cost_dearest_first_with_description_and_schema():
    result = {
        "tools": [
            {"name": "small", "inputSchema": {"type": "object"}},
            {"name": "wordy", "description": "x" * 400, "inputSchema": {"type": "object"}},
            "not a tool",
        ]
    }
    costs = tokens.tools_cost(result)
    assert [c.name for c in costs] == ["wordy", "small"]
    assert costs[0].description_tokens == 101  # 402 bytes with its quotes
    assert costs[1].description_tokens == 0 and costs[1].schema_tokens > 0
    assert tokens.tools_cost({"tools": "nope"}) == [] and tokens.tools_cost(None) == []


@given(
    st.recursive(
        st.none() | st.text() | st.integers(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=20,
    )
)
def test_a_value_costs_its_compact_json(value):
    n = tokens.estimate_value(value)
    assert n >= 1 and (n - 1) * 4 < len(
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    )
