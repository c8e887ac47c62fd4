"""The layering rules of docs/architecture.md, read from the imports with ``ast``.

Each rule says which project modules a layer may import. A module's imports are every
``import``/``from … import`` statement anywhere in it (function-local imports count too: a lazy
import is still a dependency). The checker is a plain function so that one test can show it
failing on a deliberate violation.

The shape rules (no source module over ~800 lines except data tables, no function nested
deeper than 5 blocks) are checked here too: they are what keeps each room small enough to read.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mcp_proxy", "dashboard", "addons")

#: The core: pure data and protocol facts. It imports nothing of the project but itself.
CORE = (
    "mcp_proxy.frames",
    "mcp_proxy.framing",
    "mcp_proxy.headers",
    "mcp_proxy.protocol",
    "mcp_proxy.errors",
    "mcp_proxy.osutil",
    "mcp_proxy.netutil",
    "mcp_proxy.limits",
    "mcp_proxy.bounded",
    "mcp_proxy.tokens",
    "mcp_proxy.jsonpaths",
    # ``from mcp_proxy import __version__``: the package's own ``__init__`` imports nothing.
    "mcp_proxy.__version__",
)
#: What a relay may hand its bytes to: the recorder contract (and the redaction policy the
#: relay applies to what it hands over, and the handshake facts the relay needs to group).
RECORDER_CONTRACT = (
    "mcp_proxy.recorder",
    "mcp_proxy.redact",
    "mcp_proxy.handshake",
)
#: The fault engine (pure: rules, decisions, the bytes a fault sends) that relays carry out.
FAULTS = ("mcp_proxy.faults",)
STORE = ("mcp_proxy.store",)
ANALYSIS = ("mcp_proxy.analysis",)
RECORDING = ("mcp_proxy.recording",)
#: The one OpenTelemetry span builder and the live exporter: used by the recorder process and by
#: recording/otlp.py, so it imports only the core and the store (its row seam).
OTEL = ("mcp_proxy.otel",)
RELAYS = ("mcp_proxy.relay", "mcp_proxy.forward", "addons")
#: Library helpers outside the rooms table's rows that the upper rooms use: starting and
#: stopping a child process (imports only the core) and text rendering of frames (core, store).
HELPERS = ("mcp_proxy.childproc", "mcp_proxy.render")
TRAVEL = (
    "mcp_proxy.replay",
    "mcp_proxy.mock",
    "mcp_proxy.diff",
    "mcp_proxy.normalize",
    "mcp_proxy.mcp_client",
)
HOSTS = ("mcp_proxy.hosts",)
#: Intercept (docs/intercept.md): what a person may send (pure) and the relay's hold desk,
#: which keeps held messages in the store. Relays use it through a Protocol, never an import.
INTERCEPT = ("mcp_proxy.intercept",)
CLI = ("mcp_proxy.cli", "mcp_proxy.commands", "mcp_proxy.entry", "mcp_proxy.__main__")
#: The forward tape (both engines and ``mitmdump -s`` record through it) and what it reads.
TAPE = (
    "mcp_proxy.forward.tape",
    "mcp_proxy.forward.exchange",
    "mcp_proxy.forward.request_side",
    "mcp_proxy.forward.recognize",
    "mcp_proxy.forward.oauth",
)


@dataclass(frozen=True)
class Rule:
    """Modules under ``layer`` may not import anything under ``forbidden`` (prefix match),
    or, when ``only`` is given, anything of the project outside ``only``."""

    name: str
    layer: tuple[str, ...]
    forbidden: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    exempt: tuple[str, ...] = ()


RULES = (
    Rule("core imports nothing of the project", CORE, only=CORE),
    Rule(
        "the recorder contract imports only the core, the store and otel/",
        RECORDER_CONTRACT,
        only=(*CORE, *RECORDER_CONTRACT, *STORE, *OTEL),
    ),
    Rule(
        "relays import only the core, the recorder contract and the fault engine",
        RELAYS,
        only=(*CORE, *RECORDER_CONTRACT, *FAULTS, *RELAYS),
    ),
    Rule(
        "relay/ never imports forward/",
        ("mcp_proxy.relay",),
        forbidden=("mcp_proxy.forward",),
    ),
    Rule("the fault engine imports only the core", FAULTS, only=(*CORE, *FAULTS)),
    Rule("the store imports only the core", STORE, only=(*CORE, *STORE)),
    Rule(
        "analysis imports only the core and the store",
        ANALYSIS,
        only=(*CORE, *STORE, *ANALYSIS),
    ),
    Rule(
        "recording/ imports only the core, redact/handshake, the store, analysis and otel/",
        RECORDING,
        only=(
            *CORE,
            "mcp_proxy.redact",
            "mcp_proxy.handshake",
            *STORE,
            *ANALYSIS,
            *RECORDING,
            *OTEL,
        ),
    ),
    Rule(
        "replay/, mock/, diff, normalize and mcp_client import only the rooms below them",
        TRAVEL,
        only=(
            *CORE,
            *RECORDER_CONTRACT,
            *RELAYS,
            *STORE,
            *ANALYSIS,
            *RECORDING,
            *FAULTS,
            *HELPERS,
            *TRAVEL,
        ),
    ),
    Rule("hosts/ imports only the core and the store", HOSTS, only=(*CORE, *STORE, *HOSTS)),
    Rule("the dashboard imports library rooms, never the CLI", ("dashboard",), forbidden=CLI),
    Rule(
        "only the CLI imports typer or a command module",
        PACKAGES,
        forbidden=("typer", "mcp_proxy.commands", "mcp_proxy.cli", "mcp_proxy.entry"),
        exempt=CLI,
    ),
    Rule(
        "only the store speaks SQL",
        PACKAGES,
        forbidden=("sqlalchemy", "sqlite3", "psycopg", "asyncpg", "aiosqlite"),
        exempt=STORE,
    ),
    Rule(
        "only the CLI imports the dashboard",
        ("mcp_proxy", "addons"),
        forbidden=("dashboard",),
        exempt=CLI,
    ),
    Rule(
        "otel/ imports only the core and store/rows.py",
        OTEL,
        only=(*CORE, "mcp_proxy.store.rows", *OTEL),
    ),
    Rule(
        "intercept/ imports only the core, the fault engine and the store",
        INTERCEPT,
        only=(*CORE, *FAULTS, *STORE, *INTERCEPT),
    ),
    Rule(
        "the forward tape imports nothing of the engines or the adapter, and of relay/http only"
        " its session grouping, kept bodies and request-body recording",
        TAPE,
        only=(
            *CORE,
            *RECORDER_CONTRACT,
            *TAPE,
            "mcp_proxy.forward.tunnel",  # (``Target``: the authority an exchange records)
            "mcp_proxy.relay.http.sessions",
            "mcp_proxy.relay.http.common",
            "mcp_proxy.relay.http.kept",
            "mcp_proxy.relay.http.request_side",
        ),
    ),
    Rule(
        "the mitmproxy adapter imports only the tape, the recorder client and redact",
        ("mcp_proxy.forward.addon",),
        only=(*CORE, *TAPE, "mcp_proxy.recorder.client", "mcp_proxy.redact"),
    ),
    Rule(
        "store/rows.py, the seam the recorder and otel/ share, imports no SQL library",
        ("mcp_proxy.store.rows",),
        forbidden=("sqlalchemy", "sqlite3", "psycopg", "asyncpg", "aiosqlite"),
    ),
)

#: The two ways to the store (docs/architecture.md, "The store"): the driver (``sqlite3``,
#: psycopg) for bulk streams and the modules that write their own SQL, async SQLAlchemy for pages
#: and small queries. SQLAlchemy statements (Core's ``select``/``insert``/``update``/``delete``,
#: ``text``, the schema's tables) are built only by the async store's modules and by the
#: migration code (``store/engine.py``: alembic, the revision, the migration lock); sync
#: SQLAlchemy is otherwise only PostgreSQL's connection source.
SQLALCHEMY_STATEMENTS_ALLOWED = (
    "mcp_proxy.store.queries",
    "mcp_proxy.store.pages",
    "mcp_proxy.store.annotations",
    "mcp_proxy.store.filters",
    "mcp_proxy.store.base",
    "mcp_proxy.store.schema",
    "mcp_proxy.store.engine",
)
#: What builds or runs a statement through SQLAlchemy.
SQLALCHEMY_STATEMENT_NAMES = frozenset(
    {
        "select", "insert", "update", "delete", "text", "func", "bindparam", "literal",
        "literal_column", "null", "and_", "or_", "not_", "case", "cast", "exists", "union",
        "Table", "Column", "MetaData", "table", "column",
    }
)  # fmt: skip


def sqlalchemy_statements(root: Path) -> list[str]:
    """One line per use of a SQLAlchemy statement outside :data:`SQLALCHEMY_STATEMENTS_ALLOWED`:
    a statement name imported from ``sqlalchemy`` or read off the module (``sa.select``), an
    import of ``mcp_proxy.store.schema`` (its tables are statements' objects) or
    ``exec_driver_sql`` (SQL through a SQLAlchemy connection)."""
    project = tuple(p for p in PACKAGES if (root / p).is_dir())
    found: list[str] = []
    for path in sorted(f for p in project for f in (root / p).rglob("*.py")):
        module = module_name(path, root)
        if _under(module, SQLALCHEMY_STATEMENTS_ALLOWED):
            continue
        tree = parsed(path)[1]
        here: list[tuple[int, str]] = []
        aliases = {"sqlalchemy"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update(a.asname or a.name for a in node.names if a.name == "sqlalchemy")
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.ImportFrom) and not node.level:
                target = node.module or ""
                names = {a.name for a in node.names}
                if target.split(".")[0] == "sqlalchemy" and names & SQLALCHEMY_STATEMENT_NAMES:
                    what = f"from {target} import {', '.join(sorted(names))}"
                elif target == "mcp_proxy.store.schema" or (
                    target == "mcp_proxy.store" and "schema" in names
                ):
                    what = "imports mcp_proxy.store.schema"
            elif isinstance(node, ast.Import):
                if any(a.name == "mcp_proxy.store.schema" for a in node.names):
                    what = "imports mcp_proxy.store.schema"
            elif isinstance(node, ast.Attribute):
                if node.attr == "exec_driver_sql":
                    what = "exec_driver_sql"
                elif (
                    node.attr in SQLALCHEMY_STATEMENT_NAMES
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                ):
                    what = f"{node.value.id}.{node.attr}"
            if what is not None:
                here.append((getattr(node, "lineno", 0), what))
        found += [f"{module}:{line} {what}" for line, what in sorted(here)]
    return found


def mitmproxy_imports(root: Path) -> list[str]:
    """One line per import of mitmproxy that breaks "mitmproxy is imported only inside
    ``forward/``, inside functions" (docs/architecture.md): outside ``mcp_proxy/forward`` at
    all, or there at a module's top level (where ``mcptape record -- CMD`` would load it)."""
    project = tuple(p for p in PACKAGES if (root / p).is_dir())
    found: list[str] = []
    for path in sorted(f for p in project for f in (root / p).rglob("*.py")):
        module = module_name(path, root)
        tree = parsed(path)[1]
        local = {
            id(n)
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            if not any(n.split(".")[0] == "mitmproxy" for n in names):
                continue
            if not _under(module, ("mcp_proxy.forward",)):
                found.append(f"{module}:{node.lineno} imports mitmproxy outside forward/")
            elif id(node) not in local:
                found.append(f"{module}:{node.lineno} imports mitmproxy at the top level")
    return found


def test_mitmproxy_is_imported_only_inside_forward_functions(tmp_path: Path) -> None:
    assert mitmproxy_imports(ROOT) == []
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(
        tmp_path, "mcp_proxy/forward/lean.py", "import mitmproxy\ndef f():\n    import mitmproxy\n"
    )
    _write(tmp_path, "mcp_proxy/recording/har.py", "def f():\n    from mitmproxy import io\n")
    assert mitmproxy_imports(tmp_path) == [
        "mcp_proxy.forward.lean:1 imports mitmproxy at the top level",
        "mcp_proxy.recording.har:2 imports mitmproxy outside forward/",
    ]


def test_only_the_async_store_and_the_migrations_build_sqlalchemy_statements() -> None:
    found = sqlalchemy_statements(ROOT)
    assert not found, "a third way to the store (use the driver: engine.Driver):\n" + "\n".join(
        found
    )


def test_the_statement_check_catches_each_form(tmp_path: Path) -> None:
    """Each form is named outside the allowed modules; the same code inside them passes, and so
    do SQLAlchemy's exceptions and URL parsing (the driver's connection source uses them)."""
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(
        tmp_path,
        "mcp_proxy/store/copy.py",
        """\
        import sqlalchemy as sa
        from sqlalchemy import select
        from mcp_proxy.store.schema import sessions
        from mcp_proxy.store import schema

        def f(conn):
            sa.engine.make_url("sqlite://")
            conn.execute(sa.update(sessions))
            conn.exec_driver_sql("SELECT 1")
            try:
                pass
            except sa.exc.DBAPIError:
                pass
        """,
    )
    _write(tmp_path, "mcp_proxy/store/pages.py", "import sqlalchemy as sa\nq = sa.select(1)\n")
    assert sqlalchemy_statements(tmp_path) == [
        "mcp_proxy.store.copy:2 from sqlalchemy import select",
        "mcp_proxy.store.copy:3 imports mcp_proxy.store.schema",
        "mcp_proxy.store.copy:4 imports mcp_proxy.store.schema",
        "mcp_proxy.store.copy:8 sa.update",
        "mcp_proxy.store.copy:9 exec_driver_sql",
    ]


#: Uses of another module's private name that predate the check (issue #24): the list may
#: only shrink. A new use fails the test; a fixed one fails it too until its line goes.
PRIVATE_USES_ALLOWED: frozenset[str] = frozenset()

#: Modules allowed over the size limit because they are data tables, not logic.
DATA_TABLES = ("mcp_proxy/analysis/catalogue.py",)
MAX_LINES = 820  # "~800"
MAX_DEPTH = 5
_BLOCKS = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.TryStar,
    ast.Match,
)


#: The exchange pipeline's rooms (issue #23: the reverse relay, the lean forward engine, fault
#: injection's hooks): no class there is over ``MAX_CLASS_LINES`` — a class that grows past it
#: is split by composition into parts with one concern each.
PIPELINE = ("mcp_proxy/relay/http", "mcp_proxy/forward")
MAX_CLASS_LINES = 400


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@lru_cache(maxsize=1024)
def parsed(path: Path) -> tuple[str, ast.Module]:
    """``path``'s source and syntax tree, parsed once for the several checks that read every
    module (the trees are only read, never changed)."""
    source = path.read_text(encoding="utf-8")
    return source, ast.parse(source, filename=str(path))


def imports_of(path: Path, module: str) -> set[str]:
    """Every module name ``path`` imports (relative imports resolved against ``module``)."""
    tree = parsed(path)[1]
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from mcp_proxy import x`` is judged by ``mcp_proxy.x`` alone: the top package
            # itself would match every rule's prefix.
            if target not in PACKAGES:
                out.add(target)
            # ``from pkg import mod`` imports the submodule ``pkg.mod`` when there is one.
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def violations(root: Path, rules: Iterable[Rule] = RULES) -> list[str]:
    """One line per import that breaks a rule: ``module imports target (rule)``."""
    project = tuple(p for p in PACKAGES if (root / p).is_dir())
    found: list[str] = []
    files = sorted(f for p in project for f in (root / p).rglob("*.py"))
    for path in files:
        module = module_name(path, root)
        imported = imports_of(path, module)
        for rule in rules:
            if not _under(module, rule.layer) or _under(module, rule.exempt):
                continue
            for target in sorted(imported):
                if rule.only is not None:
                    bad = _under(target, project) and not _under(target, rule.only)
                else:
                    bad = _under(target, rule.forbidden)
                if bad:
                    found.append(f"{module} imports {target} ({rule.name})")
    return found


def _is_module(root: Path, name: str) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _resolve(node: ast.ImportFrom, module: str, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_pkg else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


@dataclass
class _PrivateScan:
    """One module's uses of other project modules' private names (``_x``, not ``__x__``)."""

    root: Path
    module: str
    is_pkg: bool
    project: tuple[str, ...]
    found: list[str]

    def imports(self, body: ast.AST, names: dict[str, str]) -> dict[str, str]:
        """``names`` plus the project modules ``body``'s imports bind (nested defs aside)."""
        out = dict(names)
        for node in _own_nodes(body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    out.pop(bound, None)  # a third-party name shadows a project one
                    if _under(alias.name, self.project):
                        out[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    out.pop(alias.asname or alias.name, None)
                self.from_import(node, out)
        return out

    def from_import(self, node: ast.ImportFrom, out: dict[str, str]) -> None:
        target = _resolve(node, self.module, self.is_pkg)
        if not _under(target, self.project):
            return
        for alias in node.names:
            full = f"{target}.{alias.name}"
            if _is_module(self.root, full):
                out[alias.asname or alias.name] = full
            elif _private(alias.name) and target != self.module:
                self.found.append(f"{self.module} imports {full}")

    def scope(self, body: ast.AST, names: dict[str, str]) -> None:
        """Check ``body`` (a module or a function) with the module names visible in it."""
        names = self.imports(body, names)
        if isinstance(body, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for arg in ast.walk(body.args):
                if isinstance(arg, ast.arg):
                    names.pop(arg.arg, None)
        for node in _own_nodes(body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                self.scope(node, names)
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                head, _, rest = (_dotted(node.value) or "").partition(".")
                owner = ".".join(filter(None, [names.get(head), rest]))
                if head in names and owner != self.module and _is_module(self.root, owner):
                    self.found.append(f"{self.module} uses {owner}.{node.attr}")


def _own_nodes(body: ast.AST) -> Iterable[ast.AST]:
    """Every node under ``body`` except those inside nested functions (those are scopes)."""
    stack = list(ast.iter_child_nodes(body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def private_uses(root: Path) -> list[str]:
    """``module imports other._x`` / ``module uses other._x``: one line per use of another
    project module's private name (the house rule "no module calls another's private names")."""
    project = tuple(p for p in PACKAGES if (root / p).is_dir())
    found: list[str] = []
    for path in sorted(f for p in project for f in (root / p).rglob("*.py")):
        module = module_name(path, root)
        tree = parsed(path)[1]
        _PrivateScan(root, module, path.name == "__init__.py", project, found).scope(tree, {})
    return sorted(set(found))


#: Underscored names that are a public API of the standard library's types (``NamedTuple``,
#: ``Enum``), not private.
PUBLIC_UNDERSCORED = frozenset(
    {"_replace", "_fields", "_make", "_asdict", "_field_defaults", "_value_", "_name_", "_missing_"}
)


def private_members(root: Path) -> list[str]:
    """``module uses other.Name._x``: a private member of a class (or anything) imported from
    another project module, read through its name (``SqliteBackend._insert_big``) — the
    private-name rule's other half (an instance's ``obj._x`` cannot be told apart statically)."""
    project = tuple(p for p in PACKAGES if (root / p).is_dir())
    found: list[str] = []
    for path in sorted(f for p in project for f in (root / p).rglob("*.py")):
        module = module_name(path, root)
        tree = parsed(path)[1]
        imported: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(node, module, path.name == "__init__.py")
                if not _under(target, project) or target == module:
                    continue
                for alias in node.names:
                    if not _is_module(root, f"{target}.{alias.name}"):
                        imported[alias.asname or alias.name] = f"{target}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and node.attr not in PUBLIC_UNDERSCORED
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
            ):
                found.append(f"{module}:{node.lineno} uses {imported[node.value.id]}.{node.attr}")
    return found


def test_no_module_reads_a_private_member_of_another_modules_class(tmp_path: Path) -> None:
    assert private_members(ROOT) == []
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(tmp_path, "mcp_proxy/store/__init__.py", "")
    _write(tmp_path, "mcp_proxy/store/writer.py", "class B:\n    def _big(self): ...\n")
    _write(
        tmp_path,
        "mcp_proxy/store/writes.py",
        "from mcp_proxy.store.writer import B\nB._big(1)\nB._fields\n",
    )
    assert private_members(tmp_path) == [
        "mcp_proxy.store.writes:2 uses mcp_proxy.store.writer.B._big"
    ]


def _is_elif(parent: ast.AST, child: ast.AST) -> bool:
    """``elif`` is an ``If`` alone in its parent's ``orelse``: the same level, not a deeper one."""
    return isinstance(parent, ast.If) and isinstance(child, ast.If) and parent.orelse == [child]


def _depth(node: ast.AST, level: int = 0) -> int:
    deepest = level
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue  # nested definitions are measured on their own
        if _is_elif(node, child):
            inner = level
        else:
            inner = level + 1 if isinstance(child, _BLOCKS) else level
        deepest = max(deepest, _depth(child, inner))
    return deepest


def shape_problems(root: Path) -> list[str]:
    """Modules over the size limit and functions nested deeper than ``MAX_DEPTH``."""
    out: list[str] = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).is_dir() else ():
            rel = path.relative_to(root).as_posix()
            source, tree = parsed(path)
            lines = source.count("\n")
            if lines > MAX_LINES and rel not in DATA_TABLES:
                out.append(f"{rel}: {lines} lines (limit ~{MAX_LINES - 20})")
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    depth = _depth(node)
                    if depth > MAX_DEPTH:
                        out.append(f"{rel}:{node.lineno} {node.name}() nested {depth} deep")
    return out


def big_classes(root: Path) -> list[str]:
    """Classes in ``PIPELINE`` longer than ``MAX_CLASS_LINES`` (from ``class`` to its end)."""
    out: list[str] = []
    for room in PIPELINE:
        for path in sorted((root / room).rglob("*.py")) if (root / room).is_dir() else ():
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(parsed(path)[1]):
                if isinstance(node, ast.ClassDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > MAX_CLASS_LINES:
                        out.append(f"{rel}:{node.lineno} class {node.name}: {size} lines")
    return out


def test_the_project_keeps_its_layers() -> None:
    found = violations(ROOT)
    assert not found, "layering rules broken:\n" + "\n".join(found)


def test_modules_stay_small_and_flat() -> None:
    assert shape_problems(ROOT) == []


def test_no_class_of_the_exchange_pipeline_is_over_400_lines() -> None:
    assert big_classes(ROOT) == [], f"split by composition (limit {MAX_CLASS_LINES} lines)"


def test_the_class_size_check_catches_a_big_class(tmp_path: Path) -> None:
    """A class of 401 lines in either room is named (nested ones too); 400 lines pass, and
    so does a big class outside the pipeline's rooms."""
    body = "    x = 1\n"
    big = "class Big:\n" + body * 400  # 401 lines
    ok = "class Fits:\n" + body * 399  # 400 lines
    nested = "def f() -> None:\n    class Inner:\n" + "        y = 1\n" * 400
    _write(tmp_path, "mcp_proxy/relay/http/a.py", ok + big)
    _write(tmp_path, "mcp_proxy/forward/b.py", nested)
    _write(tmp_path, "mcp_proxy/analysis/c.py", big)
    assert big_classes(tmp_path) == [
        "mcp_proxy/relay/http/a.py:401 class Big: 401 lines",
        "mcp_proxy/forward/b.py:2 class Inner: 401 lines",
    ]


def test_no_new_use_of_another_modules_private_names() -> None:
    found = set(private_uses(ROOT))
    new = sorted(found - PRIVATE_USES_ALLOWED)
    gone = sorted(PRIVATE_USES_ALLOWED - found)
    assert not new, "no module calls another module's private names:\n" + "\n".join(new)
    assert not gone, "fixed: remove from PRIVATE_USES_ALLOWED:\n" + "\n".join(gone)


def test_the_private_check_catches_each_form(tmp_path: Path) -> None:
    """``from m import _x``, ``m._x`` (via ``import … as``, ``from pkg import m``, a dotted
    ``import``, a function-local import); not a parameter or a third-party name that shadows a
    module, nor a module's own private names."""
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(tmp_path, "addons/__init__.py", "_third_party = 1\n")
    _write(tmp_path, "mcp_proxy/a.py", "_x = 1\nprint(_x)\n")
    _write(tmp_path, "mcp_proxy/pkg/__init__.py", "")
    _write(tmp_path, "mcp_proxy/pkg/b.py", "import mcp_proxy.a\n_y = mcp_proxy.a._x\n")
    _write(
        tmp_path,
        "mcp_proxy/c.py",
        """\
        from mcp_proxy.a import _x
        from mcp_proxy.pkg import b
        import mcp_proxy.a as alias
        from mitmproxy import addons
        print(b._y, alias._x, addons._third_party)

        def f(a):
            return a._own

        def g():
            from mcp_proxy import a
            return a._x
        """,
    )
    assert private_uses(tmp_path) == [
        "mcp_proxy.c imports mcp_proxy.a._x",
        "mcp_proxy.c uses mcp_proxy.a._x",
        "mcp_proxy.c uses mcp_proxy.pkg.b._y",
        "mcp_proxy.pkg.b uses mcp_proxy.a._x",
    ]


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


#: A tree that breaks every rule once (and keeps some that look close but are allowed: the CLI
#: importing typer and the dashboard, a relay importing the recorder contract).
BROKEN_TREE = {
    "mcp_proxy/__init__.py": "",
    "mcp_proxy/frames.py": "from mcp_proxy.store import queries\n",
    "mcp_proxy/recorder/__init__.py": "",
    "mcp_proxy/recorder/contract.py": "from mcp_proxy.analysis import core\n",
    "mcp_proxy/relay/__init__.py": "",
    "mcp_proxy/relay/stdio.py": (
        "from mcp_proxy.recorder import contract\nfrom mcp_proxy.forward import addon\n"
        "from mcp_proxy.analysis import core\n"
    ),
    "mcp_proxy/forward/__init__.py": "",
    "mcp_proxy/forward/addon.py": "from mcp_proxy.relay import stdio\n",
    "mcp_proxy/faults/__init__.py": "",
    "mcp_proxy/faults/engine.py": "from mcp_proxy.relay import stdio\n",
    "mcp_proxy/store/__init__.py": "",
    "mcp_proxy/store/queries.py": "from ..recorder import Recorder\n",
    "mcp_proxy/analysis/__init__.py": "",
    "mcp_proxy/analysis/core.py": "def f():\n    import dashboard.app\n",
    "mcp_proxy/recording/__init__.py": "",
    "mcp_proxy/recording/junit.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mcp_proxy.diff import R\n"
    ),
    "mcp_proxy/diff.py": "from mcp_proxy.recording import junit\n",
    "mcp_proxy/mock/__init__.py": "",
    "mcp_proxy/mock/__main__.py": "from mcp_proxy.entry import main\n",
    "mcp_proxy/otel/__init__.py": "",
    "mcp_proxy/otel/live.py": "from mcp_proxy.recording import otlp\n",
    "mcp_proxy/otel/spans.py": "from mcp_proxy.store.queries import Store\n",
    "mcp_proxy/forward/tape.py": "from mcp_proxy.forward.lean import LeanForward\n",
    "mcp_proxy/store/rows.py": "import sqlalchemy\n",
    "mcp_proxy/hosts/__init__.py": "",
    "mcp_proxy/hosts/doctor.py": "from mcp_proxy.recording import junit\n",
    "mcp_proxy/intercept/__init__.py": "",
    "mcp_proxy/intercept/desk.py": "from mcp_proxy.relay import stdio\n",
    "mcp_proxy/demo.py": "import typer\nfrom dashboard import app\n",
    "mcp_proxy/entry.py": "from mcp_proxy import cli\n",
    "mcp_proxy/cli.py": "import typer\n",
    "mcp_proxy/commands/__init__.py": "",
    "mcp_proxy/commands/browse.py": "import typer\nimport dashboard.app\n",
    "dashboard/__init__.py": "",
    "dashboard/app.py": "from mcp_proxy.commands import browse\nimport sqlalchemy\n",
    "addons/record.py": "import dashboard\n",
}


def test_the_checker_catches_a_deliberate_violation(tmp_path: Path) -> None:
    """The rules are not vacuous: a tree that breaks each of them is reported, line by line."""
    for rel, text in BROKEN_TREE.items():
        _write(tmp_path, rel, text)
    found = violations(tmp_path)
    core, recorder, relays, relay_fwd, faults, store, analysis, recording = (
        r.name for r in RULES[:8]
    )
    travel, hosts, dash_cli, typer, sql, dash, otel, intercept, tape, addon, rows = (
        r.name for r in RULES[8:]
    )
    expected = [
        ("addons.record imports dashboard", relays),
        ("addons.record imports dashboard", dash),
        ("dashboard.app imports mcp_proxy.commands", dash_cli),
        ("dashboard.app imports mcp_proxy.commands.browse", dash_cli),
        ("dashboard.app imports mcp_proxy.commands", typer),
        ("dashboard.app imports mcp_proxy.commands.browse", typer),
        ("dashboard.app imports sqlalchemy", sql),
        ("mcp_proxy.analysis.core imports dashboard.app", analysis),
        ("mcp_proxy.analysis.core imports dashboard.app", dash),
        ("mcp_proxy.demo imports typer", typer),
        ("mcp_proxy.demo imports dashboard.app", dash),
        ("mcp_proxy.faults.engine imports mcp_proxy.relay", faults),
        ("mcp_proxy.faults.engine imports mcp_proxy.relay.stdio", faults),
        ("mcp_proxy.forward.addon imports mcp_proxy.relay", addon),
        ("mcp_proxy.forward.addon imports mcp_proxy.relay.stdio", addon),
        ("mcp_proxy.forward.tape imports mcp_proxy.forward.lean", tape),
        ("mcp_proxy.forward.tape imports mcp_proxy.forward.lean.LeanForward", tape),
        ("mcp_proxy.frames imports mcp_proxy.store", core),
        ("mcp_proxy.frames imports mcp_proxy.store.queries", core),
        ("mcp_proxy.hosts.doctor imports mcp_proxy.recording", hosts),
        ("mcp_proxy.hosts.doctor imports mcp_proxy.recording.junit", hosts),
        ("mcp_proxy.intercept.desk imports mcp_proxy.relay", intercept),
        ("mcp_proxy.intercept.desk imports mcp_proxy.relay.stdio", intercept),
        ("mcp_proxy.mock.__main__ imports mcp_proxy.entry", travel),
        ("mcp_proxy.mock.__main__ imports mcp_proxy.entry.main", travel),
        ("mcp_proxy.mock.__main__ imports mcp_proxy.entry", typer),
        ("mcp_proxy.mock.__main__ imports mcp_proxy.entry.main", typer),
        ("mcp_proxy.otel.live imports mcp_proxy.recording", otel),
        ("mcp_proxy.otel.live imports mcp_proxy.recording.otlp", otel),
        ("mcp_proxy.otel.spans imports mcp_proxy.store.queries", otel),
        ("mcp_proxy.otel.spans imports mcp_proxy.store.queries.Store", otel),
        ("mcp_proxy.recorder.contract imports mcp_proxy.analysis", recorder),
        ("mcp_proxy.recorder.contract imports mcp_proxy.analysis.core", recorder),
        ("mcp_proxy.recording.junit imports mcp_proxy.diff", recording),
        ("mcp_proxy.recording.junit imports mcp_proxy.diff.R", recording),
        ("mcp_proxy.relay.stdio imports mcp_proxy.analysis", relays),
        ("mcp_proxy.relay.stdio imports mcp_proxy.analysis.core", relays),
        ("mcp_proxy.relay.stdio imports mcp_proxy.forward", relay_fwd),
        ("mcp_proxy.relay.stdio imports mcp_proxy.forward.addon", relay_fwd),
        ("mcp_proxy.store.queries imports mcp_proxy.recorder", store),
        ("mcp_proxy.store.queries imports mcp_proxy.recorder.Recorder", store),
        ("mcp_proxy.store.rows imports sqlalchemy", rows),
    ]
    assert found == [f"{line} ({rule})" for line, rule in expected]
    broken = {line.rsplit(" (", 1)[1].rstrip(")") for line in found}
    assert broken == {rule.name for rule in RULES}, "a rule the broken tree does not break"


def test_the_shape_check_catches_a_deep_function(tmp_path: Path) -> None:
    body = "def f(x):\n" + "".join(
        "    " * (i + 1) + f"if x > {i}:\n" for i in range(MAX_DEPTH + 1)
    )
    body += "    " * (MAX_DEPTH + 2) + "return x\n"
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(tmp_path, "mcp_proxy/deep.py", body)
    _write(tmp_path, "mcp_proxy/big.py", "x = 1\n" * (MAX_LINES + 1))
    assert shape_problems(tmp_path) == [
        f"mcp_proxy/big.py: {MAX_LINES + 1} lines (limit ~{MAX_LINES - 20})",
        f"mcp_proxy/deep.py:1 f() nested {MAX_DEPTH + 1} deep",
    ]
