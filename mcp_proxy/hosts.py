"""Put ``mcptape record`` between an MCP host (Claude Desktop and friends) and its servers.

A host's config names each stdio server by ``command`` + ``args``. Installing rewrites the entry
to ``<mcptape> record --name <server> [--db <db>] -- <command> <args…>`` and nothing else: the
``env``, ``cwd``, ``type`` and every other field stay as they were, so the host launches mcptape
with the server's own environment and working directory, and mcptape launches the server with
them unchanged.

Why the file is edited by text spans rather than loaded and dumped: users keep these files by hand
(VS Code's are JSON *with comments* and trailing commas), hosts rewrite them in their own style,
and ``uninstall`` promises the original bytes back. So the file is parsed into a tree that knows
where every value starts and ends, and only the ``command`` value and the start of the ``args``
array are touched. The inserted text copies the array's own layout (inline, or one item per line
with the same indentation and line ending), which makes the edit exactly reversible: unwrapping
deletes what was inserted, and nothing else moves.

Why there is a backup *and* an entry-by-entry undo: the backup (``<config>.mcptape-backup``, the
bytes before mcptape first changed the file) gives a byte-identical restore when only mcptape
touched the file since; once the user or the host edited other entries, putting the backup back
would lose their edits, so ``uninstall`` then unwraps entry by entry. A small manifest beside it
(``<config>.mcptape-backup.json``) remembers what mcptape last wrote, which tells the two cases
apart.

Why every write re-reads the file first: hosts (Claude Code in particular) rewrite their config
while they run. The new content goes to a temporary file next to the config; just before the
atomic rename the config is read again, and if its bytes changed since we planned, nothing is
replaced and the user is told to try again.

Everything that depends on the machine — home directory, OS layout, environment variables, the
path of the mcptape executable — is a parameter (:class:`HostEnv`, ``mcptape=``) so the tests
run every host and OS layout in temporary homes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import difflib
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Literal, NoReturn

from mcp_proxy.errors import NotFoundError, UserError

__all__ = [
    "HOSTS",
    "OS_NAMES",
    "Check",
    "ConfigChanged",
    "ConfigError",
    "ConfigTarget",
    "Host",
    "HostEnv",
    "JsonSyntaxError",
    "Outcome",
    "Plan",
    "ServerEntry",
    "apply_plan",
    "backup_paths",
    "check_targets",
    "current_os",
    "database_status",
    "find_mcptape",
    "list_servers",
    "parse_jsonc",
    "plan_install",
    "plan_uninstall",
    "resolve_targets",
]

OSName = Literal["macos", "windows", "linux"]
OS_NAMES: tuple[OSName, ...] = ("macos", "windows", "linux")


# ---------------------------------------------------------------------------------------------
# errors


class ConfigError(UserError):
    """The config file cannot be used as it is (not JSON, wrong shape, unreadable, read-only)."""


class ConfigNotFound(NotFoundError):
    """The host's config file does not exist."""


class ConfigChanged(UserError):
    """Someone else (usually the running host) changed the file while we were editing it."""


# ---------------------------------------------------------------------------------------------
# machine layout


def current_os() -> OSName:
    """The OS layout of this machine (only three matter for host configs)."""
    if sys.platform == "darwin":
        return "macos"
    if sys.platform.startswith("win"):
        return "windows"
    return "linux"


@dataclass(frozen=True)
class HostEnv:
    """Where to look: a home directory, an OS layout and the environment variables that move
    config directories (``APPDATA``, ``XDG_CONFIG_HOME``, ``CLAUDE_CONFIG_DIR``).

    Injectable so that tests lay out a macOS, Windows or Linux home under a temporary directory
    and never touch the real one.
    """

    home: Path
    os: OSName
    environ: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def current(cls, os_name: OSName | None = None, home: Path | None = None) -> HostEnv:
        return cls(home=home or Path.home(), os=os_name or current_os(), environ=dict(os.environ))

    def appdata(self) -> Path:
        """``%APPDATA%`` (Windows roaming profile), defaulting to its usual place in the home."""
        value = self.environ.get("APPDATA") if self.os == "windows" else None
        return Path(value) if value else self.home / "AppData" / "Roaming"

    def xdg_config(self) -> Path:
        """``$XDG_CONFIG_HOME`` (Linux), defaulting to ``~/.config`` as Electron apps do."""
        value = self.environ.get("XDG_CONFIG_HOME")
        if value and Path(value).is_absolute():
            return Path(value)
        return self.home / ".config"

    def app_support(self) -> Path:
        return self.home / "Library" / "Application Support"


