"""JSON with comments, parsed with spans, so edits touch only the bytes they mean to.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

# ---------------------------------------------------------------------------------------------
# JSON with comments, parsed with spans


class JsonSyntaxError(Exception):
    """A syntax error at a character offset; ``jsonc_only`` when it is a comment or trailing
    comma that JSONC would allow."""

    def __init__(self, message: str, pos: int, *, jsonc_only: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.jsonc_only = jsonc_only


@dataclass
class Member:
    key: str
    key_start: int
    key_end: int
    value: Node


@dataclass
class Node:
    """A JSON value and where it sits in the text (``text[start:end]`` is exactly the value)."""

    kind: Literal["object", "array", "string", "number", "literal"]
    start: int
    end: int
    value: Any = None
    members: list[Member] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def member(self, key: str) -> Member | None:
        """The member named ``key`` (the last one, as JSON.parse would keep)."""
        found = None
        for m in self.members:
            if m.key == key:
                found = m
        return found

    def get(self, key: str) -> Node | None:
        m = self.member(key)
        return m.value if m else None

    def to_python(self) -> Any:
        if self.kind == "object":
            return {m.key: m.value.to_python() for m in self.members}
        if self.kind == "array":
            return [i.to_python() for i in self.items]
        return self.value


_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\.)*"', re.DOTALL)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
WHITESPACE = " \t\n\r"


class Parser:
    def __init__(self, text: str, jsonc: bool) -> None:
        self.t = text
        self.n = len(text)
        self.i = 0
        self.jsonc = jsonc

    def fail(self, message: str, pos: int | None = None, jsonc_only: bool = False) -> NoReturn:
        raise JsonSyntaxError(message, self.i if pos is None else pos, jsonc_only=jsonc_only)

    def skip(self) -> None:
        t, n = self.t, self.n
        while self.i < n:
            c = t[self.i]
            if c in WHITESPACE:
                self.i += 1
            elif t.startswith("//", self.i):
                if not self.jsonc:
                    self.fail("a comment", jsonc_only=True)
                end = t.find("\n", self.i)
                self.i = n if end < 0 else end
            elif t.startswith("/*", self.i):
                if not self.jsonc:
                    self.fail("a comment", jsonc_only=True)
                end = t.find("*/", self.i + 2)
                if end < 0:
                    self.fail("an unterminated /* comment")
                self.i = end + 2
            else:
                return

    def peek(self) -> str:
        return self.t[self.i] if self.i < self.n else ""

    def value(self) -> Node:
        self.skip()
        c = self.peek()
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.t.startswith(word, self.i):
                start = self.i
                self.i += len(word)
                return Node("literal", start, self.i, val)
        m = _NUMBER.match(self.t, self.i)
        if m and m.end() > self.i:
            self.i = m.end()
            return Node("number", m.start(), m.end(), json.loads(m.group()))
        if not c:
            self.fail("unexpected end of file")
        self.fail(f"unexpected {c!r}")

    def string(self) -> Node:
        m = _STRING.match(self.t, self.i)
        if not m:
            self.fail("an unterminated string (or a control character inside one)")
        try:
            val = json.loads(m.group())
        except ValueError:
            self.fail("an invalid escape in a string")
        self.i = m.end()
        return Node("string", m.start(), m.end(), val)

    def obj(self) -> Node:
        start = self.i
        self.i += 1
        node = Node("object", start, start)
        while True:
            self.skip()
            c = self.peek()
            if c == "}":
                self.i += 1
                break
            if c != '"':
                self.fail("expected a string key or '}'" if c else "unexpected end of file")
            key = self.string()
            self.skip()
            if self.peek() != ":":
                self.fail("expected ':' after a key")
            self.i += 1
            val = self.value()
            node.members.append(Member(key.value, key.start, key.end, val))
            if self.closed_after_item("}"):
                break
        node.end = self.i
        return node

    def closed_after_item(self, close: str) -> bool:
        """After a member or item: consume ``,`` or ``close``; True when the container ended.

        A trailing comma before ``close`` is JSONC, refused in strict JSON (the hosts that read
        plain JSON would refuse the file).
        """
        self.skip()
        c = self.peek()
        if c == close:
            self.i += 1
            return True
        if c != ",":
            self.fail(f"expected ',' or '{close}'" if c else "unexpected end of file")
        comma = self.i
        self.i += 1
        self.skip()
        if self.peek() != close:
            return False
        if not self.jsonc:
            self.fail("a trailing comma", comma, jsonc_only=True)
        self.i += 1
        return True

    def arr(self) -> Node:
        start = self.i
        self.i += 1
        node = Node("array", start, start)
        while True:
            self.skip()
            if self.peek() == "]":
                self.i += 1
                break
            node.items.append(self.value())
            if self.closed_after_item("]"):
                break
        node.end = self.i
        return node


def parse_jsonc(text: str, *, jsonc: bool = True) -> Node:
    """Parse JSON (or JSONC: comments and trailing commas) into a tree of spans.

    Raises :class:`JsonSyntaxError` with the offset of the first problem.
    """
    p = Parser(text, jsonc)
    try:
        root = p.value()
    except RecursionError:
        raise JsonSyntaxError("nesting too deep", p.i) from None
    p.skip()
    if p.i != p.n:
        p.fail("unexpected text after the end of the JSON value")
    return root


def line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1
