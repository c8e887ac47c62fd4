"""Server entries: what a config entry launches, and whether mcptape already wraps it.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_proxy.hosts.jsonc import Node

# ---------------------------------------------------------------------------------------------
# server entries


_MCPTAPE_NAMES = {"mcptape"}
#: Executables (or npm/PyPI packages run by a launcher) that wrap another MCP server the way
#: mcptape does. Wrapping them again would record the wrapper, so install skips them unless
#: told ``force``. Extend as such tools appear.
KNOWN_WRAPPERS = {
    "mcp-recorder",
    "mcp-debugger",
    "mcp-debug",
    "mcp-watchdog",
    "mcp-sniffer",
    "mcp-trace",
    "mcp-inspector",
    "@modelcontextprotocol/inspector",
}
_LAUNCHERS = {"npx", "bunx", "uvx", "pipx", "pnpm", "yarn", "uv"}
_LAUNCHER_WORDS = {"run", "dlx", "exec", "tool", "x"}
_REMOTE_TYPES = {"http", "sse", "streamable-http", "streamablehttp", "streamable_http", "ws"}


def exe_name(command: str) -> str:
    """The bare program name of a command, on any OS (``C:\\x\\mcptape.exe`` → ``mcptape``)."""
    base = re.split(r"[\\/]", command)[-1].lower()
    for suffix in (".exe", ".cmd", ".bat", ".ps1"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def _package_name(spec: str) -> str:
    """``@scope/pkg@1.2`` → ``@scope/pkg``; ``pkg==1.0`` → ``pkg``."""
    spec = spec.lower()
    if spec.startswith("@"):
        return "@" + spec[1:].partition("@")[0]
    return re.split(r"[@=<>\[]", spec, maxsplit=1)[0]


def other_wrapper(argv: Sequence[str]) -> str | None:
    """The name of a known MCP wrapper this command runs (directly or via npx/uvx/…), if any."""
    if not argv:
        return None
    name = exe_name(argv[0])
    if name in KNOWN_WRAPPERS:
        return name
    if name in _LAUNCHERS:
        for arg in argv[1:]:
            if arg.startswith("-") or arg in _LAUNCHER_WORDS:
                continue
            pkg = _package_name(arg)
            return pkg if pkg in KNOWN_WRAPPERS else None
    return None


@dataclass(frozen=True)
class Wrapped:
    """An entry that runs ``mcptape record [options] -- COMMAND ARGS…``."""

    mcptape: str
    name: str | None
    db: str | None
    original: list[str]
    #: Index in ``args`` of the original command (the item after ``--``).
    command_index: int


def parse_wrapped(command: str, args: Sequence[str]) -> Wrapped | None:
    """Recognise ``<…/mcptape> record [--name N] [--db D] … -- CMD …`` (by hand or by install)."""
    if exe_name(command) not in _MCPTAPE_NAMES or not args or args[0] != "record":
        return None
    name = db = None
    i = 1
    while i < len(args) and args[i] != "--":
        a = args[i]
        key, eq, val = a.partition("=")
        if key in ("--name", "-n", "--db"):
            if not eq:
                if i + 1 >= len(args):
                    return None
                val = args[i + 1]
                i += 1
            if key == "--db":
                db = val
            else:
                name = val
        i += 1
    if i + 1 >= len(args):
        return None
    return Wrapped(command, name, db, list(args[i + 1 :]), i + 1)


Kind = Literal["stdio", "remote", "invalid"]


@dataclass
class ServerEntry:
    """One entry of the host's server table, classified."""

    name: str
    node: Node
    kind: Kind
    command: str | None = None
    args: list[str] = field(default_factory=list)
    url: str | None = None
    problem: str | None = None
    wrapped: Wrapped | None = None
    #: ``mcptape`` appears as the command but not in the ``record … -- CMD`` form we can undo.
    odd_mcptape: bool = False
    wrapper: str | None = None
    env: dict[str, Any] | None = None
    cwd: str | None = None

    @property
    def argv(self) -> list[str]:
        return [self.command or "", *self.args]


def classify(name: str, node: Node) -> ServerEntry:
    """Sort an entry into stdio (wrappable), remote (URL) or invalid, with the reason."""
    if node.kind != "object":
        return ServerEntry(name, node, "invalid", problem="the entry is not a JSON object")
    value = node.to_python()
    env = value.get("env") if isinstance(value.get("env"), dict) else None
    cwd = value.get("cwd") if isinstance(value.get("cwd"), str) else None
    cmd = node.get("command")
    if cmd is None:
        url = value.get("url") or value.get("serverUrl") or value.get("httpUrl")
        typ = str(value.get("type", "")).lower()
        if isinstance(url, str) or typ in _REMOTE_TYPES:
            return ServerEntry(name, node, "remote", url=url if isinstance(url, str) else None)
        return ServerEntry(name, node, "invalid", problem="the entry has no command")
    if cmd.kind != "string" or not cmd.value.strip():
        return ServerEntry(name, node, "invalid", problem="its command is not a non-empty string")
    args_node = node.get("args")
    if args_node is not None and (
        args_node.kind != "array" or any(i.kind != "string" for i in args_node.items)
    ):
        return ServerEntry(
            name, node, "invalid", command=cmd.value, problem="its args are not a list of strings"
        )
    args = [i.value for i in args_node.items] if args_node else []
    entry = ServerEntry(name, node, "stdio", command=cmd.value, args=args, env=env, cwd=cwd)
    entry.wrapped = parse_wrapped(cmd.value, args)
    entry.odd_mcptape = entry.wrapped is None and exe_name(cmd.value) in _MCPTAPE_NAMES
    entry.wrapper = other_wrapper(entry.argv) if entry.wrapped is None else None
    return entry
