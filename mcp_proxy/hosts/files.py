"""Snapshots, atomic writes and backups: every write re-reads the file first.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_proxy.hosts.registry import ConfigChanged, ConfigError, ConfigNotFound, ConfigTarget

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


def sha256_hex(data: bytes) -> str:
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
    return Snapshot(raw, sha256_hex(raw), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


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
            if now is None or sha256_hex(now) != expect.sha256:
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


def load_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        return None
    return data


def read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
