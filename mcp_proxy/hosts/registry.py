"""Hosts and where their configs live on each OS; the errors of host editing.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mcp_proxy.errors import NotFoundError, UserError

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
