"""Error names per era, decoded error data, WWW-Authenticate, and the routing-header rules
checked against the official SDK's own implementation."""

from __future__ import annotations

import base64
import math
import random
from typing import Any

import pytest

from mcp_proxy.analysis.routing import decode_header_value, invalid_x_mcp_header, routing_problems
from mcp_proxy.analysis.stats import MethodStats, merge_stats, summary
from mcp_proxy.analysis.taxonomy import (
    classify_error,
    decode_error_data,
    parse_www_authenticate,
    status_expected,
)
from tests.analysis.streamed import method_stats

INIT, M = "initialize", "2026-07-28"


@pytest.mark.parametrize(
    ("code", "era", "method", "message", "expected"),
    [
        (-32700, INIT, None, "", "jsonrpc.parse_error"),
        (-32601, M, "ping", "", "jsonrpc.method_not_found"),
        (-32601, INIT, "server/discover", "", "lifecycle.discover_fallback"),
        (-32602, INIT, "tools/call", "Unknown tool: nope", "jsonrpc.unknown_tool"),
        (-32602, INIT, "tools/call", "Tool 'x' not found", "jsonrpc.unknown_tool"),
        (
            -32602,
            INIT,
            "tools/call",
            "Invalid arguments: a must be a number",
            "jsonrpc.invalid_params",
        ),
        (-32602, M, "prompts/get", "Unknown prompt: p", "jsonrpc.unknown_prompt"),
        (-32602, M, "resources/read", "Resource test://x not found", "jsonrpc.resource_not_found"),
        (-32602, M, "tools/list", "Invalid cursor", "jsonrpc.invalid_params"),
        (-32002, INIT, "resources/read", "Resource not found", "jsonrpc.resource_not_found"),
        (-32002, M, "resources/read", "Resource not found", "jsonrpc.reserved_code"),
        (-32042, INIT, "tools/call", "", "mcp.url_elicitation_required"),
        (-32042, M, "tools/call", "", "jsonrpc.reserved_code"),
        (-32050, INIT, "tools/call", "", "jsonrpc.server_error"),
        (-32050, M, "tools/call", "", "jsonrpc.reserved_code"),
        (-32001, INIT, "tools/call", "", "jsonrpc.server_error"),
        (-32300, INIT, None, "", "jsonrpc.reserved_code"),
        (0, INIT, "prompts/get", "Unknown prompt: nope", "jsonrpc.application_error"),
        (1234, M, None, "", "jsonrpc.application_error"),
    ],
)
def test_classify_error_per_era(
    code: int, era: str, method: str | None, message: str, expected: str
) -> None:
    assert classify_error(code, message, era=era, method=method).code == expected


def test_error_data_is_decoded() -> None:
    assert (
        decode_error_data(-32022, {"supported": ["2026-07-28"], "requested": "2099-01-01"})
        == "server supports 2026-07-28; client requested 2099-01-01"
    )
    assert (
        decode_error_data(-32021, {"requiredCapabilities": {"sampling": {}, "roots": {}}})
        == "required client capabilities: roots, sampling"
    )
    assert decode_error_data(-32602, {"uri": "test://x"}) == "uri test://x"
    assert decode_error_data(-32603, "not a dict") == ""


def test_status_expectations_per_era() -> None:
    assert status_expected(M, -32602, is_result=False) == {400}
    assert status_expected(M, -32601, is_result=False) == {404}
    assert status_expected(M, -32603, is_result=False) == {200}
    assert status_expected(M, None, is_result=True) == {200}
    assert status_expected(INIT, -32602, is_result=False) is None  # any status for init-era errors
    assert status_expected(INIT, None, is_result=True) == {200}


def test_www_authenticate() -> None:
    v = 'Bearer resource_metadata="https://a.example/.well-known/oauth-protected-resource", scope="files:read files:write", error="invalid_token"'
    assert parse_www_authenticate(v) == {
        "scheme": "Bearer",
        "resource_metadata": "https://a.example/.well-known/oauth-protected-resource",
        "scope": "files:read files:write",
        "error": "invalid_token",
    }
    assert parse_www_authenticate(None) == {}


# ------------------------------------------------------------------ agreement with the SDK
SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
    {"type": "object", "properties": {"n": {"type": "number", "x-mcp-header": "N"}}},
    {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "Bad Token"}}},
    {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": 7}}},
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "x-mcp-header": "Dup"},
            "b": {"type": "string", "x-mcp-header": "dup"},
        },
    },
    {"type": "object", "items": {"type": "string", "x-mcp-header": "Deep"}},
    {"type": "object", "x-mcp-header": "Root"},
    {
        "type": "object",
        "properties": {
            "o": {"type": "object", "properties": {"k": {"type": "boolean", "x-mcp-header": "K"}}}
        },
    },
    {"type": "object", "anyOf": [{"properties": {"x": {"type": "string", "x-mcp-header": "X"}}}]},
    None,
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_x_mcp_header_validation_agrees_with_the_sdk(schema: Any) -> None:
    from mcp.shared.inbound import find_invalid_x_mcp_header

    assert (invalid_x_mcp_header(schema) is None) == (find_invalid_x_mcp_header(schema) is None)


