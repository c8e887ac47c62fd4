"""Plans: what install and uninstall would change, shown before it is applied.

Part of :mod:`mcp_proxy.hosts` (see its docstring for why configs are edited by spans)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp_proxy.errors import UserError
from mcp_proxy.hosts.document import parse_config
from mcp_proxy.hosts.edits import Edit, apply_edits, json_string, unwrap_edits, wrap_edits
from mcp_proxy.hosts.entries import ServerEntry
from mcp_proxy.hosts.files import (
    MANIFEST_FORMAT,
    Snapshot,
    atomic_write,
    backup_paths,
    check_writable,
    load_manifest,
    read_optional,
    read_snapshot,
    sha256_hex,
)
from mcp_proxy.hosts.registry import ConfigTarget

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
                edits.append((cmd.start, cmd.end, json_string(mcptape)))
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
            outcomes.append(
                Outcome(e.name, "wrapped", f"records as {e.name!r}: {show_argv(e.argv)}")
            )
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
    manifest = load_manifest(manifest_path) or {}
    added = set(manifest.get("args_added", ()))
    edits: list[Edit] = []
    unwrapped: list[str] = []
    for e in chosen:
        if e.wrapped is not None:
            edits += unwrap_edits(doc.text, e, args_added=e.name in added)
            unwrapped.append(e.name)
            outcomes.append(
                Outcome(e.name, "unwrapped", f"restored: {show_argv(e.wrapped.original)}")
            )
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
    backup = read_optional(backup_paths(target.path)[0])
    if backup is None or sha256_hex(backup) != manifest.get("backup_sha256"):
        return None
    return backup


def show_argv(argv: Sequence[str]) -> str:
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
    manifest = load_manifest(manifest_path)
    new_sha = sha256_hex(plan.new_raw)
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
    previous_backup = read_optional(backup_path) if fresh else None
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
