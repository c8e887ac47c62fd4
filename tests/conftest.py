"""Fixtures shared by every test package: a temporary database and the mcptape command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def mcptape_cmd() -> list[str]:
    """The installed console script, exactly as a host would launch it."""
    script = BIN / "mcptape"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "mcp_proxy.cli"]


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rec.db"


@pytest.fixture
def db_url(db_path: Path) -> str:
    return "sqlite:///" + str(db_path)