@dataclass(frozen=True)
class Host:
    """One MCP host: where its config lives on each OS and the shape of its server table."""

    id: str
    title: str
    servers_key: str
    #: The host itself reads comments and trailing commas (so mcptape must keep them working).
    jsonc: bool
    locate: Callable[[HostEnv], Path]
    restart: str

    def config_path(self, env: HostEnv) -> Path:
        return self.locate(env)


def _claude_desktop(env: HostEnv) -> Path:
    name = "claude_desktop_config.json"
    if env.os == "macos":
        return env.app_support() / "Claude" / name
    if env.os == "windows":
        return env.appdata() / "Claude" / name
    return env.xdg_config() / "Claude" / name


def _claude_code(env: HostEnv) -> Path:
    base = env.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base) if base else env.home) / ".claude.json"


def _vscode(env: HostEnv) -> Path:
    if env.os == "macos":
        return env.app_support() / "Code" / "User" / "mcp.json"
    if env.os == "windows":
        return env.appdata() / "Code" / "User" / "mcp.json"
    return env.xdg_config() / "Code" / "User" / "mcp.json"


HOSTS: dict[str, Host] = {
    h.id: h
    for h in (
        Host(
            "claude-desktop",
            "Claude Desktop",
            "mcpServers",
            jsonc=False,
            locate=_claude_desktop,
            restart="quit Claude Desktop completely (tray or menu bar → Quit) and start it again",
        ),
        Host(
            "claude-code",
            "Claude Code",
            "mcpServers",
            jsonc=False,
            locate=_claude_code,
            restart="start a new `claude` session (or run /mcp in a running one to reconnect)",
        ),
        Host(
            "cursor",
            "Cursor",
            "mcpServers",
            jsonc=True,
            locate=lambda env: env.home / ".cursor" / "mcp.json",
            restart="in Cursor Settings → MCP, turn each server off and on (or restart Cursor)",
        ),
        Host(
            "vscode",
            "VS Code",
            "servers",
            jsonc=True,
            locate=_vscode,
            restart="VS Code restarts changed servers; if not, run 'MCP: List Servers' → Restart",
        ),
        Host(
            "windsurf",
            "Windsurf",
            "mcpServers",
            jsonc=True,
            locate=lambda env: env.home / ".codeium" / "windsurf" / "mcp_config.json",
            restart="press the refresh button in Cascade's MCP panel (or restart Windsurf)",
        ),
    )
}


@dataclass(frozen=True)
class ConfigTarget:
    """A config file to edit: a known host's, or any file given by path (``host`` is None)."""

    path: Path
    host: Host | None = None

    @property
    def label(self) -> str:
        return self.host.title if self.host else str(self.path)

    @property
    def jsonc(self) -> bool:
        # A file of unknown origin is read leniently: keeping its comments does no harm.
        return self.host.jsonc if self.host else True

    @property
    def selector(self) -> str:
        """What to pass to ``--host`` to name this target again."""
        return self.host.id if self.host else str(self.path)


def resolve_targets(host: str | None, env: HostEnv) -> list[ConfigTarget]:
    """``--host`` → config targets: a known id, a path, or (None) every host whose config exists."""
    if host is None:
        found = []
        for h in HOSTS.values():
            path = h.config_path(env)
            if path.exists() or path.is_symlink():
                found.append(ConfigTarget(path, h))
        return found
    if host in HOSTS:
        return [ConfigTarget(HOSTS[host].config_path(env), HOSTS[host])]
    looks_like_path = any(sep in host for sep in ("/", "\\")) or host.endswith((".json", ".jsonc"))
    if looks_like_path or Path(host).expanduser().exists():
        return [ConfigTarget(Path(os.path.abspath(Path(host).expanduser())), None)]
    raise UserError(
        f"unknown host {host!r} (known: {', '.join(HOSTS)}); or give the path of a config file"
    )


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
_WS = " \t\n\r"


