"""What a message costs a model's context, estimated: about four bytes of JSON a token.

An estimate, and named one wherever it is shown: real tokenizers differ by model and by
language (English prose runs near four characters a token; JSON punctuation, identifiers and
non-Latin scripts cost more). It is good for what people ask of it — which server's
``tools/list`` eats the context, which tool description is the long one — not for billing.
Pure and core: imports nothing of mcptape.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

#: Bytes of UTF-8 JSON counted as one token.
BYTES_PER_TOKEN = 4
#: How every page names the figure.
METHOD = "estimate: 4 bytes of JSON a token"


def estimate(n_bytes: int) -> int:
    """Tokens for ``n_bytes`` of UTF-8 text (rounded up; 0 for nothing)."""
    return -(-max(n_bytes, 0) // BYTES_PER_TOKEN)


def estimate_value(value: Any) -> int:
    """Tokens for a JSON value as a host would pass it on (compact JSON, UTF-8)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return estimate(len(text.encode("utf-8")))


@dataclass(frozen=True)
class ToolCost:
    name: str
    tokens: int
    description_tokens: int
    schema_tokens: int


def tools_cost(result: Any) -> list[ToolCost]:
    """Each tool of a ``tools/list`` result with its estimated cost, the dearest first."""
    tools = result.get("tools") if isinstance(result, dict) else None
    out: list[ToolCost] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        desc = tool.get("description")
        schema = {k: v for k, v in tool.items() if k.endswith("Schema")}
        out.append(
            ToolCost(
                name=str(tool.get("name", "?")),
                tokens=estimate_value(tool),
                description_tokens=estimate_value(desc) if isinstance(desc, str) else 0,
                schema_tokens=estimate_value(schema) if schema else 0,
            )
        )
    out.sort(key=lambda t: (-t.tokens, t.name))
    return out


def listing_cost(size: int, result: Any, listings: int = 1) -> dict[str, Any]:
    """The context cost of one ``tools/list`` answer of ``size`` bytes: whole, and per tool
    (the dearest first) when its ``result`` was parsed (None: too large to parse, costed whole).
    The shape the session page, its twin and ``mcptape stats --format json`` show."""
    costs = tools_cost(result) if isinstance(result, dict) else None
    return {
        "how": METHOD,
        "listings": listings,
        "tokens": estimate(size),
        "tools": [asdict(c) for c in costs] if costs is not None else None,
        "tool_count": len(costs) if costs is not None else None,
        "more_pages": bool(result.get("nextCursor")) if isinstance(result, dict) else False,
    }
