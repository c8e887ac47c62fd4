"""Files built once per test run and shared by the pytest-xdist workers.

With ``--dist loadfile`` the modules that read a costly session fixture (the dashboard's
recorded sessions, the generated benchmark database) land on both workers. Instead of each
worker building its own, the first one to ask builds the file under an exclusive lock (an
``fcntl`` lock on a file beside it: stdlib, released by the kernel if the worker dies) in the
run's shared temporary folder, renames it into place, and every worker copies it into a
folder of its own (tests may write to their copy). Without ``fcntl`` each worker builds its own.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux or macOS
    fcntl = None  # type: ignore[assignment]


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of the whole run: every worker's ``basetemp`` is inside it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The file ``name``, made by ``build(path)`` once for the whole run (see the module doc)."""
    if fcntl is None:
        path = tmp_path_factory.mktemp("built") / name
        build(path)
        return path
    folder = run_folder(tmp_path_factory) / "built-once"
    folder.mkdir(exist_ok=True)
    target = folder / name
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            work = folder / f"{name}.building-{os.getpid()}"
            work.mkdir()
            build(work / name)
            os.replace(work / name, target)
    return target


ROOT = Path(__file__).resolve().parents[2]


def load_bench() -> Any:
    """``benchmarks/bench_dashboard.py`` as a module (benchmarks are not a package)."""
    path = ROOT / "benchmarks" / "bench_dashboard.py"
    spec = importlib.util.spec_from_file_location("bench_dashboard", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The benchmark's generated database (one big session among 400 small ones, 60,000
    frames; the big one larger than what the dashboard analyses whole), built once per run
    for the dashboard's query-plan tests on SQLite and on PostgreSQL. Read-only: copy it
    (:func:`copy_sqlite`) to write to it."""
    from dashboard.analysis import INLINE_LIMIT

    def build(path: Path) -> None:
        load_bench().generate(path, sessions_n=400, frames_n=60_000, big=INLINE_LIMIT + 5_000)

    return built_once(tmp_path_factory, "bench.db", build)


def copy_sqlite(source: Path, destination: Path) -> Path:
    """A consistent copy of a SQLite database (its WAL included), by SQLite's backup API."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(destination)) as dst:
        src.backup(dst)
    return destination