class _Parser:
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
            if c in _WS:
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
            self.skip()
            c = self.peek()
            if c == ",":
                comma = self.i
                self.i += 1
                self.skip()
                if self.peek() == "}":
                    if not self.jsonc:
                        self.fail("a trailing comma", comma, jsonc_only=True)
                    self.i += 1
                    break
            elif c == "}":
                self.i += 1
                break
            else:
                self.fail("expected ',' or '}'" if c else "unexpected end of file")
        node.end = self.i
        return node

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
            self.skip()
            c = self.peek()
            if c == ",":
                comma = self.i
                self.i += 1
                self.skip()
                if self.peek() == "]":
                    if not self.jsonc:
                        self.fail("a trailing comma", comma, jsonc_only=True)
                    self.i += 1
                    break
            elif c == "]":
                self.i += 1
                break
            else:
                self.fail("expected ',' or ']'" if c else "unexpected end of file")
        node.end = self.i
        return node


def parse_jsonc(text: str, *, jsonc: bool = True) -> Node:
    """Parse JSON (or JSONC: comments and trailing commas) into a tree of spans.

    Raises :class:`JsonSyntaxError` with the offset of the first problem.
    """
    p = _Parser(text, jsonc)
    try:
        root = p.value()
    except RecursionError:
        raise JsonSyntaxError("nesting too deep", p.i) from None
    p.skip()
    if p.i != p.n:
        p.fail("unexpected text after the end of the JSON value")
    return root


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


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
        line, col = _line_col(text, exc.pos)
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
                line, _ = _line_col(text, m.key_start)
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


def _dumps(value: str) -> str:
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
    p = _Parser(text, True)
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
    items = [*(_dumps(a) for a in prefix_args(entry.name, db)), text[cmd.start : cmd.end]]
    edits: list[Edit] = [(cmd.start, cmd.end, _dumps(mcptape))]
    args = node.get("args")
    if args is None:
        # No args: add a member right after the command, in the object's own layout.
        colon = text[cmd_member.key_end : cmd.start]
        array = "[" + ", ".join(items) + "]"
        layout = _newline_before(text, cmd_member.key_start)
        sep = (layout[0] + layout[1]) if layout else " "
        edits.append((cmd.end, cmd.end, f",{sep}" + _dumps("args") + colon + array))
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
    if args_added and text[cmd.end : member.key_start].strip(_WS) == ",":
        # Install added the whole member right after the command: remove it, comma and all.
        edits.append((cmd.end, args.end, ""))
        return edits
    # A trailing comma after the last item (JSONC) goes with it.
    edits.append((inside, _after_comma(text, orig.end) or orig.end, ""))
    return edits


# ---------------------------------------------------------------------------------------------
# files


