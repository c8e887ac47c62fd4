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
CLI = ("mcp_proxy.cli", "mcp_proxy.commands", "mcp_proxy.entry", "mcp_proxy.__main__")


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
        "relays import only the core, the recorder contract and the fault engine",
        ("mcp_proxy.relay", "mcp_proxy.forward", "addons"),
        only=(*CORE, *RECORDER_CONTRACT, *FAULTS, "mcp_proxy.relay", "mcp_proxy.forward"),
    ),
    Rule("the fault engine imports only the core", FAULTS, only=(*CORE, *FAULTS)),
    Rule(
        "the store imports no relay, recorder, analysis or CLI",
        ("mcp_proxy.store",),
        forbidden=("mcp_proxy.relay", "mcp_proxy.recorder", "mcp_proxy.analysis", *CLI),
    ),
    Rule(
        "analysis imports no relay, dashboard or CLI",
        ("mcp_proxy.analysis",),
        forbidden=("mcp_proxy.relay", "dashboard", *CLI),
    ),
    Rule(
        "nothing outside commands/ and cli.py imports typer or a command module",
        ("mcp_proxy", "dashboard", "addons"),
        forbidden=("typer", "mcp_proxy.commands", "mcp_proxy.cli"),
        exempt=CLI,
    ),
    Rule(
        "only the store speaks SQL",
        ("mcp_proxy", "dashboard", "addons"),
        forbidden=("sqlalchemy", "sqlite3", "psycopg", "asyncpg", "aiosqlite"),
        exempt=("mcp_proxy.store",),
    ),
    Rule(
        "nothing in mcp_proxy/ but the CLI imports the dashboard",
        ("mcp_proxy",),
        forbidden=("dashboard",),
        exempt=CLI,
    ),
)

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


def _under(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> set[str]:
    """Every module name ``path`` imports (relative imports resolved against ``module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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
                    # ``from mcp_proxy import x`` resolves to the package itself: allowed only
                    # as far as ``x`` is (checked through the ``mcp_proxy.x`` entry).
                    bad = bad and target not in project
                else:
                    bad = _under(target, rule.forbidden)
                if bad:
                    found.append(f"{module} imports {target} ({rule.name})")
    return found


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
            source = path.read_text(encoding="utf-8")
            lines = source.count("\n")
            if lines > MAX_LINES and rel not in DATA_TABLES:
                out.append(f"{rel}: {lines} lines (limit ~{MAX_LINES - 20})")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    depth = _depth(node)
                    if depth > MAX_DEPTH:
                        out.append(f"{rel}:{node.lineno} {node.name}() nested {depth} deep")
    return out


def test_the_project_keeps_its_layers() -> None:
    assert violations(ROOT) == []


def test_modules_stay_small_and_flat() -> None:
    assert shape_problems(ROOT) == []


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_checker_catches_a_deliberate_violation(tmp_path: Path) -> None:
    """The rules are not vacuous: a tree that breaks each of them is reported, line by line."""
    _write(tmp_path, "mcp_proxy/__init__.py", "")
    _write(tmp_path, "mcp_proxy/frames.py", "from mcp_proxy.store import queries\n")
    _write(tmp_path, "mcp_proxy/relay/__init__.py", "")
    _write(tmp_path, "mcp_proxy/relay/stdio.py", "from mcp_proxy.analysis import core\n")
    _write(tmp_path, "mcp_proxy/faults/__init__.py", "")
    _write(tmp_path, "mcp_proxy/faults/engine.py", "from mcp_proxy.relay import stdio\n")
    _write(tmp_path, "mcp_proxy/store/__init__.py", "")
    _write(tmp_path, "mcp_proxy/store/queries.py", "from ..recorder import Recorder\n")
    _write(tmp_path, "mcp_proxy/analysis/__init__.py", "")
    _write(tmp_path, "mcp_proxy/analysis/core.py", "def f():\n    import dashboard.app\n")
    _write(tmp_path, "mcp_proxy/demo.py", "import typer\nfrom dashboard import app\n")
    _write(tmp_path, "mcp_proxy/commands/__init__.py", "")
    _write(tmp_path, "mcp_proxy/commands/browse.py", "import typer\nimport dashboard.app\n")
    _write(tmp_path, "dashboard/__init__.py", "")
    _write(
        tmp_path, "dashboard/app.py", "from mcp_proxy.commands import browse\nimport sqlalchemy\n"
    )
    cmd = "(nothing outside commands/ and cli.py imports typer or a command module)"
    dash = "(nothing in mcp_proxy/ but the CLI imports the dashboard)"
    core = "(core imports nothing of the project)"
    relay = "(relays import only the core, the recorder contract and the fault engine)"
    faults = "(the fault engine imports only the core)"
    store = "(the store imports no relay, recorder, analysis or CLI)"
    assert violations(tmp_path) == [
        f"dashboard.app imports mcp_proxy.commands {cmd}",
        f"dashboard.app imports mcp_proxy.commands.browse {cmd}",
        "dashboard.app imports sqlalchemy (only the store speaks SQL)",
        "mcp_proxy.analysis.core imports dashboard.app (analysis imports no relay, dashboard or CLI)",
        f"mcp_proxy.analysis.core imports dashboard.app {dash}",
        f"mcp_proxy.demo imports typer {cmd}",
        f"mcp_proxy.demo imports dashboard {dash}",
        f"mcp_proxy.demo imports dashboard.app {dash}",
        f"mcp_proxy.faults.engine imports mcp_proxy.relay {faults}",
        f"mcp_proxy.faults.engine imports mcp_proxy.relay.stdio {faults}",
        f"mcp_proxy.frames imports mcp_proxy.store {core}",
        f"mcp_proxy.frames imports mcp_proxy.store.queries {core}",
        f"mcp_proxy.relay.stdio imports mcp_proxy.analysis {relay}",
        f"mcp_proxy.relay.stdio imports mcp_proxy.analysis.core {relay}",
        f"mcp_proxy.store.queries imports mcp_proxy.recorder {store}",
        f"mcp_proxy.store.queries imports mcp_proxy.recorder.Recorder {store}",
    ]


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
