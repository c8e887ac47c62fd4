"""``mcptape install``, ``uninstall``, ``hosts`` and ``doctor``: host integration.

Thin on purpose: the work (finding configs, planning edits, writing safely, diagnosing) is in
:mod:`mcp_proxy.hosts`; these commands choose targets, print what happened and map errors.

With no ``--host``, every host whose config file exists is handled; a broken config in one host
is reported and the others still go ahead (the exit code says something failed).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_proxy.cli import EXIT_NOT_FOUND, app, fail, handle_errors
from mcp_proxy.commands.common import Format, FormatOption, json_errors, print_json
from mcp_proxy.errors import UserError, report

if TYPE_CHECKING:
    from mcp_proxy.hosts import ConfigTarget, HostEnv, Plan


class OsChoice(StrEnum):
    macos = "macos"
    windows = "windows"
    linux = "linux"


HostOption = Annotated[
    str | None,
    typer.Option(
        "--host",
        help="claude-desktop, claude-code, cursor, vscode, windsurf, or the path of a config"
        " file (default: every host whose config exists).",
    ),
]
ServerOption = Annotated[
    list[str] | None,
    typer.Option("--server", "-s", help="Only this server (repeat for more)."),
]
AllOption = Annotated[bool, typer.Option("--all", help="Every server (the default).")]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Print the diff of each file; write nothing.")
]
OsOption = Annotated[
    OsChoice | None,
    typer.Option("--os", hidden=True, help="Use another OS's config locations (what-if)."),
]
MctapeOption = Annotated[
    str | None,
    typer.Option(
        "--mcptape-path",
        help="The mcptape executable hosts should launch (default: this installation's).",
    ),
]


def _env(os_name: OsChoice | None) -> HostEnv:
    from mcp_proxy.hosts import HostEnv

    return HostEnv.current(os_name.value if os_name else None)  # type: ignore[arg-type]


def _targets(host: str | None, os_name: OsChoice | None) -> list[ConfigTarget]:
    from mcp_proxy.hosts import HOSTS, resolve_targets

    env = _env(os_name)
    targets = resolve_targets(host, env)
    if not targets:
        where = "\n".join(f"  {h.title:15} {h.config_path(env)}" for h in HOSTS.values())
        raise UserError(
            f"no MCP host config found; looked in:\n{where}\n(give one with --host PATH)",
            exit_code=EXIT_NOT_FOUND,
        )
    return targets


def _selection(server: list[str] | None, all_: bool) -> list[str] | None:
    if server and all_:
        fail("give either --server NAME or --all, not both")
    return list(server) if server else None


_MARK = {
    "wrapped": "wrapped",
    "updated": "updated",
    "already": "already",
    "unwrapped": "restored",
    "not-wrapped": "skipped",
    "remote": "skipped",
    "wrapper": "skipped",
    "invalid": "skipped",
    "missing": "missing",
}


@dataclass
class ServerResult:
    """One server of a config file: what install/uninstall did (or would do) with it."""

    server: str
    status: str
    message: str


@dataclass
class TargetResult:
    """One config file: its plan and what became of it (``--format json`` prints these)."""

    host: str
    title: str
    config: str
    #: The servers the plan looked at (not those named with --server that are not here).
    servers: list[ServerResult] = field(default_factory=list)
    #: The file has something to change; ``written``: it was written (never with --dry-run).
    changed: bool = False
    written: bool = False
    #: With --dry-run: the unified diff of what would be written, and why it could not be.
    diff: str | None = None
    note: str | None = None
    backup: str | None = None
    #: uninstall: "backup" (the file's exact bytes from before install) or "entries" (entry by
    #: entry: the file was edited since, and the pre-install copy stays at ``backup``).
    restored: str | None = None
    next: str | None = None
    #: Why this config failed (the others still went ahead), with its exit code.
    error: str | None = None
    exit_code: int = 0
    #: False when the config could not even be read: there is no plan to show.
    planned: bool = True
    #: --server named servers and none of them is in this config.
    none_named_here: bool = False


@dataclass
class RunResult:
    """What install/uninstall did to every target, rendered as text or as one JSON document."""

    op: str
    dry_run: bool
    targets: list[TargetResult] = field(default_factory=list)
    #: Servers named with --server that no config has.
    missing: list[str] = field(default_factory=list)
    #: install: the database wrapped entries record to (written into each entry).
    db: str | None = None
    #: With --host, a failed write ends the command with this error (after the report).
    fatal: UserError | None = None

    @property
    def written(self) -> int:
        return sum(1 for t in self.targets if t.written)

    def to_json(self) -> dict[str, Any]:
        targets = []
        for t in self.targets:
            row = asdict(t)
            del row["planned"], row["none_named_here"]
            targets.append(row)
        return {
            "op": self.op,
            "dry_run": self.dry_run,
            "targets": targets,
            "missing": self.missing,
            "written": self.written,
            "db": self.db,
        }

    def print_text(self) -> None:
        """The human report on stdout; failed configs are named on stderr."""
        for t in self.targets:
            if t.planned:
                self._print_target(t)
        if self.fatal is not None:
            return  # the error says the rest (one line, from the CLI's boundary)
        failed = [t for t in self.targets if t.error is not None]
        if self.dry_run:
            print("dry run: nothing was written")
        elif self.written == 0 and not failed and not self.missing:
            print("nothing to change")
        if self.db is not None and self.written:
            print(f"recordings go to {self.db} (see them with: mcptape sessions)")
        for t in failed:
            print(f"mcptape: {t.title}: {t.error}", file=sys.stderr)

    def _print_target(self, t: TargetResult) -> None:
        print(f"{t.title}: {t.config}")
        if not t.servers and not t.none_named_here:
            print(
                "  no MCP servers configured"
                if self.op == "install"
                else "  nothing wrapped by mcptape"
            )
        if t.none_named_here:
            print("  none of the named servers is here")
        width = max((len(o.server) for o in t.servers), default=0)
        for o in t.servers:
            print(f"  {_MARK[o.status]:8} {o.server:{width}}  {o.message}")
        if t.diff is not None:
            sys.stdout.write(t.diff)
        if t.note is not None:
            print(f"  note: {t.note}")
        if self.op == "install" and t.written and t.backup:
            print(f"  backup: {t.backup}")
        if t.restored == "backup":
            print("  the file is back to its exact bytes from before install")
        elif t.restored == "entries":
            print(
                f"  restored entry by entry (the file was edited since install); the"
                f" pre-install copy stays at {t.backup}"
            )
        if t.next is not None:
            print(f"  next: {t.next}")

    def finish(self, fmt: Format) -> None:
        """Print the report, then end as the outcome says: the error of a failed --host write,
        exit 4 for servers no config has, else the worst failed config's code."""
        if fmt is Format.json:
            print_json(self.to_json())
            for t in self.targets:
                if t.error is not None and self.fatal is None:
                    report(f"{t.title}: {t.error}", t.exit_code)
        else:
            self.print_text()
        if self.fatal is not None:
            raise self.fatal
        if self.missing:
            fail(
                f"no server named {', '.join(repr(s) for s in self.missing)} in"
                f" {', '.join(t.title for t in self.targets)}",
                EXIT_NOT_FOUND,
            )
        codes = [t.exit_code for t in self.targets if t.error is not None]
        if codes:
            raise typer.Exit(max(codes))


