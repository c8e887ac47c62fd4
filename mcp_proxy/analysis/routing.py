"""2026-07-28 routing headers, judged from a recording: pure functions, no I/O.

Streamable HTTP in 2026-07-28 mirrors parts of the JSON-RPC body into headers so that
intermediaries can route without parsing bodies: ``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name`` and one ``Mcp-Param-<Token>`` per ``tools/call`` argument whose input-schema property
carries ``x-mcp-header``. The rules here follow the transport specification as the official SDK
(``mcp.shared.inbound``) implements it, re-stated rather than imported: the analysis must not
depend on the SDK it judges, and ``import mcp`` costs most of a second. A test checks that both
agree on a table of cases. The ``=?base64?…?=`` codec is the one in :mod:`mcp_proxy.headers`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from mcp_proxy.analysis.facts import header_pairs
from mcp_proxy.headers import decode_header_value
from mcp_proxy.protocol import H_PARAM_PREFIX, ROUTING_HEADERS

X_MCP_HEADER = "x-mcp-header"
PARAM_PREFIX = H_PARAM_PREFIX.lower()
ROUTING = tuple(h.lower() for h in ROUTING_HEADERS)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PRIMITIVE = frozenset({"string", "integer", "boolean"})
_SINGLE = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_MAP = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
#: Methods whose body value is mirrored into ``Mcp-Name`` (and the params key holding it).
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def _positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position with its chain of ``properties`` keys (None once off that chain)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for kw, val in node.items():
            if kw == "properties" and isinstance(val, dict):
                for name, sub in val.items():
                    stack.append(((*path, str(name)) if path is not None else None, sub))
            elif kw in _SINGLE:
                stack.append((None, val))
            elif kw in _LIST and isinstance(val, list):
                stack.extend((None, sub) for sub in val)
            elif kw in _MAP and isinstance(val, dict):
                stack.extend((None, sub) for sub in val.values())


def invalid_x_mcp_header(schema: Any) -> str | None:
    """Why the ``x-mcp-header`` annotations of an input schema are invalid, or None if valid."""
    seen: dict[str, str] = {}
    for path, node in _positions(schema):
        if X_MCP_HEADER not in node:
            continue
        if not path:
            return f"{X_MCP_HEADER} at a position not reachable through properties keys only"
        where = ".".join(path)
        token = node[X_MCP_HEADER]
        if not isinstance(token, str):
            return f"property {where!r}: {X_MCP_HEADER} is a {type(token).__name__}, not a string"
        if not _TOKEN.fullmatch(token):
            return f"property {where!r}: {X_MCP_HEADER} {token!r} is not an RFC 9110 token"
        ptype = node.get("type")
        if ptype not in _PRIMITIVE:
            return (
                f"property {where!r}: {X_MCP_HEADER} on a {ptype!r} property (only string,"
                " integer and boolean may carry it)"
            )
        low = token.lower()
        if low in seen:
            return f"{X_MCP_HEADER} {token!r} on {where!r} repeats the one on {seen[low]!r}"
        seen[low] = where
    return None


def _annotated(schema: Any) -> Iterator[tuple[tuple[str, ...], str, dict[str, Any]]]:
    for path, node in _positions(schema):
        token = node.get(X_MCP_HEADER)
        if path and isinstance(token, str):
            yield path, token, node


def _value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _render(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        try:
            return str(value)
        except ValueError:
            return None
    return None


def _matches(ptype: Any, value: Any, rendered: str, decoded: str) -> bool:
    if (
        ptype == "integer"
        and not isinstance(value, bool)
        and (isinstance(value, int) or (isinstance(value, float) and value.is_integer()))
        and _DECIMAL.fullmatch(decoded)
    ):
        whole, _, frac = decoded.partition(".")
        if frac and set(frac) != {"0"}:
            return False
        try:
            return int(whole) == int(value)
        except ValueError:
            return False
    return decoded == rendered


def routing_problems(
    headers: list[list[str]] | None,
    body: Mapping[str, Any],
    *,
    input_schema: Any = None,
) -> list[str]:
    """What is wrong with the routing headers of one 2026-07-28 request, as readable lines.

    ``headers`` are the request's ``[[name, value], …]`` in wire order (duplicates matter);
    ``input_schema`` is the tool's schema from the session's ``tools/list``, when known (without
    it the ``Mcp-Param-*`` headers cannot be judged and are left alone).
    """
    problems: list[str] = []
    pairs = header_pairs(headers)
    folded: dict[str, str] = {}
    counts: dict[str, int] = {}
    for k, v in pairs:
        counts[k] = counts.get(k, 0) + 1
        folded.setdefault(k, v)
    for name in ROUTING:
        if counts.get(name, 0) > 1:
            problems.append(f"{name} sent {counts[name]} times")
    method = body.get("method")
    if "mcp-method" not in folded:
        problems.append(f"Mcp-Method missing (body method {method!r})")
    elif folded["mcp-method"] != method:
        problems.append(f"Mcp-Method {folded['mcp-method']!r} but body method {method!r}")
    raw_params = body.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    name_key = NAME_BEARING.get(str(method))
    if name_key is not None:
        body_value = params.get(name_key)
        if body_value is not None:
            raw = folded.get("mcp-name")
            if raw is None:
                problems.append(f"Mcp-Name missing (body {name_key} {body_value!r})")
            elif decode_header_value(raw) != body_value:
                problems.append(f"Mcp-Name {raw!r} but body {name_key} {body_value!r}")
    if (
        method == "tools/call"
        and input_schema is not None
        and invalid_x_mcp_header(input_schema) is None
    ):
        raw_args = params.get("arguments")
        arguments: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        for path, token, node in _annotated(input_schema):
            hname = PARAM_PREFIX + token.lower()
            raw = folded.get(hname)
            value = _value_at(arguments, path)
            arg = ".".join(path)
            if raw is not None and counts.get(hname, 0) > 1:
                problems.append(f"Mcp-Param-{token} sent {counts[hname]} times")
                continue
            if value is None:
                if raw is not None:
                    problems.append(f"Mcp-Param-{token} present but argument {arg!r} is absent")
                continue
            rendered = _render(value)
            if rendered is None:
                if raw is not None:
                    problems.append(f"Mcp-Param-{token} present for unrenderable argument {arg!r}")
                continue
            if raw is None:
                problems.append(f"Mcp-Param-{token} missing (argument {arg!r} = {rendered!r})")
                continue
            decoded = decode_header_value(raw)
            if decoded is None:
                problems.append(f"Mcp-Param-{token} {raw!r} is a malformed =?base64?…?= value")
            elif not _matches(node.get("type"), value, rendered, decoded):
                problems.append(
                    f"Mcp-Param-{token} {decoded!r} but argument {arg!r} = {rendered!r}"
                )
    return problems
