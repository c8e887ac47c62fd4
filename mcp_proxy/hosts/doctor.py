"""Listing and diagnosis: what `mcptape hosts` and `mcptape doctor` report.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal

from mcp_proxy.errors import UserError
from mcp_proxy.hosts.document import parse_config
from mcp_proxy.hosts.entries import ServerEntry
from mcp_proxy.hosts.files import read_snapshot
from mcp_proxy.hosts.plan import show_argv
from mcp_proxy.hosts.registry import ConfigNotFound, ConfigTarget

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
            rows.append(
                ServerStatus(e.name, "wrapped", show_argv(e.wrapped.original), db=e.wrapped.db)
            )
        elif e.wrapper:
            rows.append(ServerStatus(e.name, "wrapper", f"via {e.wrapper}: {show_argv(e.argv)}"))
        else:
            rows.append(ServerStatus(e.name, "stdio", show_argv(e.argv)))
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
                checks.append(Check("ok", who, f"records {show_argv(w.original)}"))
        if plain:
            names = ", ".join(e.name for e in plain)
            checks.append(Check("info", subject, f"not recorded: {names}", again))
    return checks