def _planned(plan: Plan, dry_run: bool) -> TargetResult:
    """A plan as a result, before anything is written (``--dry-run``: with its diff)."""
    from mcp_proxy.hosts import check_writable

    t = plan.target
    result = TargetResult(
        t.selector,
        t.label,
        str(t.path),
        [
            ServerResult(o.server, o.status, o.message)
            for o in plan.outcomes
            if o.status != "missing"
        ],
        changed=plan.changed,
    )
    result.none_named_here = bool(plan.outcomes) and not result.servers
    if plan.changed and dry_run:
        result.diff = plan.diff()
        try:
            check_writable(t.path, plan.snapshot)
        except UserError as exc:
            result.note = str(exc)
    return result


def _run(
    result: RunResult,
    host: str | None,
    servers: list[str] | None,
    os_name: OsChoice | None,
    make_plan: Any,
) -> None:
    """Plan → apply for every target, into ``result``; one failing target does not stop the
    others (with ``--host``, its failure is the command's error)."""
    from mcp_proxy.hosts import apply_plan

    targets = _targets(host, os_name)
    seen: set[str] = set()
    for t in targets:
        try:
            plan = make_plan(t)
        except UserError as exc:
            if host is not None:
                raise
            failed = TargetResult(t.selector, t.label, str(t.path), planned=False)
            failed.error, failed.exit_code = str(exc), exc.exit_code
            result.targets.append(failed)
            continue
        seen.update(o.server for o in plan.outcomes if o.status != "missing")
        done = _planned(plan, result.dry_run)
        result.targets.append(done)
        if not plan.changed or result.dry_run:
            continue
        try:
            applied = apply_plan(plan)
        except UserError as exc:
            done.error, done.exit_code = str(exc), exc.exit_code
            if host is not None:
                result.fatal = exc
                return
            continue
        done.written = True
        done.backup = str(applied.backup) if applied.backup else None
        if result.op == "uninstall":
            if plan.from_backup:
                done.restored = "backup"
            elif applied.backup_kept and applied.backup:
                done.restored = "entries"
        if plan.target.host:
            done.next = plan.target.host.restart
    result.missing = [s for s in servers or () if s not in seen]


