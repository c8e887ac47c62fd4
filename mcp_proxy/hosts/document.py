"""A host config document: its server entries, found by each host's own layout.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcp_proxy.hosts.entries import ServerEntry, classify
from mcp_proxy.hosts.jsonc import JsonSyntaxError, Node, line_col, parse_jsonc
from mcp_proxy.hosts.registry import ConfigError, ConfigTarget

# ---------------------------------------------------------------------------------------------
# documents


@dataclass
class ConfigDocument:
    """A parsed config: the exact bytes, the text, the tree, and where the server table is."""

    target: ConfigTarget
    raw: bytes
    bom: bool
    text: str
    root: Node
    servers_path: tuple[str, ...] | None
    servers_node: Node | None

    def entries(self) -> list[ServerEntry]:
        if self.servers_node is None:
            return []
        return [classify(m.key, m.value) for m in self.servers_node.members]

    def encode(self, text: str) -> bytes:
        return (b"\xef\xbb\xbf" if self.bom else b"") + text.encode("utf-8")


def parse_config(target: ConfigTarget, raw: bytes) -> ConfigDocument:
    """Parse a host config, or raise :class:`ConfigError` with one line that says what is wrong."""
    label = f"{target.label} config {target.path}" if target.host else str(target.path)
    bom = raw.startswith(b"\xef\xbb\xbf")
    body = raw[3:] if bom else raw
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label} is not UTF-8 text (bad byte at offset {exc.start})") from None
    if not text.strip():
        raise ConfigError(f"{label} is empty: there are no MCP servers in it to wrap")
    try:
        root = parse_jsonc(text, jsonc=target.jsonc)
    except JsonSyntaxError as exc:
        line, col = line_col(text, exc.pos)
        where = f"line {line}, column {col}"
        if exc.jsonc_only and target.host:
            raise ConfigError(
                f"{label} has {exc.message} at {where}, which is not JSON: {target.host.title}"
                " cannot read this file either; remove it and try again"
            ) from None
        raise ConfigError(f"{label} is not valid JSON: {exc.message} at {where}") from None
    if root.kind != "object":
        raise ConfigError(f"{label} is not a JSON object at the top level")
    servers_path = _servers_path(target, root)
    servers_node = _walk(root, servers_path) if servers_path else None
    if servers_node is not None and servers_node.kind != "object":
        raise ConfigError(f'{label}: "{".".join(servers_path or ())}" is not a JSON object')
    if servers_node is not None:
        seen: set[str] = set()
        for m in servers_node.members:
            if m.key in seen:
                line, _ = line_col(text, m.key_start)
                raise ConfigError(
                    f"{label} names the server {m.key!r} twice (again at line {line});"
                    " remove one and try again"
                )
            seen.add(m.key)
    return ConfigDocument(target, raw, bom, text, root, servers_path, servers_node)


def _walk(node: Node, path: Sequence[str]) -> Node | None:
    for key in path:
        if node.kind != "object":
            return None
        child = node.get(key)
        if child is None:
            return None
        node = child
    return node


def _servers_path(target: ConfigTarget, root: Node) -> tuple[str, ...] | None:
    if target.host:
        return (target.host.servers_key,)
    for path in (("mcpServers",), ("servers",), ("mcp", "servers")):
        if _walk(root, path) is not None:
            return path
    raise ConfigError(
        f'{target.path} has no "mcpServers" or "servers" object: is it an MCP host config?'
    )