@dataclass(frozen=True)
class Snapshot:
    """The config as read. Its hash tells a concurrent change (a timestamp alone can miss a
    rewrite within the same tick, and flags a touch that changed nothing)."""

    raw: bytes
    sha256: str
    mode: int
    uid: int
    gid: int


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_snapshot(target: ConfigTarget) -> Snapshot:
    path = target.path
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
            st = os.fstat(fh.fileno())
    except FileNotFoundError:
        what = f"{target.host.title} config" if target.host else "config file"
        raise ConfigNotFound(
            f"no {what} at {path}"
            + (" (is it installed, with at least one MCP server added?)" if target.host else "")
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a config file") from None
    except PermissionError:
        raise ConfigError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return Snapshot(raw, _sha(raw), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def _real(path: Path) -> Path:
    """Follow symlinks: a dotfile manager's link must stay a link, its target gets the edit."""
    return Path(os.path.realpath(path))


def check_writable(path: Path, snap: Snapshot) -> None:
    """Refuse read-only files even as root: read-only is the user saying "do not touch"."""
    real = _real(path)
    if snap.mode & 0o222 == 0 or not os.access(real, os.W_OK):
        raise ConfigError(
            f"{path} is read-only; nothing changed (make it writable, e.g. chmod u+w, and retry)"
        )
    if not os.access(real.parent, os.W_OK):
        raise ConfigError(
            f"cannot write in {real.parent} (needed for a safe replace of {real.name})"
        )


def atomic_write(
    path: Path,
    data: bytes,
    *,
    expect: Snapshot | None = None,
    mode: int = 0o600,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``.

    With ``expect``, the file is read again just before the rename; if its bytes are no longer
    the ones we planned from, nothing is replaced (:class:`ConfigChanged`). Mode and owner of the
    old file carry over. The temporary file never outlives a failure.
    """
    real = _real(path)
    if expect is not None:
        mode = expect.mode
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".mcptape-tmp", dir=real.parent)
    except OSError as exc:
        raise ConfigError(f"cannot write in {real.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if expect is not None and hasattr(os, "chown"):
            with contextlib.suppress(OSError):
                if (os.getuid(), os.getgid()) != (expect.uid, expect.gid):
                    os.chown(tmp, expect.uid, expect.gid)
        if before_replace is not None:
            before_replace()
        if expect is not None:
            try:
                now = real.read_bytes()
            except FileNotFoundError:
                now = None
            if now is None or _sha(now) != expect.sha256:
                raise ConfigChanged(
                    f"{path} changed while mcptape was editing it (is the host running and"
                    " rewriting it?); nothing was written — quit the host and try again"
                )
        os.replace(tmp, real)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}; nothing changed") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if hasattr(os, "O_DIRECTORY"):
        with contextlib.suppress(OSError):
            dfd = os.open(real.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def backup_paths(config: Path) -> tuple[Path, Path]:
    """(backup copy, manifest) beside the config file — the config as the host names it."""
    return (
        config.with_name(config.name + ".mcptape-backup"),
        config.with_name(config.name + ".mcptape-backup.json"),
    )


MANIFEST_FORMAT = "mcptape-host-backup/1"


def _load_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    return data


def _read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------
# plans


Status = Literal[
    "wrapped",  # install wraps it now
    "updated",  # already wrapped; mcptape's path was stale and is updated
    "already",  # already wrapped by mcptape, nothing to do
    "unwrapped",  # uninstall restores it now
    "not-wrapped",  # uninstall: nothing to undo
    "remote",  # a URL entry: left alone
    "wrapper",  # runs through another wrapper: left alone (install --force wraps it)
    "invalid",  # cannot be wrapped (no command, bad args…)
    "missing",  # named with --server but not in this config
]


@dataclass
class Outcome:
    server: str
    status: Status
    message: str


@dataclass
class Plan:
    """What install or uninstall would do to one config file; :func:`apply_plan` does it."""

    op: Literal["install", "uninstall"]
    target: ConfigTarget
    snapshot: Snapshot
    new_raw: bytes
    outcomes: list[Outcome]
    wrapped_before: int
    wrapped_after: int
    args_added: list[str] = field(default_factory=list)
    unwrapped: list[str] = field(default_factory=list)
    #: uninstall: the whole file goes back to the backup's bytes (only mcptape touched it since).
    from_backup: bool = False

    @property
    def changed(self) -> bool:
        return self.new_raw != self.snapshot.raw

    def diff(self) -> str:
        """A unified diff of the file as it is and as it would be written."""

        def lines(raw: bytes) -> list[str]:
            return [
                line if line.endswith("\n") else line + "\n"
                for line in raw.decode("utf-8", "replace").splitlines(keepends=True)
            ]

        old, new = lines(self.snapshot.raw), lines(self.new_raw)
        name = str(self.target.path)
        return "".join(difflib.unified_diff(old, new, name, f"{name} (after {self.op})"))


def _select(
    entries: list[ServerEntry], servers: Sequence[str] | None
) -> tuple[list[ServerEntry], list[Outcome]]:
    if servers is None:
        return entries, []
    names = {e.name for e in entries}
    chosen = [e for e in entries if e.name in set(servers)]
    missing = [
        Outcome(s, "missing", f"no server named {s!r} here") for s in servers if s not in names
    ]
    return chosen, missing


def _remote_advice(entry: ServerEntry) -> str:
    url = entry.url or "URL"
    return (
        f"remote server ({url}), not a stdio command: left alone. Record it through the reverse"
        f" proxy: `mcptape record --upstream {url} --port 8765`, then point the host at"
        " http://127.0.0.1:8765/mcp"
    )


def plan_install(
    target: ConfigTarget,
    *,
    mcptape: str,
    servers: Sequence[str] | None = None,
    db: str | None = None,
    force: bool = False,
) -> Plan:
    """Plan wrapping the selected stdio servers of one config (all of them when ``servers`` is
    None). Already-wrapped entries are never wrapped twice; a stale mcptape path is updated."""
    snap = read_snapshot(target)
    doc = parse_config(target, snap.raw)
    entries = doc.entries()
    chosen, outcomes = _select(entries, servers)
    edits: list[Edit] = []
    args_added: list[str] = []
    for e in chosen:
        if e.kind == "remote":
            outcomes.append(Outcome(e.name, "remote", _remote_advice(e)))
        elif e.kind == "invalid":
            outcomes.append(Outcome(e.name, "invalid", f"not wrapped: {e.problem}"))
        elif e.wrapped is not None:
            if e.wrapped.mcptape == mcptape:
                outcomes.append(Outcome(e.name, "already", "already records through mcptape"))
            else:
                cmd = e.node.get("command")
                assert cmd is not None
                edits.append((cmd.start, cmd.end, _dumps(mcptape)))
                outcomes.append(
                    Outcome(
                        e.name,
                        "updated",
                        f"already wrapped; mcptape path updated ({e.wrapped.mcptape} → {mcptape})",
                    )
                )
        elif e.odd_mcptape:
            outcomes.append(
                Outcome(
                    e.name,
                    "already",
                    "already runs mcptape (not as `mcptape record … -- COMMAND`): left alone",
                )
            )
        elif e.wrapper and not force:
            outcomes.append(
                Outcome(
                    e.name,
                    "wrapper",
                    f"runs through another wrapper ({e.wrapper}): left alone so that mcptape does"
                    " not record a wrapper instead of the server (--force wraps it anyway)",
                )
            )
        else:
            new, added = wrap_edits(doc.text, e, mcptape, db)
            edits += new
            if added:
                args_added.append(e.name)
            outcomes.append(Outcome(e.name, "wrapped", f"records as {e.name!r}: {_show(e.argv)}"))
    new_text = apply_edits(doc.text, edits)
    wrapped_before = sum(1 for e in entries if e.wrapped)
    wrapped_after = wrapped_before + sum(1 for o in outcomes if o.status == "wrapped")
    return Plan(
        "install",
        target,
        snap,
        doc.encode(new_text),
        outcomes,
        wrapped_before,
        wrapped_after,
        args_added=args_added,
    )


def plan_uninstall(target: ConfigTarget, *, servers: Sequence[str] | None = None) -> Plan:
    """Plan restoring the selected wrapped entries (all when ``servers`` is None).

    When the result has no wrapped entry left and only mcptape changed the file since the
    backup was taken, the plan is the backup's bytes; otherwise entries are unwrapped one by
    one and the rest of the file (the user's or the host's later edits) stays.
    """
    snap = read_snapshot(target)
    doc = parse_config(target, snap.raw)
    entries = doc.entries()
    chosen, outcomes = _select(entries, servers)
    _, manifest_path = backup_paths(target.path)
    manifest = _load_manifest(manifest_path) or {}
    added = set(manifest.get("args_added", ()))
    edits: list[Edit] = []
    unwrapped: list[str] = []
    for e in chosen:
        if e.wrapped is not None:
            edits += unwrap_edits(doc.text, e, args_added=e.name in added)
            unwrapped.append(e.name)
            outcomes.append(Outcome(e.name, "unwrapped", f"restored: {_show(e.wrapped.original)}"))
        elif e.odd_mcptape:
            outcomes.append(
                Outcome(
                    e.name,
                    "invalid",
                    "runs mcptape, but not as `mcptape record … -- COMMAND`: edit it by hand",
                )
            )
        elif servers is not None:
            outcomes.append(Outcome(e.name, "not-wrapped", "not wrapped by mcptape"))
    wrapped_before = sum(1 for e in entries if e.wrapped)
    wrapped_after = wrapped_before - len(unwrapped)
    new_raw = doc.encode(apply_edits(doc.text, edits))
    backup = _restorable_backup(target, snap, manifest) if unwrapped and not wrapped_after else None
    if backup is not None:
        new_raw = backup
    return Plan(
        "uninstall",
        target,
        snap,
        new_raw,
        outcomes,
        wrapped_before,
        wrapped_after,
        unwrapped=unwrapped,
        from_backup=backup is not None,
    )


def _restorable_backup(
    target: ConfigTarget, snap: Snapshot, manifest: Mapping[str, Any]
) -> bytes | None:
    """The backup's bytes if putting them back loses nothing: the backup had no wrapped entry,
    and every change since was mcptape's own (the file is what mcptape last wrote)."""
    if not manifest or not manifest.get("pristine") or not manifest.get("only_mcptape_edits"):
        return None
    if manifest.get("written_sha256") != snap.sha256:
        return None
    backup = _read_optional(backup_paths(target.path)[0])
    if backup is None or _sha(backup) != manifest.get("backup_sha256"):
        return None
    return backup


def _show(argv: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)


@dataclass
class Applied:
    """What :func:`apply_plan` did besides writing the config."""

    written: bool
    backup: Path | None = None
    #: uninstall kept the backup because it restored entry by entry (the user may want it).
    backup_kept: bool = False


def apply_plan(plan: Plan, *, before_replace: Callable[[], None] | None = None) -> Applied:
    """Write the planned file: backup first (install), atomic replace with a concurrency check,
    then the manifest. On any failure the config is as it was and a backup made by this call
    is taken back."""
    if not plan.changed:
        return Applied(False)
    path = plan.target.path
    check_writable(path, plan.snapshot)
    backup_path, manifest_path = backup_paths(path)
    manifest = _load_manifest(manifest_path)
    new_sha = _sha(plan.new_raw)
    if plan.op == "install":
        return _apply_install(plan, manifest, new_sha, before_replace)
    atomic_write(path, plan.new_raw, expect=plan.snapshot, before_replace=before_replace)
    if plan.wrapped_after == 0:
        with contextlib.suppress(OSError):
            manifest_path.unlink()
        if plan.from_backup:
            with contextlib.suppress(OSError):
                backup_path.unlink()
            return Applied(True)
        return Applied(True, backup_path if backup_path.exists() else None, backup_kept=True)
    if manifest is not None:
        chain = manifest.get("written_sha256") == plan.snapshot.sha256
        manifest.update(
            written_sha256=new_sha,
            only_mcptape_edits=bool(manifest.get("only_mcptape_edits")) and chain,
            args_added=[n for n in manifest.get("args_added", []) if n not in plan.unwrapped],
        )
        _write_manifest(manifest_path, manifest)
    return Applied(True, backup_path if backup_path.exists() else None)


def _apply_install(
    plan: Plan,
    manifest: dict[str, Any] | None,
    new_sha: str,
    before_replace: Callable[[], None] | None,
) -> Applied:
    path = plan.target.path
    backup_path, manifest_path = backup_paths(path)
    snap = plan.snapshot
    fresh = manifest is None or plan.wrapped_before == 0
    previous_backup = _read_optional(backup_path) if fresh else None
    if fresh:
        # A new cycle: the file as it is now is what uninstall must give back.
        atomic_write(backup_path, snap.raw, mode=0o600 | (snap.mode & 0o600))
        manifest = {
            "format": MANIFEST_FORMAT,
            "config": str(path),
            "created_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "backup_sha256": snap.sha256,
            "pristine": plan.wrapped_before == 0,
            "only_mcptape_edits": True,
            "args_added": [],
        }
    assert manifest is not None
    try:
        atomic_write(path, plan.new_raw, expect=snap, before_replace=before_replace)
    except BaseException:
        if fresh:
            if previous_backup is None:
                with contextlib.suppress(OSError):
                    backup_path.unlink()
            else:
                with contextlib.suppress(OSError, UserError):
                    atomic_write(backup_path, previous_backup)
        raise
    chain = fresh or manifest.get("written_sha256") == snap.sha256
    manifest["only_mcptape_edits"] = bool(manifest.get("only_mcptape_edits")) and chain
    manifest["written_sha256"] = new_sha
    manifest["args_added"] = sorted({*manifest.get("args_added", []), *plan.args_added})
    _write_manifest(manifest_path, manifest)
    return Applied(True, backup_path)


def _write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    # The manifest only speeds up a byte-identical uninstall; failing to write it must not fail
    # an edit that already happened (uninstall then falls back to entry by entry).
    with contextlib.suppress(OSError, UserError):
        atomic_write(path, (json.dumps(manifest, indent=2) + "\n").encode())


# ---------------------------------------------------------------------------------------------
# listing and diagnosis


@dataclass
class ServerStatus:
    """One row of ``mcptape hosts``."""

    name: str
    state: Literal["wrapped", "stdio", "remote", "invalid", "wrapper"]
    detail: str
    db: str | None = None


def list_servers(target: ConfigTarget) -> list[ServerStatus]:
    """The servers of one config and whether each runs through mcptape (raises Config*)."""
    doc = parse_config(target, read_snapshot(target).raw)
    rows = []
    for e in doc.entries():
        if e.kind == "remote":
            rows.append(ServerStatus(e.name, "remote", e.url or "(remote)"))
        elif e.kind == "invalid":
            rows.append(ServerStatus(e.name, "invalid", e.problem or ""))
        elif e.wrapped:
            rows.append(ServerStatus(e.name, "wrapped", _show(e.wrapped.original), db=e.wrapped.db))
        elif e.wrapper:
            rows.append(ServerStatus(e.name, "wrapper", f"via {e.wrapper}: {_show(e.argv)}"))
        else:
            rows.append(ServerStatus(e.name, "stdio", _show(e.argv)))
    return rows


def _ephemeral(path: Path) -> bool:
    """An executable inside a throwaway environment (uvx / pipx run caches) vanishes later."""
    parts = {p.lower() for p in PurePath(path).parts}
    return "archive-v0" in parts or ".cache" in parts


def find_mcptape(override: str | None = None) -> str:
    """The absolute path a host should launch: ``override``, else this installation's script.

    The script beside ``sys.executable`` belongs to the code that is running; if ``PATH`` finds
    the same file through a stable link (``uv tool``'s ``~/.local/bin``), that shorter path is
    used. Symlinks are not resolved: an upgrade replaces their target, not the link.
    """
    if override:
        path = os.path.abspath(os.path.expanduser(override))
        if not os.path.isfile(path):
            raise UserError(f"--mcptape-path {override}: no such file")
        return path
    name = "mcptape.exe" if os.name == "nt" else "mcptape"
    sibling = Path(sys.executable).parent / name
    found = shutil.which("mcptape")
    if sibling.is_file():
        if found and os.path.samefile(found, sibling):
            return os.path.abspath(found)
        if not _ephemeral(sibling):
            return os.path.abspath(sibling)
        if found:
            return os.path.abspath(found)
        raise UserError(
            f"mcptape runs from a temporary environment ({sibling.parent}); install it to stay"
            " (uv tool install mcptape) and run install again"
        )
    if found:
        return os.path.abspath(found)
    raise UserError("cannot find the mcptape executable; give its path with --mcptape-path")


@dataclass
class Check:
    """One line of ``mcptape doctor``."""

    level: Literal["ok", "info", "warn", "problem"]
    subject: str
    message: str
    fix: str | None = None


@dataclass
class DbStatus:
    state: Literal["missing", "current", "behind", "ahead", "unreachable"]
    revision: str | None
    message: str


def database_status(url: str) -> DbStatus:
    """Is the database there, reachable and at the schema this mcptape writes? Creates nothing
    (a SQLite file that does not exist yet is fine: the first recording creates it)."""
    import sqlalchemy as sa

    from mcp_proxy.store.engine import _short, current_revision, sqlite_path, sync_engine
    from mcp_proxy.store.schema import SCHEMA_HEAD

    path = sqlite_path(url)
    if path is not None and not path.exists():
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if os.access(parent, os.W_OK):
            return DbStatus("missing", None, "not created yet (the first recording creates it)")
        return DbStatus("unreachable", None, f"cannot create {path}: {parent} is not writable")
    try:
        engine = sync_engine(url)
    except sa.exc.ArgumentError:
        return DbStatus("unreachable", None, f"not a database URL: {url}")
    except ModuleNotFoundError as exc:
        return DbStatus("unreachable", None, f"no driver for {url}: {exc}")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        rev = current_revision(engine)
    except sa.exc.DBAPIError as exc:
        return DbStatus("unreachable", None, _short(exc))
    finally:
        engine.dispose()
    if rev == SCHEMA_HEAD:
        return DbStatus("current", rev, f"schema {rev} (current)")
    if rev is None:
        return DbStatus("behind", None, f"no mcptape schema yet (needs {SCHEMA_HEAD})")
    if rev > SCHEMA_HEAD:
        return DbStatus("ahead", rev, f"schema {rev} is newer than this mcptape ({SCHEMA_HEAD})")
    return DbStatus("behind", rev, f"schema {rev}, needs migrating to {SCHEMA_HEAD}")


def _find_command(entry: ServerEntry, command: str) -> bool:
    if "${" in command:
        return True  # VS Code variables: resolved by the host, cannot be checked here
    if any(sep in command for sep in ("/", "\\")):
        path = Path(os.path.expanduser(command))
        if not path.is_absolute() and entry.cwd:
            path = Path(entry.cwd) / path
        return path.is_file() and os.access(path, os.X_OK)
    env_path = (entry.env or {}).get("PATH")
    return shutil.which(command, path=env_path if isinstance(env_path, str) else None) is not None


def check_targets(
    targets: Sequence[ConfigTarget], mcptape: str | None, *, report_missing: bool = False
) -> list[Check]:
    """Host-config half of ``mcptape doctor``: wrapped entries still launchable and current.

    A host without a config file is simply not installed, unless the user named it
    (``report_missing``).
    """
    checks: list[Check] = []
    for t in targets:
        subject = t.label
        try:
            entries = parse_config(t, read_snapshot(t).raw).entries()
        except ConfigNotFound as exc:
            if report_missing:
                checks.append(Check("problem", subject, str(exc), "check --host"))
            continue
        except UserError as exc:
            checks.append(Check("problem", subject, str(exc), "fix the file by hand"))
            continue
        wrapped = [e for e in entries if e.wrapped]
        plain = [e for e in entries if e.kind == "stdio" and not e.wrapped and not e.odd_mcptape]
        again = f"mcptape install --host {t.selector}"
        for e in wrapped:
            w = e.wrapped
            assert w is not None
            who = f"{subject} / {e.name}"
            if not os.path.isfile(w.mcptape) or not os.access(w.mcptape, os.X_OK):
                checks.append(
                    Check(
                        "problem",
                        who,
                        f"mcptape at {w.mcptape} is gone: {t.label} cannot start this server",
                        again if mcptape else "reinstall mcptape, then run mcptape install",
                    )
                )
            elif mcptape and w.mcptape != mcptape:
                checks.append(
                    Check(
                        "warn",
                        who,
                        f"launches mcptape at {w.mcptape}, this one is {mcptape}",
                        again,
                    )
                )
            if not _find_command(e, w.original[0]):
                checks.append(
                    Check(
                        "problem",
                        who,
                        f"the wrapped command {w.original[0]!r} is not found",
                        "install it, or put its absolute path in the config",
                    )
                )
            if w.db is None:
                checks.append(
                    Check(
                        "info",
                        who,
                        "no --db: records wherever the host's environment puts the default"
                        " database, which may not be the one this shell reads",
                        f"mcptape uninstall --host {t.selector} -s {e.name}, then install again",
                    )
                )
            if not any(c.subject == who and c.level not in ("ok", "info") for c in checks):
                checks.append(Check("ok", who, f"records {_show(w.original)}"))
        if plain:
            names = ", ".join(e.name for e in plain)
            checks.append(Check("info", subject, f"not recorded: {names}", again))
    return checks
