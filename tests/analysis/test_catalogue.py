"""The catalogue is the single source of finding codes; docs/taxonomy.md is generated from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mcp_proxy.analysis.catalogue import CATALOGUE, FOREIGN_CODES, SUMMARY_CODE, at_least, markdown

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "taxonomy.md"


def test_taxonomy_doc_is_generated_from_the_catalogue() -> None:
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/taxonomy.md drifted from mcp_proxy/analysis/catalogue.py; regenerate it with"
        " `python -m mcp_proxy.analysis.catalogue --markdown > docs/taxonomy.md`"
    )


def test_the_generator_command_prints_the_doc() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mcp_proxy.analysis.catalogue", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout == DOC.read_text(encoding="utf-8")
    assert "RuntimeWarning" not in out.stderr


def test_every_entry_is_complete() -> None:
    for code, e in CATALOGUE.items():
        assert re.fullmatch(r"[a-z]+\.[a-z0-9_]+", code), code
        assert e.severity.value in ("error", "warning", "info")
        assert e.title and len(e.title) < 80 and "\n" not in e.title, code
        assert len(e.explanation) > 40, code
        if code in FOREIGN_CODES or code == SUMMARY_CODE:
            continue
        assert e.spec.startswith("https://"), code
        assert f"### {code}\n" in DOC.read_text(encoding="utf-8")


def test_severity_thresholds() -> None:
    assert at_least("error", "warning") and at_least("warning", "warning")
    assert not at_least("info", "warning") and at_least("info", "info")