def _pinned_db(db: str | None) -> str:
    """The database wrapped entries record to, fixed at install time (see docs/hosts.md).

    Hosts start servers with a minimal environment (no MCPTAPE_DB, often no XDG_* variables),
    so the default location as seen from this shell is written into the entry; a SQLite URL is
    written as a plain absolute path.
    """
    from mcp_proxy.store.engine import resolve_url, sqlite_path

    url = resolve_url(db)
    path = sqlite_path(url)
    if path is not None:
        return str(path)
    from mcp_proxy.store.status import url_has_password

    if url_has_password(url):
        print(
            "mcptape: warning: the database URL carries a password; it will be visible in"
            " the host config and the process list (prefer a password file, e.g. ~/.pgpass)",
            file=sys.stderr,
        )
    return url


@app.command()
@handle_errors
def install(
    host: HostOption = None,
    server: ServerOption = None,
    all_: AllOption = False,
    dry_run: DryRunOption = False,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Database the wrapped servers record to (default: MCPTAPE_DB or the user data"
            " dir, as seen from this shell; written into each entry).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Also wrap entries that run another MCP wrapper.")
    ] = False,
    mcptape_path: MctapeOption = None,
    os_name: OsOption = None,
    fmt: FormatOption = Format.text,
) -> None:
    """Make a host launch its MCP servers through `mcptape record`.

    Rewrites each stdio server to `<mcptape> record --name NAME --db DB -- COMMAND ARGS…`,
    keeping env, cwd and every other field. A backup is written first; `mcptape uninstall`
    puts everything back.

      mcptape install --dry-run                 # show the diff for every host found
      mcptape install --host claude-desktop     # wrap all of Claude Desktop's servers
      mcptape install --host vscode -s github   # only one server
    """
    from mcp_proxy.hosts import find_mcptape, plan_install

    json_errors(fmt)
    servers = _selection(server, all_)
    exe = find_mcptape(mcptape_path)
    pinned = _pinned_db(db)
    result = RunResult("install", dry_run, db=pinned)
    _run(
        result,
        host,
        servers,
        os_name,
        lambda t: plan_install(t, mcptape=exe, servers=servers, db=pinned, force=force),
    )
    if result.written:
        _prepare_db(pinned)
    result.finish(fmt)


def _prepare_db(db: str) -> None:
    """Create and migrate the database now, so that the host's first server start does not pay
    for the migration and a database problem shows here rather than in a host's log. A failure
    is a warning: ``mcptape record`` still relays without a database, so the host works."""
    from mcp_proxy.errors import StoreError
    from mcp_proxy.store.engine import ensure_schema, resolve_url

    try:
        ensure_schema(resolve_url(db))
    except StoreError as exc:
        print(
            f"mcptape: warning: database {db}: {exc}; the servers will run but not be recorded"
            " until this is fixed (see mcptape doctor)",
            file=sys.stderr,
        )


@app.command()
@handle_errors
def uninstall(
    host: HostOption = None,
    server: ServerOption = None,
    all_: AllOption = False,
    dry_run: DryRunOption = False,
    os_name: OsOption = None,
    fmt: FormatOption = Format.text,
) -> None:
    """Put the host's server entries back as they were before `mcptape install`.

    Byte-identical to the backup when only mcptape changed the file since; otherwise each
    wrapped entry is restored and everyone else's edits stay.
    """
    from mcp_proxy.hosts import plan_uninstall

    json_errors(fmt)
    servers = _selection(server, all_)
    result = RunResult("uninstall", dry_run)
    _run(result, host, servers, os_name, lambda t: plan_uninstall(t, servers=servers))
    result.finish(fmt)


