"""The JSONC editor (``hosts/jsonc.py`` spans, ``hosts/edits.py``): whatever the layout, comments
and trailing commas, parsing gives the values JSON gives, every span holds exactly its value,
and wrapping an entry changes that entry alone and unwraps to the very same text."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.hosts.edits import apply_edits, prefix_args, unwrap_edits, wrap_edits
from mcp_proxy.hosts.entries import classify
from mcp_proxy.hosts.jsonc import Node, parse_jsonc

TEXT = st.text(max_size=10)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
ENTRIES = st.fixed_dictionaries(
    {"command": st.text(min_size=1, max_size=12).filter(str.strip)},
    optional={"args": st.lists(TEXT, max_size=3), "env": st.dictionaries(TEXT, TEXT, max_size=2)},
)
CONFIGS = st.fixed_dictionaries(
    {
        "mcpServers": st.dictionaries(
            st.text(min_size=1, max_size=8), ENTRIES, min_size=1, max_size=3
        )
    },
    optional={"other": VALUES},
)
COMMENTS = st.sampled_from(["", "/* c */", "// line comment\n", '/* {"a": [1,] } */ '])


@st.composite
def layouts(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON with a drawn indent, then comments at line starts and trailing commas."""
    indent = draw(st.sampled_from([None, 2, 4, "\t"]))
    text = json.dumps(value, indent=indent, ensure_ascii=draw(st.booleans()))
    if indent is None:
        return text
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    lines = text.split("\n")  # line breaks fall between tokens only (strings escape them)
    out = [lines[0]]
    for line in lines[1:]:
        comment = draw(COMMENTS)
        stripped = line.lstrip(" \t")
        if (
            draw(st.booleans())
            and stripped[:1] in ("}", "]")
            and not out[-1].rstrip().endswith(("{", "["))
        ):
            out[-1] = out[-1].rstrip("\r") + ("," + "\r" if out[-1].endswith("\r") else ",")
        out.append(line[: len(line) - len(stripped)] + comment + stripped)
    return "\n".join(out)


def spans_hold_their_values(text: str, node: Node) -> None:
    assert parse_jsonc(text[node.start : node.end]).to_python() == node.to_python()
    for member in node.members:
        assert json.loads(text[member.key_start : member.key_end]) == member.key
        spans_hold_their_values(text, member.value)
    for item in node.items:
        spans_hold_their_values(text, item)


@given(st.data(), VALUES)
def test_parsing_gives_what_json_gives_and_spans_hold_values(
    data: st.DataObject, value: Any
) -> None:
    text = data.draw(layouts(value))
    root = parse_jsonc(text)
    assert root.to_python() == value
    spans_hold_their_values(text, root)


MCPTAPES = st.sampled_from(["mcptape", "/opt/mcp tape/mcptape", "C:\\Tools\\mcptape.exe"])


@given(st.data(), CONFIGS, MCPTAPES, st.none() | TEXT)
def test_wrap_changes_one_entry_and_unwrap_restores_the_text(
    data: st.DataObject, config: dict[str, Any], mcptape: str, db: str | None
) -> None:
    text = data.draw(layouts(config))
    servers = parse_jsonc(text).get("mcpServers")
    assert servers is not None
    member = data.draw(st.sampled_from(servers.members))
    entry = classify(member.key, member.value)
    edits, added = wrap_edits(text, entry, mcptape, db)
    wrapped = apply_edits(text, edits)

    after = parse_jsonc(wrapped).to_python()
    before = config["mcpServers"][member.key]
    want = {
        **before,
        "command": mcptape,
        "args": [*prefix_args(member.key, db), before["command"], *before.get("args", [])],
    }
    assert after["mcpServers"][member.key] == want
    others = {k: v for k, v in after["mcpServers"].items() if k != member.key}
    assert others == {k: v for k, v in config["mcpServers"].items() if k != member.key}
    assert after.get("other") == config.get("other")

    again = classify(member.key, parse_jsonc(wrapped).get("mcpServers").get(member.key))  # type: ignore[union-attr,arg-type]
    assert again.wrapped is not None
    assert apply_edits(wrapped, unwrap_edits(wrapped, again, args_added=added)) == text