def _b64(s: str) -> str:
    return "=?base64?" + base64.b64encode(s.encode()).decode() + "?="


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        _b64("zürich"),
        "=?base64?!!!?=",
        "=?base64?YQ?=",
        _b64("x") + " ",
        "",
        "=?BASE64?YQ==?=",
    ],
)
def test_header_value_codec_agrees_with_the_sdk(value: str) -> None:
    from mcp.shared.inbound import decode_header_value as sdk_decode

    assert decode_header_value(value) == sdk_decode(value)


PARAM_SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
    },
}


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        (
            {"region": "eu", "n": 3, "flag": True},
            {"mcp-param-region": "eu", "mcp-param-n": "3", "mcp-param-flag": "true"},
        ),
        ({"region": "eu", "n": 3}, {"mcp-param-region": "eu", "mcp-param-n": "3.0"}),
        ({"region": "eu", "n": 3}, {"mcp-param-region": "eu", "mcp-param-n": "3.5"}),
        ({"region": "zürich"}, {"mcp-param-region": _b64("zürich")}),
        ({"region": "zürich"}, {"mcp-param-region": "zurich"}),
        ({"region": "eu"}, {}),
        ({}, {"mcp-param-region": "eu"}),
        ({"region": None}, {}),
        ({"region": "eu", "flag": False}, {"mcp-param-region": "eu", "mcp-param-flag": "False"}),
        ({"region": ["eu"]}, {}),
    ],
)
def test_param_header_rules_agree_with_the_sdk(
    arguments: dict[str, Any], headers: dict[str, str]
) -> None:
    from mcp.shared.inbound import validate_mcp_param_headers

    sdk = validate_mcp_param_headers(PARAM_SCHEMA, arguments, headers)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "t", "arguments": arguments},
    }
    wire = [["mcp-method", "tools/call"], ["mcp-name", "t"], *([k, v] for k, v in headers.items())]
    ours = routing_problems(wire, body, input_schema=PARAM_SCHEMA)
    assert bool(ours) == (sdk is not None), (ours, sdk)


def test_routing_headers_method_name_and_duplicates() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"uri": "file:///ä.txt"},
    }
    good = [["Mcp-Method", "resources/read"], ["Mcp-Name", _b64("file:///ä.txt")]]
    assert routing_problems(good, body) == []
    assert routing_problems([["Mcp-Method", "tools/call"], good[1]], body) == [
        "Mcp-Method 'tools/call' but body method 'resources/read'"
    ]
    assert "Mcp-Name missing" in routing_problems(good[:1], body)[0]
    assert routing_problems([*good, ["mcp-method", "resources/read"]], body) == [
        "mcp-method sent 2 times"
    ]


# ------------------------------------------------------------------ stats
def test_percentiles_are_nearest_rank() -> None:
    s = summary({float(v): 1 for v in range(1, 101)})
    assert (s["p50"], s["p95"], s["p99"], s["max"], s["n"]) == (50, 95, 99, 100, 100)
    assert summary({7.0: 1})["p99"] == 7.0
    assert summary({}) == {"p50": None, "p95": None, "p99": None, "mean": None, "max": None, "n": 0}


def _nearest_rank(values: list[float], p: int) -> float:
    return values[max(1, math.ceil(p / 100 * len(values))) - 1]


def test_a_histogram_summarises_exactly_as_the_list_of_every_value() -> None:
    """Percentiles, mean and max of the histogram are those of the sorted list of every value
    (the mean summed in that order), whatever the repeats."""
    rng = random.Random(7)
    for size in (1, 2, 3, 19, 20, 21, 99, 100, 101, 1000):
        values = sorted(rng.choice([0.1, 0.15, 0.2, 0.001, 1.7, 123.456]) for _ in range(size))
        hist: dict[float, int] = {}
        for v in values:
            hist[v] = hist.get(v, 0) + 1
        s = summary(hist)
        assert (s["p50"], s["p95"], s["p99"]) == tuple(
            _nearest_rank(values, p) for p in (50, 95, 99)
        )
        assert s["mean"] == round(sum(values) / len(values), 3)
        assert (s["max"], s["n"]) == (values[-1], len(values))


def test_method_stats_count_outcomes_and_merge() -> None:
    from tests.analysis.cases import CASES

    a = CASES["jsonrpc.internal_error"][0]().analyze()
    b = CASES["tool.error_result"][0]().analyze()
    st = merge_stats([method_stats(a.exchanges), method_stats(b.exchanges)])
    call: MethodStats = st[("c2s", "tools/call", None)]
    assert (call.count, call.errors, call.tool_errors, call.ok) == (2, 1, 1, 0)
    assert call.error_rate == 0.5
    d = call.as_dict()
    assert d["latency_ms"]["n"] == 2 and d["latency_ms"]["p50"] is not None
    by_name = method_stats(b.exchanges, by_name=True)
    assert ("c2s", "tools/call", "echo") in by_name