@app.command()
@handle_errors
def hosts(
    host: HostOption = None,
    fmt: FormatOption = Format.text,
    os_name: OsOption = None,
) -> None:
    """List known hosts, where their config is, and which servers record through mcptape."""
    from mcp_proxy.hosts import HOSTS, ConfigNotFound, ConfigTarget, list_servers, resolve_targets

    json_errors(fmt)
    env = _env(os_name)
    if host is None:
        targets = [ConfigTarget(h.config_path(env), h) for h in HOSTS.values()]
    else:
        targets = resolve_targets(host, env)
    out: list[dict[str, Any]] = []
    for t in targets:
        row: dict[str, Any] = {"host": t.selector, "title": t.label, "config": str(t.path)}
        try:
            row["servers"] = [vars(s) for s in list_servers(t)]
            row["state"] = "found"
        except ConfigNotFound:
            row["state"] = "no config"
            row["servers"] = []
        except UserError as exc:
            row["state"] = "error"
            row["error"] = str(exc)
            row["servers"] = []
        out.append(row)
    if fmt is Format.json:
        print_json(out)
        return
    for row in out:
        suffix = "" if row["state"] == "found" else f"  ({row['state']})"
        print(f"{row['title']} [{row['host']}]: {row['config']}{suffix}")
        if "error" in row:
            print(f"  {row['error']}")
        width = max((len(s["name"]) for s in row["servers"]), default=0)
        for s in row["servers"]:
            state = {"stdio": "plain", "wrapper": "other"}.get(s["state"], s["state"])
            db = f"  → {s['db']}" if s.get("db") else ""
            print(f"  {state:8} {s['name']:{width}}  {s['detail']}{db}")


@app.command()
@handle_errors
def doctor(
    host: HostOption = None,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Database to check (default: MCPTAPE_DB or the user data dir)."),
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Migrate databases that are behind, without asking.")
    ] = False,
    mcptape_path: MctapeOption = None,
    os_name: OsOption = None,
    fmt: FormatOption = Format.text,
) -> None:
    """Check the database and every host config that records through mcptape; say what to fix.

    Exit status: 0 all good, 1 something needs fixing.
    """
    from mcp_proxy.hosts import (
        HOSTS,
        Check,
        ConfigTarget,
        check_targets,
        find_mcptape,
        list_servers,
        resolve_targets,
    )
    from mcp_proxy.store.engine import ensure_schema, resolve_url
    from mcp_proxy.store.status import database_status

    json_errors(fmt)
    env = _env(os_name)
    checks: list[Check] = []
    try:
        exe: str | None = find_mcptape(mcptape_path)
    except UserError as exc:
        if mcptape_path:
            raise
        exe = None
        checks.append(Check("warn", "mcptape executable", str(exc)))
    if host is None:
        targets = [ConfigTarget(h.config_path(env), h) for h in HOSTS.values()]
    else:
        targets = resolve_targets(host, env)
    checks += check_targets(targets, exe, report_missing=host is not None)

    # Databases: the one this shell uses, and every one a wrapped entry pins.
    urls: dict[str, list[str]] = {resolve_url(db): ["this shell"]}
    for t in targets:
        try:
            rows = list_servers(t)
        except UserError:
            continue
        for s in rows:
            if s.state == "wrapped":
                urls.setdefault(resolve_url(s.db), []).append(f"{t.label} / {s.name}")
    for url, users in urls.items():
        subject = f"database {url.removeprefix('sqlite:///')}"
        status = database_status(url)
        note = f" (used by {', '.join(users)})"
        if status.state == "behind":
            migrate = fix or (  # never a question on stdout when it carries JSON
                fmt is Format.text
                and sys.stdin.isatty()
                and typer.confirm(f"{subject}: {status.message}. Migrate now?")
            )
            if migrate:
                ensure_schema(url)
                status = database_status(url)
                checks.append(Check("ok", subject, f"migrated: {status.message}{note}"))
                continue
            checks.append(Check("problem", subject, status.message + note, "mcptape doctor --fix"))
        elif status.state in ("unreachable", "ahead"):
            hint = "upgrade mcptape" if status.state == "ahead" else "check the path or URL"
            checks.append(Check("problem", subject, status.message + note, hint))
        else:
            checks.append(Check("ok", subject, status.message + note))
    if len(urls) > 1:
        checks.append(
            Check(
                "info",
                "databases",
                f"wrapped servers record to {len(urls)} different databases; pass --db to"
                " mcptape sessions to see each",
            )
        )
    problems = sum(1 for c in checks if c.level == "problem")
    if fmt is Format.json:
        print_json({"checks": [asdict(c) for c in checks], "problems": problems})
    else:
        for c in checks:
            print(f"{c.level:8} {c.subject}: {c.message}")
            if c.fix and c.level != "ok":
                print(f"{'':8}   fix: {c.fix}")
        print(f"{problems} problem(s) found" if problems else "no problems found")
    if problems:
        raise typer.Exit(1)
