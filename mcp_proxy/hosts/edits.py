"""Text edits that wrap and unwrap an entry, exactly reversible.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from mcp_proxy.hosts.entries import ServerEntry
from mcp_proxy.hosts.jsonc import WHITESPACE, Parser

# ---------------------------------------------------------------------------------------------
# text edits


Edit = tuple[int, int, str]


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Replace spans, last first so earlier offsets stay valid (spans must not overlap)."""
    out = text
    last = len(text) + 1
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        if end > last:
            raise AssertionError("overlapping edits")
        out = out[:start] + new + out[end:]
        last = start
    return out


def json_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _newline_before(text: str, pos: int) -> tuple[str, str] | None:
    """If only whitespace separates ``pos`` from the previous line break: (newline, indent)."""
    nl = text.rfind("\n", 0, pos)
    if nl < 0:
        return None
    indent = text[nl + 1 : pos]
    if indent.strip(" \t"):
        return None
    newline = "\r\n" if nl > 0 and text[nl - 1] == "\r" else "\n"
    return newline, indent


def _after_comma(text: str, pos: int) -> int | None:
    """The offset just past the ',' that follows ``pos`` (skipping whitespace and comments)."""
    p = Parser(text, True)
    p.i = pos
    p.skip()
    return p.i + 1 if p.peek() == "," else None


def prefix_args(name: str, db: str | None) -> list[str]:
    """What install puts before the original command: ``record --name N [--db D] --``."""
    out = ["record"]
    for option, value in (("--name", name), ("--db", db)):
        if value is None:
            continue
        # A value that starts with "-" would be read as an option: glue it to its flag.
        out += [f"{option}={value}"] if value.startswith("-") else [option, value]
    return [*out, "--"]


def wrap_edits(
    text: str, entry: ServerEntry, mcptape: str, db: str | None
) -> tuple[list[Edit], bool]:
    """Edits that wrap a stdio entry, and whether an ``args`` member had to be added.

    The original command's token moves, verbatim, to the front of ``args``; the new items take
    the array's own layout so that :func:`unwrap_edits` can remove exactly what was added.
    """
    node = entry.node
    cmd_member = node.member("command")
    assert cmd_member is not None
    cmd = cmd_member.value
    items = [*(json_string(a) for a in prefix_args(entry.name, db)), text[cmd.start : cmd.end]]
    edits: list[Edit] = [(cmd.start, cmd.end, json_string(mcptape))]
    args = node.get("args")
    if args is None:
        # No args: add a member right after the command, in the object's own layout.
        colon = text[cmd_member.key_end : cmd.start]
        array = "[" + ", ".join(items) + "]"
        layout = _newline_before(text, cmd_member.key_start)
        sep = (layout[0] + layout[1]) if layout else " "
        edits.append((cmd.end, cmd.end, f",{sep}" + json_string("args") + colon + array))
        return edits, True
    inside = args.start + 1
    if not args.items:
        edits.append((inside, inside, ", ".join(items)))
    elif "\n" in text[inside : args.items[0].start] and (
        layout := _newline_before(text, args.items[0].start)
    ):
        newline, indent = layout
        edits.append((inside, inside, "".join(f"{newline}{indent}{i}," for i in items)))
    else:
        edits.append((inside, inside, "".join(f"{i}, " for i in items)))
    return edits, False


def unwrap_edits(text: str, entry: ServerEntry, *, args_added: bool = False) -> list[Edit]:
    """Edits that undo a wrap: the inverse of :func:`wrap_edits`, and sensible for wraps made by
    hand (``mcptape record … -- CMD``) or edited since."""
    w = entry.wrapped
    assert w is not None
    node = entry.node
    cmd_member = node.member("command")
    args = node.get("args")
    assert cmd_member is not None and args is not None
    cmd = cmd_member.value
    orig = args.items[w.command_index]
    edits: list[Edit] = [(cmd.start, cmd.end, text[orig.start : orig.end])]
    inside = args.start + 1
    rest = args.items[w.command_index + 1 :]
    if rest:
        end = _after_comma(text, orig.end)
        assert end is not None, "array items are separated by commas"
        if "\n" not in text[inside : args.items[0].start] and text[end : end + 1] == " ":
            end += 1
        edits.append((inside, end, ""))
        return edits
    member = next(m for m in node.members if m.value is args)
    if args_added and text[cmd.end : member.key_start].strip(WHITESPACE) == ",":
        # Install added the whole member right after the command: remove it, comma and all.
        edits.append((cmd.end, args.end, ""))
        return edits
    # A trailing comma after the last item (JSONC) goes with it.
    edits.append((inside, _after_comma(text, orig.end) or orig.end, ""))
    return edits
